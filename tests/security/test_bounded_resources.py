"""Issue #26, bounded resources: what a stranger can make a broker or name server create is bounded,
exhaustion is reported as what it is, and a store full of queues still starts fast.

Every test runs real ``rmqd`` processes on loopback and fails on the code before the fix.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.kernel import MessageRecord
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.flush import AsyncFlushPlugin
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.plugins.storage_mmap import MmapStoragePlugin
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import PullFlag
from rmq.testing import make_kernel
from rmq.testing.daemon import RmqdProcess, eventually
from rmq.testing.storage import attach_from_hooks

req = RemotingCommand.request


def call(addr: str, cmd: RemotingCommand) -> RemotingCommand:
    """One request from a fresh client (the tests are synchronous: rmqd is another process)."""

    async def go() -> RemotingCommand:
        async with TcpRemotingClient(RemotingConfig(name="stranger")) as client:
            return await client.invoke(addr, cmd, 10)

    return anyio.run(go)


def calls(addr: str, cmds: list[RemotingCommand]) -> list[RemotingCommand]:
    """Many requests over one connection, in order."""

    async def go() -> list[RemotingCommand]:
        async with TcpRemotingClient(RemotingConfig(name="stranger")) as client:
            return [await client.invoke(addr, c, 10) for c in cmds]

    return anyio.run(go)


# ---------------------------------------------------------------------- name server KV file


def test_namesrv_kv_file_stays_under_its_home(rmqd_factory: Callable[..., RmqdProcess], tmp_path: Path) -> None:
    """RocketMQ's default kvConfigPath is ~/namesrv/kvConfig.json; rmqd's is under its own store:
    the broker's storePathRootDir, or $RMQ_HOME for a name server alone. HOME stays empty (stevedore's
    entry-point cache, the plugin loader's, honours XDG_CACHE_HOME: pointed elsewhere here)."""
    home = tmp_path / "home"
    home.mkdir()
    rmq_home = tmp_path / "rmq-home"
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    put = req(RequestCode.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"})
    alone = rmqd_factory(broker=False, namesrv_conf={"kvConfigPath": ""},
                         env={**env, "RMQ_HOME": str(rmq_home)})
    assert call(alone.namesrv_addr, put).code == ResponseCode.SUCCESS
    assert json.loads((rmq_home / "namesrv" / "kvConfig.json").read_text())["configTable"] == {"n": {"k": "v"}}
    both = rmqd_factory(namesrv_conf={"kvConfigPath": ""}, env={**env, "RMQ_HOME": str(rmq_home / "x")})
    assert call(both.namesrv_addr, put).code == ResponseCode.SUCCESS
    assert (both.workdir / "store" / "namesrv" / "kvConfig.json").is_file()
    assert list(home.iterdir()) == [], f"written outside rmqd's home: {list(home.rglob('*'))}"
    assert not (rmq_home / "x").exists()


# ---------------------------------------------------------------------- queues, topics, groups


def _send(topic: str, queue_id: int, code: int = RequestCode.SEND_MESSAGE, **extra: Any) -> RemotingCommand:
    ext = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
           "properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "false", **extra}
    return req(code, ext, b"x")


def _every_path(topic: str, qid: int) -> list[RemotingCommand]:
    """A request of every kind that names a queue: sends, pulls, POP, offsets, times, locks, send-back."""
    group = {"consumerGroup": "G1"}
    q = {"topic": topic, "queueId": str(qid)}
    pull = {**group, **q, "queueOffset": "0", "maxMsgNums": "1", "sysFlag": str(PullFlag.SUBSCRIPTION),
            "commitOffset": "5", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"}
    lock = json.dumps({"consumerGroup": "G1", "clientId": "c1",
                       "mqSet": [{"topic": topic, "brokerName": "broker-a", "queueId": qid}]}).encode()
    return [
        _send(topic, qid),
        _send(topic, qid, RequestCode.SEND_REPLY_MESSAGE),
        req(RequestCode.PULL_MESSAGE, pull),
        req(361, pull),  # LITE_PULL_MESSAGE
        req(200050, {**group, **q, "maxMsgNums": "1", "invisibleTime": "30000", "pollTime": "0",
                     "bornTime": "0", "initMode": "0"}),  # POP_MESSAGE
        req(200054, {**group, **q, "pollTime": "0", "bornTime": "0"}),  # NOTIFICATION
        req(RequestCode.UPDATE_CONSUMER_OFFSET, {**group, **q, "commitOffset": "7"}),
        req(RequestCode.QUERY_CONSUMER_OFFSET, {**group, **q}),
        req(RequestCode.GET_MAX_OFFSET, q),
        req(RequestCode.GET_MIN_OFFSET, q),
        req(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**q, "timestamp": "1700000000000"}),
        req(RequestCode.GET_EARLIEST_MSG_STORETIME, q),
        req(RequestCode.QUERY_CONSUME_QUEUE, {**group, **q, "index": "0", "count": "1"}),
        req(RequestCode.LOCK_BATCH_MQ, {}, lock),
        req(RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "G1", "offset": "0", "delayLevel": "0",
                                                 "originMsgId": "", "originTopic": topic, "maxReconsumeTimes": "1"}),
    ]


def test_no_request_makes_a_queue_outside_its_topic(rmqd_factory: Callable[..., RmqdProcess]) -> None:
    """Issue #26 item 3: 10,000 SEND_REPLY_MESSAGEs with fresh queue ids made 10,000 consume queues (two
    descriptors each) until the broker ran out. No path may create a queue its topic does not have, nor
    one for a topic the broker does not know."""
    d = rmqd_factory()
    assert call(d.broker_addr, _send("BoundT", 0)).code == ResponseCode.SUCCESS  # auto-created, 4 queues
    answers = calls(d.broker_addr, _every_path("BoundT", 4000) + _every_path("BoundT", -7)
                    + _every_path("NoSuchTopicX", 3)[1:])  # a plain send auto-creates a topic: not that one
    assert len(answers) == 44  # every request was answered (none crashed the connection)
    cq = d.workdir / "store" / "consumequeue"
    assert {p.name for p in (cq / "BoundT").iterdir()} <= {"0", "1", "2", "3"}  # -7 = "any queue" for a send
    assert not (cq / "NoSuchTopicX").exists()


def _limits(topics: int, groups: int) -> dict[str, Any]:
    return {"plugin": {"processors": {"broker": {"max_auto_created_topics": topics,
                                                 "max_auto_created_groups": groups}}}}


def test_auto_created_topics_stop_at_the_limit(rmqd_factory: Callable[..., RmqdProcess]) -> None:
    """Each send to a new name made a topic (and its queues) without end; now auto-creation stops at
    max_auto_created_topics with TOPIC_NOT_EXIST naming the limit, and the broker goes on serving."""
    # the bound counts the whole table: a broker starts with ~13 system topics (RocketMQ 4.9's and 5's)
    d = rmqd_factory(extra=_limits(20, 10_000))
    got = [call(d.broker_addr, _send(f"Auto{i}", 0)) for i in range(25)]
    ok = [r for r in got if r.code == ResponseCode.SUCCESS]
    refused = [r for r in got if r.code != ResponseCode.SUCCESS]
    assert ok and refused, [(r.code, r.remark) for r in got]
    assert all(r.code == ResponseCode.TOPIC_NOT_EXIST and "max_auto_created_topics = 20" in (r.remark or "")
               for r in refused), [(r.code, r.remark) for r in refused]
    assert call(d.broker_addr, _send("Auto0", 1)).code == ResponseCode.SUCCESS  # existing topics still take sends
    topics = json.loads((d.workdir / "store" / "config" / "topics.json").read_text())["topicConfigTable"]
    assert len(topics) <= 20


def test_auto_created_groups_stop_at_the_limit(rmqd_factory: Callable[..., RmqdProcess]) -> None:
    """Each pull naming a new consumer group made a subscription group without end; now auto-creation
    stops at max_auto_created_groups with SUBSCRIPTION_GROUP_NOT_EXIST naming the limit."""
    d = rmqd_factory(extra=_limits(10_000, 8))
    assert call(d.broker_addr, _send("GroupT", 0)).code == ResponseCode.SUCCESS

    def pull(group: str) -> RemotingCommand:
        return req(RequestCode.PULL_MESSAGE, {
            "consumerGroup": group, "topic": "GroupT", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1",
            "sysFlag": str(PullFlag.SUBSCRIPTION), "commitOffset": "0", "suspendTimeoutMillis": "0",
            "subscription": "*", "subVersion": "0"})

    got = calls(d.broker_addr, [pull(f"grp{i}") for i in range(12)])
    refused = [r for r in got if r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST]
    assert refused and len(refused) < len(got), [(r.code, r.remark) for r in got]
    assert all("max_auto_created_groups = 8" in (r.remark or "") for r in refused)
    assert call(d.broker_addr, pull("grp0")).code == ResponseCode.SUCCESS  # a known group still pulls


# ---------------------------------------------------------------------- descriptor exhaustion


class LimitedRmqd(RmqdProcess):
    """rmqd under a low RLIMIT_NOFILE (set in the child before the daemon's module runs)."""

    nofile = 256

    def command(self, extra_args: Iterable[str] = ()) -> list[str]:
        boot = ("import resource, runpy, sys; n = int(sys.argv.pop(1)); "
                "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
                "runpy.run_module('rmq.kernel.daemon', run_name='__main__', alter_sys=True)")
        return [sys.executable, "-c", boot, str(self.nofile), "--config", str(self.config_path), *extra_args]


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.integration
def test_descriptor_exhaustion_is_reported_as_such(tmp_path: Path) -> None:
    """Out of descriptors, sends failed with "disk full: ... Too many open files". Now the answer says
    what ran out and what to do; once descriptors free up the store takes writes again, the record
    that could not be queued meanwhile included."""
    d = LimitedRmqd(tmp_path / "d")
    d.start()
    fillers: list[socket.socket] = []
    try:
        assert d.proc is not None
        pid = d.proc.pid

        async def scenario() -> None:
            async with TcpRemotingClient(RemotingConfig(name="producer")) as client:
                send = client.invoke
                assert (await send(d.broker_addr, _send("FdT", 0, defaultTopicQueueNums="8"), 10)).code == 0
                # hold connections until the broker has no descriptor left
                while _open_fds(pid) < LimitedRmqd.nofile and len(fillers) < LimitedRmqd.nofile:
                    s = socket.create_connection(("127.0.0.1", d.broker_port or 0))
                    fillers.append(s)
                    before = _open_fds(pid)
                    for _ in range(50):  # wait until accepted (or the broker could not accept it)
                        if _open_fds(pid) > before - 1 and _open_fds(pid) >= len(fillers):
                            break
                        await anyio.sleep(0.01)
                # a new queue needs a file: the record is stored, its queue cannot be written yet
                assert (await send(d.broker_addr, _send("FdT", 1), 10)).code == 0
                refused = None
                for _ in range(300):
                    r = await send(d.broker_addr, _send("FdT", 0), 10)
                    if r.code != 0:
                        refused = r
                        break
                    await anyio.sleep(0.05)
                assert refused is not None, "the store never noticed it was out of descriptors"
                assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE, (refused.code, refused.remark)
                remark = refused.remark or ""
                assert "too many open files (EMFILE)" in remark and "ulimit -n" in remark, remark
                assert "disk full" not in remark and "disk is full" not in remark, remark
                for s in fillers:
                    s.close()
                fillers.clear()
                for _ in range(300):  # writes resume by themselves
                    if (await send(d.broker_addr, _send("FdT", 0), 10)).code == 0:
                        break
                    await anyio.sleep(0.05)
                else:
                    raise AssertionError("writes did not resume once descriptors were free")
                r = await send(d.broker_addr, req(RequestCode.GET_MAX_OFFSET, {"topic": "FdT", "queueId": "1"}), 10)
                assert r.code == 0 and r.ext["offset"] == "1", (r.code, r.ext)

        anyio.run(scenario)
    finally:
        for s in fillers:
            s.close()
        d.stop()


# ---------------------------------------------------------------------- restart with many queues

_SMALL_CQ = 100 * 20  # 100 units a consume-queue file: many queues, little disk


async def _fill(store_root: Path, topics: int, queues: int) -> None:
    """One message in every queue, written through the store in-process (as a broker would)."""
    cfg = {"storePathRootDir": str(store_root), "mappedFileSizeConsumeQueue": _SMALL_CQ,
           "mappedFileSizeCommitLog": 64 * 1024 * 1024}
    kernel = make_kernel([MmapStoragePlugin({}), AsyncFlushPlugin()], {"broker": cfg})
    store = attach_from_hooks(kernel, kernel.hook.rmq_storage_make_store(kernel=kernel, config=kernel.config.broker))
    async with store:
        for t in range(topics):
            for q in range(queues):
                rec = MessageRecord(f"Many{t:04d}", q, b"m", 0, "", 0, 1700000000000, b"\x7f\x00\x00\x01\x00\x00\x00\x01")
                assert (await store.put_message(rec)).ok
        await store.wait_dispatched()


@pytest.mark.integration
def test_restart_with_more_queues_than_descriptors_serves(tmp_path: Path) -> None:
    """After the attack a restart did not listen within 35 s and grew to 22 GB: every queue was
    mapped at start (two descriptors and a file's worth of zero pages each). Now queues are
    mapped when used, at most an eighth of RLIMIT_NOFILE at once: 4,000 queues under a limit of
    512 descriptors start, serve within 15 s, and keep few files mapped."""
    d = LimitedRmqd(tmp_path / "d", broker_conf={"mappedFileSizeConsumeQueue": _SMALL_CQ})
    d.nofile = 512
    anyio.run(_fill, d.workdir / "store", 1000, 4)
    d.start(timeout=15)
    try:
        assert d.proc is not None
        r = call(d.broker_addr, req(RequestCode.GET_MAX_OFFSET, {"topic": "Many0999", "queueId": "3"}))
        assert r.code == ResponseCode.SUCCESS and r.ext["offset"] == "1"
        assert call(d.broker_addr, _send("Many0500", 2)).code == ResponseCode.SUCCESS  # 0500 was made by _fill
        pid = d.proc.pid

        def mapped() -> int:
            maps = Path(f"/proc/{pid}/maps").read_text()
            return len({line.split()[-1] for line in maps.splitlines() if "/consumequeue/" in line})

        # a queue just written stays mapped until the flusher has flushed it, then the bound holds
        eventually(lambda: mapped() <= 512 // 8, 10, f"at most {512 // 8} queue files mapped")
    finally:
        d.stop()
