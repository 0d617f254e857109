"""POP consumption against a real rmqd with our SimpleConsumer: receive + ack, invisible-time expiry
and redelivery with the attempt count, change of invisible duration (stale receipts refused), the
DLQ after the group's retryMaxTimes, FIFO blocking with order=true, and acked / unacked messages
across a SIGKILL and restart."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from rmq.client import (
    BrokerError,
    Message,
    Producer,
    PullConsumer,
    PullStatus,
    SimpleConsumer,
    delivery_attempt,
)
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.message import decode_messages
from rmq.testing.daemon import RmqdProcess

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def call(addr: str, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
    async with TcpRemotingClient(RemotingConfig(name="pop-test")) as c:
        return await c.invoke(addr, RemotingCommand.request(code, ext, body), 10)


async def setup(proc: RmqdProcess, topic: str, n: int, queues: int = 2, group: str = "", retry_max: int = 16) -> None:
    r = await call(proc.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})
    assert r.code == 0
    if group:
        import json

        body = json.dumps({"groupName": group, "consumeEnable": True, "retryMaxTimes": retry_max}).encode()
        assert (await call(proc.broker_addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)).code == 0
    async with Producer("PG_POP", proc.namesrv_addr) as p:
        for i in range(n):
            await p.send(Message(topic, f"m{i}".encode(), tags="a" if i % 2 == 0 else "b"))


async def test_receive_ack_and_invisible_expiry(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    await setup(proc, "PopA", 6)
    async with SimpleConsumer("CG_POP_A", proc.namesrv_addr, subscriptions={"PopA": "*"}, await_duration=3) as c:
        got: list[Any] = []
        while len(got) < 6:
            batch = await c.receive(16, invisible_duration=1.5)
            assert batch, "messages expected"
            got += batch
        assert sorted(m.body for m in got) == [f"m{i}".encode() for i in range(6)]
        assert {delivery_attempt(m) for m in got} == {1}
        for m in got[:4]:
            await c.ack(m)
        assert await c.receive(16, 1.5, await_duration=0.3) == []  # the two unacked are invisible
        await anyio.sleep(1.6)
        again: list[Any] = []
        deadline = time.monotonic() + 10
        while len(again) < 2 and time.monotonic() < deadline:
            again += await c.receive(16, 30, await_duration=1)
        assert sorted(m.body for m in again) == sorted(m.body for m in got[4:])
        assert {delivery_attempt(m) for m in again} == {2}
        with pytest.raises(BrokerError) as e:  # the first receipt of a redelivered message is stale
            await c.ack(got[4])
        assert e.value.code == ResponseCode.NO_MESSAGE
        for m in again:
            await c.ack(m)
    async with SimpleConsumer("CG_POP_A2", proc.namesrv_addr, subscriptions={"PopA": "a"}, await_duration=2) as c:
        tagged: list[Any] = []
        while len(tagged) < 3:
            b = await c.receive(16, 30)
            assert b
            tagged += b
        assert sorted(m.body for m in tagged) == [b"m0", b"m2", b"m4"]  # a group of its own, filtered by tag


async def test_change_invisible_duration_and_dlq(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    await setup(proc, "PopB", 1, queues=1, group="CG_POP_B", retry_max=1)
    async with SimpleConsumer("CG_POP_B", proc.namesrv_addr, subscriptions={"PopB": "*"}, await_duration=2) as c:
        [m] = await c.receive(4, invisible_duration=60)
        old = dict(m.properties)
        m = await c.change_invisible_duration(m, 0.3)
        assert m.properties["POP_CK"] != old["POP_CK"]
        await anyio.sleep(0.5)
        [m2] = await c.receive(4, invisible_duration=0.3)  # second (last) delivery: retryMaxTimes 1
        assert delivery_attempt(m2) == 2 and m2.body == m.body
        await anyio.sleep(0.5)
        assert await c.receive(4, 0.3, await_duration=0.5) == []  # third would exceed: to the DLQ instead
    async with PullConsumer("CG_DLQ_CHECK", proc.namesrv_addr) as pc:
        mq = (await pc.fetch_queues("%DLQ%CG_POP_B"))[0]
        r = await pc.pull(mq, 0, 8)
        assert r.status is PullStatus.FOUND and [x.body for x in r.messages] == [b"m0"]


async def test_fifo_pop_blocks_the_queue_until_acked_or_expired(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    await setup(proc, "PopC", 4, queues=1)
    ext = {"consumerGroup": "CG_POP_C", "topic": "PopC", "queueId": "0", "maxMsgNums": "2", "invisibleTime": "800",
           "pollTime": "0", "bornTime": "0", "initMode": "0", "order": "true"}
    r = await call(proc.broker_addr, 200050, ext)
    assert r.code == 0 and [m.body for m in decode_messages(r.body)] == [b"m0", b"m1"]
    assert r.ext["reviveQid"] == "999" and r.ext["msgOffsetInfo"] == "0 0 0,1"
    assert (await call(proc.broker_addr, 200050, ext)).code == ResponseCode.PULL_NOT_FOUND  # blocked
    await anyio.sleep(0.9)
    r = await call(proc.broker_addr, 200050, ext)  # expired: the same batch first, in order
    assert [m.body for m in decode_messages(r.body)] == [b"m0", b"m1"]
    assert [m.reconsume_times for m in decode_messages(r.body)] == [1, 1]
    for off in ("0", "1"):
        extra = f"0 {r.ext['popTime']} 800 999 0 broker-a 0 {off}"
        ack = {"consumerGroup": "CG_POP_C", "topic": "PopC", "queueId": "0", "extraInfo": extra, "offset": off}
        assert (await call(proc.broker_addr, 200051, ack)).code == 0
    r = await call(proc.broker_addr, 200050, ext)
    assert [m.body for m in decode_messages(r.body)] == [b"m2", b"m3"]


async def test_acked_stay_acked_and_unacked_come_back_after_a_crash(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory(broker_conf={"flushConsumerOffsetInterval": 100})
    await setup(proc, "PopD", 6, queues=1)
    async with SimpleConsumer("CG_POP_D", proc.namesrv_addr, subscriptions={"PopD": "*"}, await_duration=2) as c:
        got = await c.receive(3, invisible_duration=60)
        assert [m.body for m in got] == [b"m0", b"m1", b"m2"]
        for m in got:
            await c.ack(m)
        pending = await c.receive(2, invisible_duration=60)
        assert [m.body for m in pending] == [b"m3", b"m4"]
    await anyio.sleep(0.5)  # the committed offset (3) reaches consumerOffset.json
    proc.kill()
    proc.start()
    async with SimpleConsumer("CG_POP_D", proc.namesrv_addr, subscriptions={"PopD": "*"}, await_duration=3) as c:
        back = await c.receive(16, invisible_duration=60)
    assert [m.body for m in back] == [b"m3", b"m4", b"m5"]  # unacked again, acked never, nothing lost


async def test_query_assignment_and_request_mode(rmqd_factory: Any) -> None:
    """RocketMQ 5's server-side assignment: PULL shares the queues among the group's live clients (AVG),
    POP without sharing gives every client queue -1; the mode is persisted before the answer."""
    import json

    proc: RmqdProcess = rmqd_factory()
    await setup(proc, "PopQ", 0, queues=4)
    hb = {"clientID": "cid-1", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "CG_Q", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": [], "unitMode": False}]}
    async with TcpRemotingClient(RemotingConfig(name="pop-q1")) as c1, TcpRemotingClient(RemotingConfig(name="q2")) as c2:
        for c, cid in ((c1, "cid-1"), (c2, "cid-2")):
            body = json.dumps({**hb, "clientID": cid}).encode()
            assert (await c.invoke(proc.broker_addr, RemotingCommand.request(RequestCode.HEART_BEAT, {}, body), 5)).code == 0

        async def assigned(cid: str) -> list[tuple[int, str]]:
            body = json.dumps({"topic": "PopQ", "consumerGroup": "CG_Q", "clientId": cid, "strategyName": "AVG",
                               "messageModel": "CLUSTERING"}).encode()
            r = await call(proc.broker_addr, RequestCode.QUERY_ASSIGNMENT, {}, body)
            assert r.code == 0
            return sorted((a["messageQueue"]["queueId"], a["mode"]) for a in json.loads(r.body)["messageQueueAssignments"])

        assert await assigned("cid-1") == [(0, "PULL"), (1, "PULL")]
        assert await assigned("cid-2") == [(2, "PULL"), (3, "PULL")]
        mode = json.dumps({"topic": "PopQ", "consumerGroup": "CG_Q", "mode": "POP", "popShareQueueNum": 0}).encode()
        assert (await call(proc.broker_addr, RequestCode.SET_MESSAGE_REQUEST_MODE, {}, mode)).code == 0
        assert await assigned("cid-1") == [(-1, "POP")]
        retry = json.dumps({"topic": "%RETRY%CG_Q", "consumerGroup": "CG_Q", "mode": "POP"}).encode()
        r = await call(proc.broker_addr, RequestCode.SET_MESSAGE_REQUEST_MODE, {}, retry)
        assert r.code == ResponseCode.NO_PERMISSION
    assert "POP" in (proc.workdir / "store" / "config" / "messageRequestMode.json").read_text()


def pop_cmd(group: str, topic: str, n: int = 32, poll: int = 0, invisible: int = 60_000) -> dict[str, str]:
    return {"consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": str(n),
            "invisibleTime": str(invisible), "pollTime": str(poll), "bornTime": str(int(time.time() * 1000)),
            "initMode": "0", "expType": "TAG", "exp": "*", "order": "false"}


async def test_batch_ack_notification_and_polling_info(rmqd_factory: Any) -> None:
    import base64
    import json

    proc: RmqdProcess = rmqd_factory()
    await setup(proc, "PopB", 0, queues=1, group="CG_POP_B")
    addr = proc.broker_addr
    # nothing yet: NOTIFICATION waits its poll time and says no; a held pop shows in POLLING_INFO
    r = await call(addr, 200054, {"consumerGroup": "CG_POP_B", "topic": "PopB", "queueId": "-1", "pollTime": "300",
                                  "bornTime": "0"})
    assert r.code == 0 and r.ext["hasMsg"] == "false"
    async with anyio.create_task_group() as tg:
        held: list[RemotingCommand] = []

        async def hold() -> None:
            held.append(await call(addr, 200050, pop_cmd("CG_POP_B", "PopB", poll=2000)))

        tg.start_soon(hold)
        await anyio.sleep(0.5)
        info = await call(addr, 200055, {"consumerGroup": "CG_POP_B", "topic": "PopB", "queueId": "-1"})
        assert info.code == 0 and info.ext["pollingNum"] == "1"
    assert held[0].code == ResponseCode.PULL_NOT_FOUND
    info = await call(addr, 200055, {"consumerGroup": "CG_POP_B", "topic": "PopB", "queueId": "-1"})
    assert info.ext["pollingNum"] == "0"
    assert (await call(addr, 200055, {"consumerGroup": "NoGroupB", "topic": "PopB", "queueId": "-1"})).code == \
        ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
    async with Producer("PG_POP_B", proc.namesrv_addr) as p:
        for i in range(5):
            await p.send(Message("PopB", f"b{i}".encode()))
    r = await call(addr, 200054, {"consumerGroup": "CG_POP_B", "topic": "PopB", "queueId": "-1", "pollTime": "300",
                                  "bornTime": "0"})
    assert r.ext["hasMsg"] == "true"
    popped = await call(addr, 200050, pop_cmd("CG_POP_B", "PopB"))
    assert popped.code == 0
    msgs = decode_messages(popped.body)
    assert [m.queue_offset for m in msgs] == [0, 1, 2, 3, 4]
    # ack offsets 0, 2, 3 in one request: RocketMQ's bit set relative to the start offset, Base64
    bits = base64.b64encode(bytes([0b00001101])).decode()
    body = {"brokerName": "broker-a", "acks": [{"c": "CG_POP_B", "t": "PopB", "r": "0", "so": 0, "q": 0, "rq": 0,
                                                "pt": int(popped.ext["popTime"]), "it": 60000, "b": bits}]}
    assert (await call(addr, 200151, {}, json.dumps(body).encode())).code == 0
    assert (await call(addr, 200151, {}, b'{"acks": []}')).code == ResponseCode.NO_MESSAGE
    assert (await call(addr, 200151, {}, b"not json")).code == ResponseCode.MESSAGE_ILLEGAL
    # the committed offset stops at the first unacked message (1)
    r = await call(addr, RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "CG_POP_B", "topic": "PopB", "queueId": "0"})
    assert r.ext["offset"] == "1"
    assert (await call(addr, 200056, {})).code == 0  # POP_ROLLBACK: nothing to move
