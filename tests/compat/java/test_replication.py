"""Replication both ways: a Java 4.9.8 SLAVE follows an rmqd SYNC_MASTER, an rmqd SLAVE a Java SYNC_MASTER.

Classic HA streams the commitlog's own bytes, so a mixed master/slave pair is how a team moves a broker
group between rmqd and Apache RocketMQ without downtime. Each pair registers in one name server (the
master's), the master takes every kind of message (rmq.testing.store_snapshot.populate), its sends
return SEND_OK only once the other kind of slave acknowledged them, the two commitlogs are the same
bytes up to the master's end, and after the master is killed the slave serves what the master served:
the same messages at the same offsets, key lookups, topics, groups and consumer offsets.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.client import Admin, Message, Producer, PullConsumer, PullStatus, SendStatus
from rmq.protocol import jsonbody
from rmq.testing.daemon import Daemons, RmqdProcess, eventually, runtime_info
from rmq.testing.java import JavaBroker
from rmq.testing.store_snapshot import TOPICS, StoreReader, differences, populate, settled, snapshot

pytestmark = pytest.mark.java

#: the same geometry on both sides (a slave writes the master's bytes into segments of its own size);
#: the master checks transactions every second and persists delay offsets often, so it settles quickly
GEOMETRY: dict[str, Any] = {"mappedFileSizeCommitLog": 1024 * 1024, "mappedFileSizeConsumeQueue": 60 * 20,
                            "maxHashSlotNum": 512, "maxIndexNum": 1024, "flushDelayOffsetInterval": 1000,
                            "transactionCheckInterval": 1000}
SLAVE: dict[str, Any] = {**GEOMETRY, "brokerRole": "SLAVE", "brokerId": 1}


def commitlog(folder: Path, end: int) -> bytes:
    """The commitlog's bytes from 0 to ``end``, its segments read in order."""
    data = b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.name.isdigit())
    assert len(data) >= end, f"{folder}: {len(data)} bytes, fewer than {end}"
    return data[:end]


def max_phy(addr: str) -> int:
    return int(runtime_info(addr)["commitLogMaxOffset"])


def members(namesrv: str) -> list[tuple[str, str, int, str]]:
    async def run() -> list[tuple[str, str, int, str]]:
        async with Admin(namesrv) as admin:
            return (await admin.cluster_info()).members()
    return anyio.run(run)


def acked(namesrv: str) -> bool:
    """One send the SYNC_MASTER answers SEND_OK: its slave is connected and acknowledges."""
    async def run() -> bool:
        async with Producer("repl_probe", namesrv, retry_times=0) as p:
            r = await p.send(Message("StoreNormal", b"probe", keys="probe"))
            return r.status is SendStatus.SEND_OK
    return anyio.run(run)


def file_delay_offsets(path: Path) -> dict[int, int]:
    return {int(k): int(v) for k, v in jsonbody.loads(path.read_bytes())["offsetTable"].items()}


def sync_gaps(master: dict[str, Any], slave_addr: str, delay_file: Path | None) -> list[str]:
    """What the slave's metadata sync (every 10 s) has not yet copied of the master's topics, groups,
    consumer and delay offsets (``delay_file``: read them from the file the sync writes)."""
    async def run() -> list[str]:
        async with StoreReader(slave_addr) as r:
            got = {"topics": await r.topics(), "groups": await r.groups(),
                   "consumerOffsets": await r.consumer_offsets(),
                   "delayOffsets": file_delay_offsets(delay_file) if delay_file else await r.delay_offsets()}
        return differences({k: master[k] for k in got}, got, ("master", "slave"))
    return anyio.run(run)


def read_through_route(namesrv: str) -> list[str]:
    """Offset msgIds of StoreNormal's queue 0 as a client reads them, finding the broker by the route."""
    async def run() -> list[str]:
        async with PullConsumer("repl_route_reader", namesrv) as c:
            mq = next(q for q in await c.fetch_queues("StoreNormal") if q.queue_id == 0)
            ids: list[str] = []
            while True:
                r = await c.pull(mq, len(ids), 32)
                if r.status is not PullStatus.FOUND:
                    return ids
                ids += [m.offset_msg_id for m in r.messages]
    return anyio.run(run)


def replicate_and_fail_over(namesrv: str, master_addr: str, master_log: Path, slave_addr: str,
                            slave_log: Path, kill_master: Any, names: tuple[str, str],
                            delay_file: Path | None = None) -> None:
    """Write through the master, compare the commitlogs' bytes, kill the master, read the slave.
    ``delay_file``: the slave answers GET_ALL_DELAY_OFFSET from a table its sync does not update (a 4.9.8
    slave: only a restart or promotion loads the file the sync writes), so compare that file."""
    eventually(lambda: {(m[2], m[3]) for m in members(namesrv)} >= {(0, master_addr), (1, slave_addr)}, 120,
               "master and slave of broker-a registered in one name server")
    async def topics() -> None:
        async with Admin(namesrv) as admin:
            await admin.create_topic("StoreNormal", TOPICS["StoreNormal"], broker_addr=master_addr, wait=30)
    anyio.run(topics)
    eventually(lambda: acked(namesrv), 120, "a send acknowledged by the slave (SEND_OK from the SYNC_MASTER)")
    counts = anyio.run(populate, namesrv, master_addr)
    eventually(lambda: settled(master_addr, counts), 90, "delayed messages delivered and transactions ended")
    want = snapshot(master_addr)
    end = max_phy(master_addr)
    assert end > GEOMETRY["mappedFileSizeCommitLog"], "the stream crossed no segment end"
    eventually(lambda: max_phy(slave_addr) == end, 60, f"the slave's commitlog reaching {end}")
    assert commitlog(master_log, end) == commitlog(slave_log, end), "commitlogs differ"
    gaps: list[list[str]] = [[]]

    def copied() -> bool:
        try:
            gaps[0] = sync_gaps(want, slave_addr, delay_file)
        except Exception as e:  # a slave may refuse a table before it first synced
            gaps[0] = [repr(e)]
        return not gaps[0]
    try:
        eventually(copied, 60, "the slave's metadata sync")
    except AssertionError as e:
        raise AssertionError(f"{e}:\n" + "\n".join(gaps[0])) from None
    kill_master()
    got = snapshot(slave_addr)
    if delay_file is not None:
        got["delayOffsets"] = file_delay_offsets(delay_file)
    diffs = differences(want, got, names)
    assert not diffs, "\n".join(diffs)
    assert sum(1 for m in got["messages"] if m["topic"] == "StoreNormal") > 300
    # a client finds the slave through the name server once the master left the route
    queue0 = [m["offsetMsgId"] for m in want["messages"] if m["topic"] == "StoreNormal" and m["queueId"] == 0]
    eventually(lambda: read_through_route(namesrv) == queue0, 120, "queue 0 read from the slave via the route")


def test_java_slave_follows_rmqd_sync_master(tmp_path: Path, java_home: Path) -> None:
    with Daemons() as procs:
        # rmqd's name server on its own (it outlives the master); the Java slave's own one stays unused
        ns = procs.start(RmqdProcess(tmp_path / "ns", broker=False))
        master = procs.start(RmqdProcess(tmp_path / "rmqd", namesrv=False, broker_conf={
            **GEOMETRY, "brokerRole": "SYNC_MASTER", "namesrvAddr": ns.namesrv_addr}))
        with JavaBroker(tmp_path / "java", conf={**SLAVE, "haMasterAddress": f"127.0.0.1:{master.broker_port + 1}",
                                                   "namesrvAddr": ns.namesrv_addr}) as slave:
            replicate_and_fail_over(ns.namesrv_addr, master.broker_addr, tmp_path / "rmqd" / "store" / "commitlog",
                                    slave.broker_addr, slave.store_dir / "commitlog",
                                    lambda: master.stop(signal.SIGKILL), ("rmqd master", "java slave"),
                                    slave.store_dir / "config" / "delayOffset.json")


def test_rmqd_slave_follows_java_sync_master(tmp_path: Path, java_home: Path) -> None:
    with JavaBroker(tmp_path / "java", flush="ASYNC_FLUSH", conf={**GEOMETRY, "brokerRole": "SYNC_MASTER"}) as master, \
            Daemons() as procs:
        # no haMasterAddress: the slave learns its master's HA address from the Java name server's answer
        # to its registration, as a 4.9 slave does
        slave = procs.start(RmqdProcess(tmp_path / "rmqd", namesrv=False, broker_conf={
            **SLAVE, "namesrvAddr": master.namesrv_addr}))
        replicate_and_fail_over(master.namesrv_addr, master.broker_addr, master.store_dir / "commitlog",
                                slave.broker_addr, tmp_path / "rmqd" / "store" / "commitlog",
                                lambda: master.stop_broker(signal.SIGKILL), ("java master", "rmqd slave"))
