"""Membership, NOTIFY_CONSUMER_IDS_CHANGED, orderly locks, send-back/retry/DLQ and delay levels."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.message import decode_messages, decode_offset_msg_id

pytestmark = pytest.mark.anyio

FAST_DELAYS = " ".join(["1s"] * 18)


def heartbeat(client_id: str, group: str, topic: str, model: int = 1) -> bytes:
    return json.dumps({"clientID": client_id, "consumerDataSet": [{
        "consumeFromWhere": 0, "consumeType": 1, "groupName": group, "messageModel": model,
        "subscriptionDataSet": [{"subString": "*", "subVersion": "1", "topic": topic}]}]}).encode()


async def wait_for(pred: Any, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if pred():
            return
        await anyio.sleep(0.02)
    raise AssertionError("condition not reached in time")


async def test_notify_consumer_ids_changed_and_membership(broker_env: Any) -> None:
    async with broker_env() as env:
        pushed: list[RemotingCommand] = []

        async def handler(conn: Any, cmd: RemotingCommand) -> None:
            pushed.append(cmd)
            return None

        async with TcpRemotingClient(RemotingConfig(name="c1"), handler) as c1, \
                TcpRemotingClient(RemotingConfig(name="c2"), handler) as c2:
            r = await c1.invoke(env.addr, RemotingCommand.request(
                RequestCode.HEART_BEAT, body=heartbeat("c1", "G", "T")), 3)
            assert r.code == 0
            await wait_for(lambda: len(pushed) == 1)
            await c2.invoke(env.addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat("c2", "G", "T")), 3)
            await wait_for(lambda: len(pushed) == 3)  # both members told
            assert {p.code for p in pushed} == {RequestCode.NOTIFY_CONSUMER_IDS_CHANGED}
            assert all(p.ext["consumerGroup"] == "G" and p.is_oneway for p in pushed)
            # the same heartbeat again changes nothing
            await c2.invoke(env.addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat("c2", "G", "T")), 3)
            r = await env.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
            assert json.loads(r.body) == {"consumerIdList": ["c1", "c2"]}
            r = await env.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G"})
            doc = json.loads(r.body)
            assert doc["messageModel"] == "CLUSTERING" and doc["consumeType"] == "CONSUME_PASSIVELY"
            assert sorted(c["clientId"] for c in doc["connectionSet"]) == ["c1", "c2"]
            assert doc["subscriptionTable"]["T"]["subVersion"] == 1
            await anyio.sleep(0.05)
            assert len(pushed) == 3
            # UNREGISTER_CLIENT of c2 tells c1
            r = await c2.invoke(env.addr, RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, {
                "clientID": "c2", "producerGroup": "", "consumerGroup": "G"}), 3)
            assert r.code == 0
            await wait_for(lambda: len(pushed) == 4)
        # both connections closed: the group is gone
        await wait_for(lambda: "G" not in env.broker.consumers.groups)
        r = await env.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
        assert r.code == ResponseCode.SYSTEM_ERROR and "no consumer" in r.remark


async def test_client_expiry(broker_env: Any) -> None:
    async with broker_env(channelExpiredTimeout=300) as env:
        async with TcpRemotingClient(RemotingConfig(name="c1")) as c1:
            await c1.invoke(env.addr, RemotingCommand.request(RequestCode.HEART_BEAT, body=heartbeat("c1", "G", "T")), 3)
            assert "G" in env.broker.consumers.groups
            await wait_for(lambda: "G" not in env.broker.consumers.groups, 3)
            await wait_for(lambda: not c1.connections(), 3)  # the broker closed the silent connection


async def test_locks(broker_env: Any) -> None:
    async with broker_env() as env:
        mqs = [{"brokerName": "broker-a", "queueId": q, "topic": "T"} for q in (0, 1)]

        async def lock(client: str, code: int = RequestCode.LOCK_BATCH_MQ) -> Any:
            body = json.dumps({"clientId": client, "consumerGroup": "G", "mqSet": mqs}).encode()
            r = await env.call(code, body=body)
            assert r.code == 0
            return json.loads(r.body)["lockOKMQSet"] if r.body else None

        got = await lock("A")
        assert sorted(m["queueId"] for m in got) == [0, 1] and isinstance(got[0]["queueId"], int)
        assert await lock("B") == []
        assert len(await lock("A")) == 2  # renewal
        await lock("A", RequestCode.UNLOCK_BATCH_MQ)
        assert len(await lock("B")) == 2
        r = await env.call(RequestCode.LOCK_BATCH_MQ, body=b"not json")
        assert r.code == ResponseCode.SYSTEM_ERROR


async def test_send_back_retry_then_dlq(broker_env: Any) -> None:
    async with broker_env(messageDelayLevel=FAST_DELAYS) as env:
        r = await env.send("RT", b"payload", tags="t", keys="K")
        _, _, phys = decode_offset_msg_id(r.ext["msgId"])
        group = "RG"
        r = await env.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": phys, "group": group, "delayLevel": 0})
        assert r.code == 0, r.remark
        # parked in SCHEDULE_TOPIC_XXXX queue 2 (level 3 + 0 reconsumes), then delivered to %RETRY%RG
        sched = await env.pull("SCHEDULE_TOPIC_XXXX", 2, 0, group="x")
        parked = decode_messages(sched.body)[0]
        assert parked.properties["REAL_TOPIC"] == "%RETRY%RG" and parked.properties["DELAY"] == "3"
        retry = "%RETRY%" + group
        for _ in range(150):
            p = await env.pull(retry, 0, 0, group=group)
            if p.code == 0:
                break
            await anyio.sleep(0.05)
        m = decode_messages(p.body)[0]
        assert m.body == b"payload" and m.reconsume_times == 1
        # as 4.9 stores it: the delivered copy keeps DELAY (and REAL_*), serialised before it is cleared
        assert m.properties["RETRY_TOPIC"] == "RT" and m.properties["DELAY"] == "3"
        assert m.properties["ORIGIN_MESSAGE_ID"] == r_id(env, phys)
        # group allows 1 retry: the next send-back goes to the DLQ at once
        cfg = {"groupName": group, "retryMaxTimes": 1, "retryQueueNums": 1}
        assert (await env.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(cfg).encode())).code == 0
        r = await env.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": m.commit_log_offset, "group": group,
                                                                "delayLevel": 0})
        assert r.code == 0
        d = await env.pull("%DLQ%" + group, 0, 0, group=group)
        dm = decode_messages(d.body)[0]
        assert dm.body == b"payload" and dm.reconsume_times == 2 and dm.properties["RETRY_TOPIC"] == "RT"
        assert dm.properties["DELAY"] == "0"  # 4.9 stores the dead letter with delay level 0, not without
        r = await env.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": 10**9, "group": group, "delayLevel": 0})
        assert r.code == ResponseCode.SYSTEM_ERROR


def r_id(env: Any, phys: int) -> str:
    return env.broker.msg_id_prefix + f"{phys:016X}"


async def test_delay_level_and_persisted_delay_offsets(broker_env: Any, tmp_path: Any) -> None:
    async with broker_env(messageDelayLevel=FAST_DELAYS, store="mmap") as env:
        r = await env.send("D", b"later", props={"DELAY": "2"})
        assert r.code == 0 and r.ext["queueId"] == "0"
        assert (await env.pull("D", 0, 0)).code == ResponseCode.PULL_NOT_FOUND
        p = await env.pull("D", 0, 0, suspend_ms=5000)
        assert p.code == 0
        m = decode_messages(p.body)[0]
        assert m.body == b"later" and m.properties["DELAY"] == "2" and m.properties["REAL_TOPIC"] == "D"  # as 4.9
        r = await env.call(RequestCode.GET_ALL_DELAY_OFFSET)
        assert b"2:1" in r.body.replace(b"\t", b"").replace(b"\n", b"")
    text = (tmp_path / "store" / "config" / "delayOffset.json").read_text()
    assert "2:1" in text.replace("\t", "").replace("\n", "")
    # restart: nothing is delivered twice
    async with broker_env(messageDelayLevel=FAST_DELAYS, store="mmap") as env:
        await anyio.sleep(0.5)
        p = await env.pull("D", 0, 0)
        assert len(decode_messages(p.body)) == 1


async def test_client_side_retry_send_goes_to_dlq_at_max(broker_env: Any) -> None:
    """client A re-sends failed messages to %RETRY%group itself; the broker moves them to the DLQ at max."""
    async with broker_env() as env:
        r = await env.send("%RETRY%CG", b"again", reconsumeTimes=3)
        assert r.code == 0
        assert (await env.pull("%RETRY%CG", 0, 0, group="CG")).code == 0
        r = await env.send("%RETRY%CG", b"dead", reconsumeTimes=16)
        assert r.code == 0
        m = decode_messages((await env.pull("%DLQ%CG", 0, 0, group="CG")).body)[0]
        assert m.body == b"dead" and m.topic == "%DLQ%CG"
        # header maxReconsumeTimes is honoured (client version >= 121)
        r = await env.send("%RETRY%CG2", b"early-dead", reconsumeTimes=2, maxReconsumeTimes=2)
        assert r.code == 0
        assert (await env.pull("%DLQ%CG2", 0, 0, group="CG2")).code == 0


async def test_check_client_config(broker_env: Any) -> None:
    def body(etype: str, expr: str) -> bytes:
        return json.dumps({"clientId": "c", "group": "G", "subscriptionData": {
            "expressionType": etype, "subString": expr, "topic": "T"}}).encode()

    async with broker_env() as env:
        assert (await env.call(RequestCode.CHECK_CLIENT_CONFIG, body=body("TAG", "a || b"))).code == 0
        r = await env.call(RequestCode.CHECK_CLIENT_CONFIG, body=body("SQL92", "a > 1"))
        assert r.code == ResponseCode.SYSTEM_ERROR and "SQL92" in r.remark
    async with broker_env(enablePropertyFilter=True) as env:
        assert (await env.call(RequestCode.CHECK_CLIENT_CONFIG, body=body("SQL92", "a > 1"))).code == 0
        r = await env.call(RequestCode.CHECK_CLIENT_CONFIG, body=body("SQL92", "a >>> 1"))
        assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
