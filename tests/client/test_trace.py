"""Message trace against rmqd: records in RocketMQ 4.9's TraceDataEncoder format on the trace topic."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from rmq.client import Message, Producer, PushConsumer, SendStatus
from rmq.client.testing import create_topic, drain
from rmq.client.trace import CONTENT_SPLITOR, FIELD_SPLITOR, decode_traces

from .conftest import FAST_CONSUMER

pytestmark = pytest.mark.anyio


async def _traces(ns: str, topic: str, want: int) -> tuple[list[dict[str, str]], list[Any]]:
    """Every record of the trace topic, once ``want`` are there (bounded wait)."""
    with anyio.fail_after(20):
        while True:
            msgs = await drain(ns, topic)
            records = [r for m in msgs for r in decode_traces(m.body)]
            if len(records) >= want:
                return records, msgs
            await anyio.sleep(0.2)


async def test_produce_and_consume_are_traced(rmqd_factory: Any, name: str) -> None:
    proc = rmqd_factory(broker_conf={"traceTopicEnable": True, "regionId": "Shanghai"})
    ns = proc.namesrv_addr
    topic, pgroup, cgroup = f"T_{name}", f"P_{name}", f"C_{name}"
    await create_topic(ns, topic, 2)
    sent: dict[str, Message] = {}
    offset_ids: dict[str, str] = {}
    got: list[str] = []
    with anyio.fail_after(60):
        async with Producer(pgroup, ns, enable_trace=True) as producer:
            for i in range(3):
                m = Message(topic, f"body-{i}" * (i + 1), tags=f"tag{i}", keys=[f"k{i}", f"order-{i}"])
                r = await producer.send(m)
                assert r.status is SendStatus.SEND_OK
                sent[r.msg_id] = m
                offset_ids[r.msg_id] = r.offset_msg_id

        all_in = anyio.Event()

        async def listener(msg: Any) -> None:
            got.append(msg.msg_id)
            if len(got) >= 3:
                all_in.set()

        consumer = PushConsumer(cgroup, ns, listener=listener, consume_from_where="FIRST_OFFSET", enable_trace=True,
                                **FAST_CONSUMER)
        consumer.subscribe(topic, "*")
        async with consumer:
            await all_in.wait()
    records, trace_msgs = await _traces(ns, "RMQ_SYS_TRACE_TOPIC", 9)
    by_type: dict[str, list[dict[str, str]]] = {}
    for r in records:
        by_type.setdefault(r["traceType"], []).append(r)
    assert sorted(by_type) == ["Pub", "SubAfter", "SubBefore"] and all(len(v) == 3 for v in by_type.values())
    for pub in by_type["Pub"]:
        m = sent[pub["msgId"]]
        assert (pub["topic"], pub["tags"], pub["keys"], pub["groupName"]) == (topic, m.tags, m.keys, pgroup)
        assert pub["bodyLength"] == str(len(m.body)) and int(pub["costTime"]) >= 0
        assert (pub["regionId"], pub["success"], pub["msgType"]) == ("Shanghai", "true", "0")
        assert pub["storeHost"] == proc.broker_addr and pub["offsetMsgId"] == offset_ids[pub["msgId"]]
    before = {b["msgId"]: b for b in by_type["SubBefore"]}
    assert set(before) == set(sent)
    for b in before.values():
        assert (b["groupName"], b["retryTimes"], b["keys"]) == (cgroup, "0", sent[b["msgId"]].keys)
    for a in by_type["SubAfter"]:
        b = before[a["msgId"]]
        assert (a["requestId"], a["success"], a["contextCode"], a["groupName"]) == (b["requestId"], "true", "0", cgroup)
        assert int(a["costTime"]) >= 0
    # the index keys of trace messages are the traced ids and keys, so lookups by either find them
    keys = {k for tm in trace_msgs for k in (tm.keys or "").split(" ")}
    assert set(sent) <= keys and {"k0", "order-2"} <= keys
    raw = trace_msgs[0].body.decode()
    assert raw.endswith(FIELD_SPLITOR) and CONTENT_SPLITOR in raw


async def test_trace_failure_never_fails_sends(rmqd_factory: Any, name: str) -> None:
    """No trace topic and no auto-creation: every trace write fails, every send still succeeds."""
    proc = rmqd_factory(broker_conf={"autoCreateTopicEnable": False})
    ns = proc.namesrv_addr
    topic = f"T_{name}"
    await create_topic(ns, topic, 1)
    with anyio.fail_after(60):
        async with Producer(f"P_{name}", ns, enable_trace=True, trace_topic=f"Missing_{name}") as producer:
            for i in range(5):
                assert (await producer.send(Message(topic, f"m{i}"))).status is SendStatus.SEND_OK
            tracer = producer._trace
            assert tracer is not None
    assert tracer.sent == 0 and len(await drain(ns, topic)) == 5


def test_encoding_follows_trace_data_encoder() -> None:
    """Field order and text of TraceDataEncoder.encoderFromContextBean; Java writes a null as "null"."""
    from rmq.client.trace import TraceBean, TraceContext, encode_trace

    bean = TraceBean(topic="T", msg_id="ID1", offset_msg_id="OFF1", tags=None, keys="a b", store_host="h:1",
                     body_length=5, msg_type=0)
    text, keys = encode_trace(TraceContext("Pub", "PG", [bean], timestamp=1700, region_id="R", cost_time=3))
    assert text == "\x01".join(["Pub", "1700", "R", "PG", "T", "ID1", "null", "a b", "h:1", "5", "3", "0", "OFF1",
                                "true"]) + "\x02"
    assert keys == ["ID1", "a", "b"]
    text, _ = encode_trace(TraceContext("SubAfter", "CG", [bean], timestamp=1800, request_id="RQ", cost_time=2,
                                        success=False, context_code=4))
    assert text == "\x01".join(["SubAfter", "RQ", "ID1", "2", "false", "a b", "4", "1800", "CG"]) + "\x02"
    assert decode_traces(text)[0] == {"traceType": "SubAfter", "requestId": "RQ", "msgId": "ID1", "costTime": "2",
                                      "success": "false", "keys": "a b", "contextCode": "4", "timestamp": "1800",
                                      "groupName": "CG"}


async def test_broker_trace_off_is_respected(rmqd_factory: Any, name: str) -> None:
    """traceOn=false answers TRACE_ON=false; SendMessageTraceHookImpl then writes no Pub record."""
    proc = rmqd_factory(broker_conf={"traceTopicEnable": True, "traceOn": False})
    ns, topic = proc.namesrv_addr, f"T_{name}"
    await create_topic(ns, topic, 1)
    with anyio.fail_after(30):
        async with Producer(f"P_{name}", ns, enable_trace=True) as producer:
            r = await producer.send(Message(topic, b"x"))
            assert r.status is SendStatus.SEND_OK and r.trace_on is False
    assert producer._trace is not None and producer._trace.sent == 0
    assert await drain(ns, "RMQ_SYS_TRACE_TOPIC") == []
