"""WAIT=false on a SYNC_MASTER (and under SYNC_FLUSH): answered once stored, as RocketMQ's
handleHA / handleDiskFlush (4.9) and needHandleHA (5.x); RocketMQ's own internal puts that set it
(send-back, transaction put-backs and ops) are therefore never failed by a missing slave.

Real rmqd processes on loopback, no slave at all: without WAIT=false a send is stored but answered
SLAVE_NOT_AVAILABLE (the client may retry and duplicate); with it, SEND_OK.
"""

from __future__ import annotations

from typing import Any

import anyio

from rmq.client import ConsumeResult, Message, MessageExt, Producer, PushConsumer
from rmq.client.testing import FAST, create_topic
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.message import encode_batch
from rmq.testing.daemon import RmqdProcess, call, eventually

SCHEDULE = "SCHEDULE_TOPIC_XXXX"



def send(addr: str, topic: str, props: str, body: bytes = b"x", batch: bool = False) -> RemotingCommand:
    ext = {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
           "queueId": 0, "sysFlag": 0, "bornTimestamp": 0, "flag": 0, "properties": props}
    if batch:  # two members, the WAIT of the batch is the request's own properties (MessageBatch's)
        body = encode_batch([(b"a", 0, "TAGS\x01t"), (b"b", 0, "TAGS\x01t")])
        ext["batch"] = "true"
    return call(addr, RequestCode.SEND_MESSAGE, ext, body)


def max_offset(addr: str, topic: str, queue_id: int) -> int:
    r = call(addr, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
    return int(r.ext["offset"]) if r.code == 0 else 0


def test_sync_master_without_slave_answers_wait_false_at_once(rmqd_factory: Any) -> None:
    d: RmqdProcess = rmqd_factory(broker_conf={"brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH"})
    addr = d.broker_addr
    r = send(addr, "WaitT", "TAGS\x01t\x02WAIT\x01true")
    assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE and r.ext["msgId"], (r.code, r.remark)
    assert send(addr, "WaitT", "TAGS\x01t").code == ResponseCode.SLAVE_NOT_AVAILABLE  # no WAIT: wait (Java's null)
    for props in ("TAGS\x01t\x02WAIT\x01false", "WAIT\x01false\x02TAGS\x01t", "WAIT\x01FALSE", "WAIT\x01no"):
        r = send(addr, "WaitT", props)  # Boolean.parseBoolean: anything but "true" in any case is false
        assert r.code == ResponseCode.SUCCESS, (props, r.code, r.remark)
    assert send(addr, "WaitT", "WAIT\x01TRUE").code == ResponseCode.SLAVE_NOT_AVAILABLE
    assert send(addr, "WaitT", "WAIT\x01false", batch=True).code == ResponseCode.SUCCESS
    assert send(addr, "WaitT", "WAIT\x01true", batch=True).code == ResponseCode.SLAVE_NOT_AVAILABLE
    assert max_offset(addr, "WaitT", 0) == 11  # every one stored, whatever the answer


def test_send_back_on_a_sync_master_without_slave_stores_one_retry_copy(rmqd_factory: Any) -> None:
    """RECONSUME_LATER: CONSUMER_SEND_MSG_BACK puts with WAIT=false (4.9's consumerSendMsgBack) and is
    answered SUCCESS; answered SYSTEM_ERROR (SLAVE_NOT_AVAILABLE) the client would re-send the message
    itself and the retry topic would hold two copies."""
    levels = " ".join(["1s"] * 18)
    d: RmqdProcess = rmqd_factory(broker_conf={"brokerRole": "SYNC_MASTER", "messageDelayLevel": levels})
    ns, topic, group = d.namesrv_addr, "BackT", "BackG"
    attempts: list[int] = []

    async def go() -> None:
        await create_topic(ns, topic, 1)
        redelivered = anyio.Event()

        async def listener(msg: MessageExt) -> ConsumeResult:
            attempts.append(msg.reconsume_times)
            if msg.reconsume_times == 0:
                return ConsumeResult.RECONSUME_LATER
            redelivered.set()
            return ConsumeResult.SUCCESS

        with anyio.fail_after(60):
            async with Producer("BackP", ns) as p:
                await p.send(Message(topic, b"once", properties={"WAIT": "false"}))
            async with PushConsumer(group, ns, listener=listener, consume_from_where="FIRST_OFFSET", **FAST) as c:
                c.subscribe(topic)
                await redelivered.wait()

    anyio.run(go)
    # the send-back and nothing else went through delay level 3 (queue 2), then to the retry topic
    assert max_offset(d.broker_addr, SCHEDULE, 2) == 1
    eventually(lambda: max_offset(d.broker_addr, f"%RETRY%{group}", 0) >= 1, 10, "the retry copy delivered")
    assert max_offset(d.broker_addr, f"%RETRY%{group}", 0) == 1
    assert attempts[:2] == [0, 1] and attempts.count(1) == 1, attempts
