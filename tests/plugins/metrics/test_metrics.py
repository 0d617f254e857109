"""RocketMQ 5's Prometheus metrics from a real rmqd: off by default, served with metricsExporterType = PROM,
figures that follow what was produced and consumed (lag for a group with a consumer online)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rmq.client import Admin, Message, Producer, PushConsumer
from rmq.testing.daemon import RmqdProcess, free_port

pytestmark = pytest.mark.anyio
DASHBOARD = Path(__file__).resolve().parents[3] / "examples" / "grafana-rmq.json"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()  # noqa: S310
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(m: dict[Any, float], name: str, **labels: str) -> float | None:
    for (n, ls), v in m.items():
        if n == name and all(dict(ls).get(k) == want for k, want in labels.items()):
            return v
    return None


async def test_prometheus_metrics(rmqd_factory: Any) -> None:
    port = free_port()
    proc: RmqdProcess = rmqd_factory(broker_conf={"metricsExporterType": "PROM", "metricsPromExporterPort": port})
    ns = proc.namesrv_addr
    async with Admin(ns) as a:
        await a.create_topic("MetT", 2)
    async with Producer("MET_P", ns) as p:
        for i in range(7):
            await p.send(Message("MetT", b"m%d" % i))
    m = scrape(port)
    assert value(m, "rocketmq_messages_in_total", topic="MetT", cluster="DefaultCluster", node_type="broker") == 7
    assert value(m, "rocketmq_topic_number") >= 1 and value(m, "rocketmq_storage_size") > 0
    assert value(m, "rocketmq_throughput_in_total", topic="MetT") == sum(len(b"m%d" % i) for i in range(7))
    seen = 0

    async def count(msg: Any) -> None:
        nonlocal seen
        seen += 1

    fast = {"rebalance_interval": 1.0, "heartbeat_interval": 1.0, "persist_interval": 0.2, "pull_retry_delay": 0.2}
    async with PushConsumer("MET_C", ns, listener=count, consume_from_where="FIRST_OFFSET", **fast) as c:
        c.subscribe("MetT")
        with anyio.fail_after(30):
            while seen < 7:  # noqa: ASYNC110
                await anyio.sleep(0.05)
            while value(scrape(port), "rocketmq_consumer_lag_messages", topic="MetT",  # noqa: ASYNC110
                        consumer_group="MET_C") != 0:
                await anyio.sleep(0.2)  # the consumer's offsets reach the broker
        m = scrape(port)
        assert value(m, "rocketmq_messages_out_total", topic="MetT", consumer_group="MET_C") >= 7
        assert value(m, "rocketmq_throughput_out_total", topic="MetT", consumer_group="MET_C") >= 7 * 2
        assert value(m, "rocketmq_consumer_connections", consumer_group="MET_C", consume_mode="push") == 1
        # every request was timed: sends (310) answered with 0, in the histogram's count and +Inf bucket
        sends = value(m, "rocketmq_rpc_latency_count", request_code="310", response_code="0")
        assert sends is not None and sends >= 7
        assert value(m, "rocketmq_rpc_latency_bucket", request_code="310", response_code="0", le="+Inf") == sends
        assert value(m, "rocketmq_broker_permission") == 6
        live = m
        # every series the bundled Grafana dashboard queries exists, with the labels it groups by
        dash = json.loads(DASHBOARD.read_text())  # noqa: ASYNC240 - a small local file
        exprs = [t["expr"] for panel in dash["panels"] for t in panel["targets"]]
        exported = {name for name, _ in live}
        for expr in exprs:
            for name in re.findall(r"rocketmq_[a-z_]+", expr):
                assert name in exported or f"{name}_total" in exported, (name, expr)
                labels = {k for (n, ls) in m for k, _ in ls if n == name}
                for group in re.findall(r"by \(([^)]*)\)", expr):
                    wanted = {x.strip() for x in group.split(",")} - {"le"}
                    assert wanted <= labels | {"le"}, (name, wanted, labels)
        async with Producer("MET_P2", ns) as p:
            await p.send(Message("MetT", b"late"))
    m = scrape(port)  # the consumer is gone: no lag series for its group (RocketMQ's rule)
    assert value(m, "rocketmq_consumer_lag_messages", consumer_group="MET_C") is None
    assert value(m, "rocketmq_messages_in_total", topic="MetT") == 8



def test_metrics_are_off_by_default(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    assert not any("Prometheus metrics on" in ln for ln in proc.log_lines())
