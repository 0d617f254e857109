"""The exactly-once Spark sink's broker side against rmqd and the Java 4.9.8 broker (no Spark needed):
half messages sent one by one, END_TRANSACTION sent as a request (Java's producer sends it oneway;
the sink needs to know it arrived), and a half left alone resolved by the broker's check, answered
by the sink's checker from a commit log. Both brokers must acknowledge and store the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmq.testing.daemon import eventually

from .judge import Judge

pytestmark = pytest.mark.java


def _scenario(namesrv: str, topic: str, group: str, log: Path) -> dict[str, Any]:
    from rmq.client import Message, PullStatus
    from rmq.client.blocking import Admin, PullConsumer
    from rmq.connectors.spark import _access
    from rmq.connectors.spark._exactly_once import BATCH_PROP, LOG_PROP, TxLog, decide

    with Admin(namesrv_addr=namesrv) as admin:
        admin.create_topic(topic, 2)
    with _access.Session(namesrv, 5.0) as s:
        p = s.tx_producer(group, 5.0, lambda props: decide(props, 0.0))
        queues = eventually(lambda: s.publish_queues(topic), 30, f"a route for {topic}")
        props = {LOG_PROP: str(log), BATCH_PROP: "7"}
        halves = p.send_halves([(queues[i % 2], Message(topic, f"h{i}".encode(), properties=props))
                                for i in range(6)])
        invisible = [m for q in queues for m in _pull_all(namesrv, q)]
        committed = p.end(halves[:3], commit=True)
        rolled_back = p.end(halves[3:5], commit=False)
        # h5: the driver "died" after logging it as committed; the broker's check asks the checker
        TxLog(str(log)).write_commit(7, [h.msg_id for h in halves[:3]] + [halves[5].msg_id])
        TxLog(str(log)).write_ended(7, [h.msg_id for h in halves[:3]])

        def bodies() -> list[str]:
            with PullConsumer("sink_tx_reader", namesrv_addr=namesrv) as c:
                out = []
                for mq in c.fetch_queues(topic):
                    res = c.pull(mq, 0, 32)
                    if res.status is PullStatus.FOUND:
                        out += [m.body.decode() for m in res.messages]
                return sorted(out)

        eventually(lambda: len(bodies()) == 4, 120, "the check committed h5")
        final = bodies()
    return {"invisible_before_end": len(invisible), "acked_commit": len(committed), "acked_rollback": len(rolled_back),
            "acked_ids_match": committed == {h.msg_id for h in halves[:3]}, "stored": final}


def _pull_all(namesrv: str, q: Any) -> list[Any]:
    from rmq.client import PullStatus
    from rmq.client.blocking import PullConsumer
    from rmq.kernel import MessageQueue

    with PullConsumer("sink_tx_peek", namesrv_addr=namesrv) as c:
        res = c.pull(MessageQueue(q.topic, q.broker, q.queue_id), 0, 32)
        return list(res.messages) if res.status is PullStatus.FOUND else []


def test_halves_acknowledged_ends_and_a_check_alike(judge: Judge, names: str, tmp_path: Path) -> None:
    seen = {side.name: _scenario(side.namesrv_addr, names, f"PG_{names}", tmp_path / side.name)
            for side in judge.sides}
    assert seen["rmqd"] == seen["java"], json.dumps(seen, indent=1)
    assert seen["java"] == {"invisible_before_end": 0, "acked_commit": 3, "acked_rollback": 2, "acked_ids_match": True,
                            "stored": ["h0", "h1", "h2", "h5"]}
