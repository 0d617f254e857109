"""Store files both ways: a store Apache RocketMQ 4.9.8's broker wrote opens in rmqd, and the reverse.

A user moves a broker by stopping it (SIGTERM: a clean shutdown) and starting the other on its files;
both must then serve the same messages at the same queue and commitlog offsets with the same msgIds,
the same key-index answers, topics, subscription groups, consumer and delay offsets. One reader
(rmq.testing.store_snapshot) asks both servers the same questions; the Java broker is the judge.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.client import Message, MessageQueue, Producer
from rmq.protocol.message import decode_message
from rmq.testing.daemon import RmqdProcess, eventually
from rmq.testing.java import JavaBroker
from rmq.testing.store_snapshot import (
    PENDING_LEVEL,
    TOPICS,
    StoreReader,
    differences,
    populate,
    settled,
    snapshot,
)

pytestmark = pytest.mark.java

#: the same store geometry on both sides (a store opens only with its own segment sizes, as in RocketMQ):
#: small segments so the messages span several commitlog, consume queue and index files
GEOMETRY: dict[str, Any] = {"mappedFileSizeCommitLog": 1024 * 1024, "mappedFileSizeConsumeQueue": 60 * 20,
                            "maxHashSlotNum": 512, "maxIndexNum": 1024, "flushDelayOffsetInterval": 1000}
#: the writer checks transactions every second (so the check's offsets are in the store); the reader not
#: while it is compared (a check writes those offsets)
WRITER = {**GEOMETRY, "transactionCheckInterval": 1000}
READER = {**GEOMETRY, "transactionCheckInterval": 3_600_000}
#: RocketMQ 5's system topics and groups rmqd has and 4.9.8 has not (POP revive log, timer wheel, the
#: transaction op topic, the transaction check's group); a 4.9.8 broker keeps them once they are in its files
ROCKETMQ5_EXTRAS = ("topics/RMQ_SYS_TRANS_OP_HALF_TOPIC", "topics/rmq_sys_REVIVE_LOG_DefaultCluster", "queues/rmq_sys_REVIVE_LOG_DefaultCluster",
                    "topics/rmq_sys_wheel_timer", "queues/rmq_sys_wheel_timer", "groups/CID_RMQ_SYS_TRANS")
#: what RocketMQ's broker adds to its tables at every start and rmqd does not have: the benchmark tool's
#: 1024-queue topic and the groups of Alibaba's ONS HTTP proxy; in a store they came from, rmqd keeps them
JAVA_BUILTINS = ("topics/BenchmarkTest", "queues/BenchmarkTest", "groups/CID_ONS-HTTP-PROXY",
                 "groups/CID_ONSAPI_OWNER", "groups/CID_ONSAPI_PERMISSION", "groups/CID_ONSAPI_PULL")


DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"  # RocketMQ's default


def delayed(addr: str) -> list[Any]:
    """The delivered delayed messages (StoreDelay's two queues)."""
    async def run() -> list[Any]:
        async with StoreReader(addr) as r:
            out = []
            for q in range(TOPICS["StoreDelay"]):
                lo, hi = await r.offsets("StoreDelay", q)
                out += [decode_message(raw) for raw in await r.pull_all("StoreDelay", q, lo, hi)]
            return out
    return anyio.run(run)  # type: ignore[no-any-return]


def delivered(addr: str) -> int:
    return len(delayed(addr))


async def send_one(namesrv: str) -> Any:
    async with Producer("store_after_move", namesrv, retry_times=0) as p:
        return await p.send(Message("StoreNormal", b"after the move"), queue=MessageQueue("StoreNormal", "broker-a", 0))


#: the delay levels with the pending messages' level made short: they come due once the store has moved
PENDING_DUE = " ".join("1s" if i == PENDING_LEVEL - 1 else d for i, d in enumerate(DELAY_LEVELS.split()))


def _goes_on(namesrv: str, broker: str, after: dict[str, Any]) -> None:
    """The moved store goes on: the pending delayed messages come due (their level shortened for the test)
    and are delivered once, the due ones not again; a new message takes the next queue and commitlog
    offsets."""
    eventually(lambda: delivered(broker) == 6, 60, "the pending delayed messages delivered")
    assert sorted(m.body for m in delayed(broker)) == \
        sorted([f"due-{i}".encode() for i in range(3)] + [f"pending-{i}".encode() for i in range(3)])
    sent = anyio.run(send_one, namesrv)
    assert sent.queue_offset == after["queues"]["StoreNormal"][0][1]
    assert int(sent.offset_msg_id[16:], 16) >= max(m["commitLogOffset"] + m["storeSize"] for m in after["messages"])


def _rmqd(workdir: Path, store: Path, conf: dict[str, Any], port: int | None = None) -> RmqdProcess:
    return RmqdProcess(workdir, broker_port=port, broker_conf={
        "storePathRootDir": str(store), "storePathCommitLog": str(store / "commitlog"), **conf})


def _compare(before: dict[str, Any], after: dict[str, Any], names: tuple[str, str]) -> None:
    diffs = [d for d in differences(before, after, names)
             if not (d.split(":")[0] in ROCKETMQ5_EXTRAS and ": only on rmqd:" in d)
             and not (d.split(":")[0] in JAVA_BUILTINS and ": only on java:" in d)]
    assert not diffs, "\n".join(diffs)


def _write(namesrv: str, broker: str) -> dict[str, Any]:
    counts = anyio.run(populate, namesrv, broker)
    eventually(lambda: settled(broker, counts), 90, "delayed messages delivered and transactions ended")
    return snapshot(broker)


def _covered(snap: dict[str, Any], store: Path) -> None:
    """The comparison means something: every kind of message is there, the files span several segments,
    and every key finds its messages."""
    per_topic: dict[str, int] = {}
    for m in snap["messages"]:
        per_topic[m["topic"]] = per_topic.get(m["topic"], 0) + 1
    assert per_topic == {**per_topic, "StoreNormal": 300, "StoreOrder": 40, "StoreBatch": 30, "StoreDelay": 3,
                         "StoreTx": 4, "SCHEDULE_TOPIC_XXXX": 6, "RMQ_SYS_TRANS_HALF_TOPIC": 8,
                         "RMQ_SYS_TRANS_OP_HALF_TOPIC": 8}, per_topic
    assert len(list((store / "commitlog").iterdir())) >= 2
    assert len(list((store / "consumequeue" / "StoreNormal" / "0").iterdir())) >= 2
    assert len(list((store / "index").iterdir())) >= 2
    user = [k for k in snap["keys"] if k.split("#")[0] in ("StoreNormal", "StoreOrder", "StoreBatch", "StoreTx")]
    assert len(user) > 600 and all(snap["keys"][k] for k in user)
    assert snap["consumerOffsets"]["StoreNormal@store_group_a"] == {0: 5, 1: 12, 2: 19, 3: 26}


def test_java_store_opens_in_rmqd(tmp_path: Path, java_home: Path) -> None:
    java = JavaBroker(tmp_path / "java", conf=WRITER)
    with java:
        before = _write(java.namesrv_addr, java.broker_addr)
        java.stop_broker()
    # the same broker port: a msgId names its broker's address, so viewMessage by id still finds it
    with _rmqd(tmp_path / "rmqd", java.store_dir, READER, java.broker_port) as rmqd:
        after = snapshot(rmqd.broker_addr)
    _covered(before, java.store_dir)
    _compare(before, after, ("java", "rmqd"))
    with _rmqd(tmp_path / "rmqd", java.store_dir, {**READER, "messageDelayLevel": PENDING_DUE}, java.broker_port) as rmqd:
        _goes_on(rmqd.namesrv_addr, rmqd.broker_addr, after)


def test_rmqd_store_opens_in_java(tmp_path: Path, java_home: Path) -> None:
    store = tmp_path / "rmqd" / "store"
    with _rmqd(tmp_path / "rmqd", store, WRITER) as rmqd:
        before = _write(rmqd.namesrv_addr, rmqd.broker_addr)
        port = rmqd.broker_port
    with JavaBroker(tmp_path / "java", broker_port=port, conf={
            **READER, "storePathRootDir": store, "storePathCommitLog": store / "commitlog"}) as java:
        after = snapshot(java.broker_addr)
    _covered(before, store)
    _compare(before, after, ("rmqd", "java"))
    with JavaBroker(tmp_path / "java2", broker_port=port, conf={
            **READER, "storePathRootDir": store, "storePathCommitLog": store / "commitlog",
            "messageDelayLevel": PENDING_DUE}) as java:
        _goes_on(java.namesrv_addr, java.broker_addr, after)
