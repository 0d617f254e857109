"""The schedule plugin: per-level delivery order and timing, offsets file, clamping, options."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.broker import BrokerPlugin
from rmq.plugins.filters import TagFilterPlugin
from rmq.plugins.flush import AsyncFlushPlugin
from rmq.plugins.remoting_tcp import TcpRemotingClient, TcpRemotingPlugin
from rmq.plugins.schedule import SchedulePlugin
from rmq.plugins.storage_mmap import MmapStoragePlugin
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import encode_properties
from rmq.protocol.jsonbody import loads as loads_lenient
from rmq.protocol.message import decode_messages
from rmq.testing import make_kernel

pytestmark = pytest.mark.anyio


def kernel(tmp: Path, levels: str, brokerRole: str = "ASYNC_MASTER", brokerId: int = 0, **opts: Any) -> Any:
    conf = {"broker": {"listenHost": "127.0.0.1", "listenPort": 0, "brokerIP1": "127.0.0.1",
                       "storePathRootDir": str(tmp), "mappedFileSizeCommitLog": 4 * 1024 * 1024,
                       "messageDelayLevel": levels, "flushDelayOffsetInterval": 200,
                       "brokerRole": brokerRole, "brokerId": brokerId}}
    return make_kernel([TcpRemotingPlugin({}), MmapStoragePlugin({}), AsyncFlushPlugin({}), TagFilterPlugin({}),
                        BrokerPlugin({}), SchedulePlugin(opts)], conf)


async def send(c: TcpRemotingClient, addr: str, topic: str, body: bytes, delay: int) -> RemotingCommand:
    ext = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "1",
           "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0",
           "properties": encode_properties({"DELAY": str(delay), "KEYS": body.decode()})}
    return await c.invoke(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, body), 5)


async def pull_all(c: TcpRemotingClient, addr: str, topic: str) -> list[Any]:
    r = await c.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "G", "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
        "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}), 5)
    return decode_messages(r.body) if r.code == 0 else []


async def test_levels_deliver_in_time_order(tmp_path: Path) -> None:
    async with kernel(tmp_path, "1s 1s 2s", poll_interval_ms=20) as k:
        b = k.services["broker"]
        async with TcpRemotingClient(RemotingConfig(name="t")) as c:
            t0 = time.monotonic()
            for body, level in ((b"late", 3), (b"early", 1), (b"early2", 1), (b"capped", 99)):
                r = await send(c, b.broker_addr, "Sch", body, level)
                assert r.code == 0 and r.ext["queueId"] == "0"
            seen: dict[bytes, float] = {}
            for _ in range(200):
                for m in await pull_all(c, b.broker_addr, "Sch"):
                    seen.setdefault(m.body, time.monotonic() - t0)
                if len(seen) == 4:
                    break
                await anyio.sleep(0.02)
            assert set(seen) == {b"late", b"early", b"early2", b"capped"}
            assert 0.9 <= seen[b"early"] < 1.8 and seen[b"late"] >= 1.9 and seen[b"capped"] >= 1.9
            msgs = await pull_all(c, b.broker_addr, "Sch")
            assert [m.queue_offset for m in msgs] == [0, 1, 2, 3]  # new records in the real queue
            # as 4.9: the delivered copies keep DELAY and REAL_* (serialised before DELAY is cleared)
            assert all(m.properties.get("DELAY") and m.properties["REAL_QID"] == "0" for m in msgs)
            r = await c.invoke(b.broker_addr, RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET), 5)
            table = loads_lenient(r.body)
            # as RocketMQ's delayOffset.json: a level that never delivered (2) has no entry
            assert table["offsetTable"] == {"1": 2, "3": 2}


async def test_offsets_clamped_and_persisted(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.mkdir(parents=True)
    (cfg / "delayOffset.json").write_text('{"offsetTable":{1:500,2:-3}}')
    async with kernel(tmp_path, "1s 1s") as k:
        svc = k.services["broker"]
        assert svc is not None
        sched = [p for p in k.pm.get_plugins() if isinstance(p, SchedulePlugin)][0].service
        assert sched.offsets == {1: 0, 2: 0}  # empty queues: clamped into [0, 0]
    text = (cfg / "delayOffset.json").read_text()
    assert "1:0" in text.replace("\t", "").replace("\n", "")


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="poll_interval"):
        SchedulePlugin({"poll_interval_ms": 0})
    with pytest.raises(ValueError, match="unknown option .nope.; known options: poll_interval_ms"):
        SchedulePlugin({"nope": 1})


async def test_a_slave_answers_the_delay_offsets_its_sync_copied(tmp_path: Path) -> None:
    """A slave runs no delivery; GET_ALL_DELAY_OFFSET answers the table its metadata sync last wrote (as a
    RocketMQ 5 slave, which reloads it after each sync): a Java or rmqd slave of this slave, or a tool,
    reads the master's offsets, not an error."""
    cfg = tmp_path / "config"
    async with kernel(tmp_path, "1s 1s", brokerRole="SLAVE", brokerId=1) as k:
        b = k.services["broker"]
        async with TcpRemotingClient(RemotingConfig(name="t")) as c:
            r = await c.invoke(b.broker_addr, RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET), 5)
            assert r.code == ResponseCode.SYSTEM_ERROR and r.remark == "No delay offset in this broker"
            cfg.mkdir(parents=True, exist_ok=True)
            (cfg / "delayOffset.json").write_text('{"offsetTable":{2:7}}')  # as the sync writes it
            r = await c.invoke(b.broker_addr, RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET), 5)
            assert r.code == 0 and loads_lenient(r.body) == {"offsetTable": {"2": 7}}
