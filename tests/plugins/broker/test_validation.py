"""Issue 10: validate before any side effect, confine paths, protect admin requests by default.

Every refusal here is checked twice: the answer (RocketMQ's code and a clear remark) and the
absence of the side effect (no queue offset consumed, no topic/group/offset created, nothing
outside the store touched).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmq.kernel.hookspecs.processors import ProcessorRegistry
from rmq.kernel.kernel import LoopbackAdminGuard, is_loopback, make_handler
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand

pytestmark = pytest.mark.anyio

TRAVERSALS = ["..", ".", "../../x", "../store", "/tmp", "a/b", "a\\b", "x\ny", "t\x00", "%2e%2e/x", " ", ""]


def _plant(tmp_path: Path) -> tuple[Path, Path]:
    """A directory beside the store and one inside it that a traversal would hit."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    return outside, tmp_path / "store"


async def test_topic_admin_refuses_traversal_and_touches_nothing(broker_env: Any, tmp_path: Path) -> None:
    outside, store = _plant(tmp_path)
    async with broker_env(store="mmap") as env:
        r = await env.send("Kept", b"x")
        assert r.code == 0
        await env.broker.store.wait_dispatched()
        topics_on_disk = lambda: sorted(p.name for p in (store / "consumequeue").iterdir())  # noqa: E731
        before = topics_on_disk()
        assert "Kept" in before
        for name in TRAVERSALS:
            for code in (RequestCode.DELETE_TOPIC_IN_BROKER, RequestCode.UPDATE_AND_CREATE_TOPIC):
                r = await env.call(code, {"topic": name, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6})
                assert r.code == ResponseCode.SYSTEM_ERROR, (code, name, r)
                assert r.remark and ("illegal" in r.remark or "blank" in r.remark), r.remark
                assert "\n" not in r.remark
        assert (outside / "precious").read_text() == "keep me"
        assert topics_on_disk() == before
        assert sorted(p.name for p in store.parent.iterdir()) == sorted(["outside", "store"])
        assert "Kept" in env.broker.topics.table
        assert not any(t in env.broker.topics.table for t in TRAVERSALS)


async def test_system_topics_cannot_be_created_or_deleted(broker_env: Any) -> None:
    async with broker_env() as env:
        for name in ("SCHEDULE_TOPIC_XXXX", "TBW102", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_anything",
                     "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC", "DefaultCluster", "broker-a", "BenchmarkTest"):
            r = await env.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": name})
            assert r.code == ResponseCode.SYSTEM_ERROR and "system topic" in r.remark, (name, r)
            r = await env.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": name, "perm": 6})
            assert r.code == ResponseCode.SYSTEM_ERROR and "system topic" in r.remark, (name, r)
        assert "SCHEDULE_TOPIC_XXXX" in env.broker.topics.table
        r = await env.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "Q", "readQueueNums": 5000})
        assert r.code == ResponseCode.SYSTEM_ERROR and "queue numbers" in r.remark
        r = await env.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "Q", "perm": 99})
        assert r.code == ResponseCode.SYSTEM_ERROR and "perm" in r.remark
        assert "Q" not in env.broker.topics.table
        r = await env.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "Q", "readQueueNums": 2, "writeQueueNums": 2})
        assert r.code == 0 and env.broker.topics.table["Q"].writeQueueNums == 2


@pytest.mark.parametrize(
    ("field", "value"),
    [("flag", 1 << 31), ("flag", -(1 << 31) - 1), ("sysFlag", 1 << 40), ("queueId", 1 << 31),
     ("bornTimestamp", 1 << 63), ("flag", 10**30)],
)
async def test_out_of_range_ints_are_refused_before_an_offset_is_taken(broker_env: Any, field: str, value: int) -> None:
    async with broker_env(store="mmap") as env:
        assert (await env.send("R", b"first")).ext["queueOffset"] == "0"
        r = await env.send("R", b"bad", **{field: value})
        assert r.code == ResponseCode.SYSTEM_ERROR and field in r.remark and "range" in r.remark, r
        r = await env.send("R", b"second")
        assert r.code == 0 and r.ext["queueOffset"] == "1"  # no hole in the queue
        p = await env.pull("R", 0, 0)
        assert p.code == 0


@pytest.mark.parametrize("props", ["noseparator", "\x01nameless", "a\x01b\x01c", "a\x01b\x02c", "k\x01v\x02\x02\x01x"])
async def test_malformed_properties_are_refused_and_consume_nothing(broker_env: Any, props: str) -> None:
    async with broker_env(store="mmap") as env:
        assert (await env.send("P", b"first")).code == 0
        r = await env.send("P", b"bad", properties=props)
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "properties" in r.remark, r
        r = await env.send("P", b"second", properties="KEYS\x01\x02TAGS\x01t")  # empty value: legal (Java writes it)
        assert r.code == 0 and r.ext["queueOffset"] == "1"


async def test_heartbeat_with_illegal_names_registers_nothing(broker_env: Any) -> None:
    async with broker_env() as env:
        for group, topic in (("G\nforged", "T"), ("../../g", "T"), ("G", "../T"), ("G" * 256, "T")):
            body = json.dumps({
                "clientID": "c1",
                "consumerDataSet": [{"groupName": group, "consumeType": "CONSUME_PASSIVELY",
                                     "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                                     "subscriptionDataSet": [{"topic": topic, "subString": "*"}]}],
                "producerDataSet": [],
            }).encode()
            r = await env.call(RequestCode.HEART_BEAT, body=body)
            assert r.code == ResponseCode.SYSTEM_ERROR and "heartbeat" in r.remark, r
            assert "\n" not in r.remark
        assert not env.broker.consumers.groups
        assert not [t for t in env.broker.topics.table if t.startswith("%RETRY%")]
        r = await env.call(RequestCode.HEART_BEAT, body=b'{"clientID":"c","producerDataSet":[{"groupName":"P/../x"}]}')
        assert r.code == ResponseCode.SYSTEM_ERROR and not env.broker.producers.groups


async def test_offsets_and_pulls_with_illegal_names_create_nothing(broker_env: Any) -> None:
    async with broker_env() as env:
        assert (await env.send("O", b"x")).code == 0
        groups_before = set(env.broker.groups.table)
        r = await env.call(RequestCode.UPDATE_CONSUMER_OFFSET,
                           {"consumerGroup": "G", "topic": "Nope", "queueId": 0, "commitOffset": 1})
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
        r = await env.call(RequestCode.UPDATE_CONSUMER_OFFSET,
                           {"consumerGroup": "G\r\nx", "topic": "O", "queueId": 0, "commitOffset": 1})
        assert r.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in r.remark
        r = await env.call(RequestCode.UPDATE_CONSUMER_OFFSET,
                           {"consumerGroup": "G", "topic": "O", "queueId": 99, "commitOffset": 1})
        assert r.code == ResponseCode.SYSTEM_ERROR and "queueId" in r.remark
        r = await env.call(RequestCode.UPDATE_CONSUMER_OFFSET,
                           {"consumerGroup": "G", "topic": "O", "queueId": 0, "commitOffset": -5})
        assert r.code == ResponseCode.SYSTEM_ERROR
        assert env.broker.offsets.table == {}
        p = await env.pull("O", 0, 0, group="bad group")
        assert p.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in p.remark
        assert set(env.broker.groups.table) == groups_before
        r = await env.call(RequestCode.UPDATE_CONSUMER_OFFSET,
                           {"consumerGroup": "G", "topic": "O", "queueId": 0, "commitOffset": 1})
        assert r.code == 0 and env.broker.offsets.query("G", "O", 0) == 1


async def test_group_admin_validates_names(broker_env: Any) -> None:
    async with broker_env() as env:
        r = await env.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b'{"groupName":"a/../b"}')
        assert r.code == ResponseCode.SYSTEM_ERROR and "illegal" in r.remark
        r = await env.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b'{"groupName":"g","retryMaxTimes":NaN}')
        assert r.code == ResponseCode.SYSTEM_ERROR
        r = await env.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "TOOLS_CONSUMER"})
        assert r.code == ResponseCode.SYSTEM_ERROR and "system group" in r.remark
        assert "TOOLS_CONSUMER" in env.broker.groups.table and "a/../b" not in env.broker.groups.table
        # RocketMQ 5's transaction check group, by its value (MixAll.CID_SYS_RMQ_TRANS = "CID_RMQ_SYS_TRANS"):
        # the name its offsets are kept under in consumerOffset.json
        assert "CID_RMQ_SYS_TRANS" in env.broker.groups.table and "CID_SYS_RMQ_TRANS" not in env.broker.groups.table


class _Peer:
    """A connection as the guard sees it: only its address matters (the processors behind are real)."""

    def __init__(self, host: str) -> None:
        self.id = 1
        self.remote_addr = (host, 40000)
        self.local_addr = ("10.0.0.1", 10911)
        self.attributes: dict[str, Any] = {}
        self.closed = False


def test_loopback_detection() -> None:
    for host in ("127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"):
        assert is_loopback(host), host
    for host in ("10.0.0.5", "192.168.1.1", "::ffff:10.0.0.1", "2001:db8::1", "localhost-ish", ""):
        assert not is_loopback(host), host


async def test_admin_writes_from_non_loopback_peers_are_refused_by_default(broker_env: Any) -> None:
    async with broker_env() as env:
        kernel = env.kernel
        for role in ("broker", "namesrv"):
            registry = ProcessorRegistry(role, kernel)
            kernel.hook.rmq_processors_register(kernel=kernel, registry=registry)
            registry.add_interceptor(LoopbackAdminGuard(role))
            handle = make_handler(registry)
            code = RequestCode.UPDATE_AND_CREATE_TOPIC if role == "broker" else RequestCode.PUT_KV_CONFIG
            ext = {"topic": "FromAfar", "perm": "6"} if role == "broker" else {"namespace": "n", "key": "k", "value": "v"}
            r = await handle(_Peer("10.1.2.3"), RemotingCommand.request(code, ext))
            assert r.code == ResponseCode.NO_PERMISSION, r
            assert f"{role}.allowRemoteAdmin" in r.remark and "10.1.2.3" in r.remark
            # reads are not admin writes; loopback peers pass
            r = await handle(_Peer("10.1.2.3"), RemotingCommand.request(
                RequestCode.GET_ALL_TOPIC_CONFIG if role == "broker" else RequestCode.GET_BROKER_CLUSTER_INFO))
            assert r.code == 0
            r = await handle(_Peer("127.0.0.1"), RemotingCommand.request(code, ext))
            assert r.code == 0, r
        assert "FromAfar" in env.broker.topics.table and env.namesrv.kv.get("n", "k") == "v"


async def test_allow_remote_admin_turns_the_guard_off(broker_env: Any) -> None:
    async with broker_env(allowRemoteAdmin=True) as env:
        r = await env.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "Open", "perm": 6})
        assert r.code == 0 and env.kernel.config.broker.allowRemoteAdmin
