"""RocketMQ 5's Prometheus metrics from a real rmqd: off by default, served with metricsExporterType = PROM,
figures that follow what was produced and consumed (lag for a group with a consumer online)."""

from __future__ import annotations

import urllib.request
from typing import Any

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rmq.client import Admin, Message, Producer, PushConsumer
from rmq.testing.daemon import RmqdProcess, free_port

pytestmark = pytest.mark.anyio


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
    assert value(m, "rocketmq_throughput_in_total") > 7 * 2
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
        assert value(scrape(port), "rocketmq_messages_out_total") >= 7
        async with Producer("MET_P2", ns) as p:
            await p.send(Message("MetT", b"late"))
    m = scrape(port)  # the consumer is gone: no lag series for its group (RocketMQ's rule)
    assert value(m, "rocketmq_consumer_lag_messages", consumer_group="MET_C") is None
    assert value(m, "rocketmq_messages_in_total", topic="MetT") == 8


def test_metrics_are_off_by_default(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    assert not any("Prometheus metrics on" in ln for ln in proc.log_lines())
