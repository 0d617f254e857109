"""Timer messages (RocketMQ 5's TIMER_* properties) against a real rmqd with our client: delivered
no earlier than asked, refused beyond the horizon / when the wheel is off / when not a number,
recalled by handle, surviving a SIGKILL and a restart that spans the due time, and answered on
GET_TIMER_CHECK_POINT / GET_TIMER_METRICS."""

from __future__ import annotations

import json
import struct
import time
from typing import Any

import anyio
import pytest

from rmq.client import BrokerError, Message, Producer, PullConsumer, PullStatus, SendError
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.plugins.timer.stage import encode_handle
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.message import MessageExt
from rmq.testing.daemon import RmqdProcess

pytestmark = pytest.mark.anyio

FAST = {"timerPrecisionMs": 100, "timerFlushIntervalMs": 100, "timerMaxDelaySec": 600}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def drain(ns: str, topic: str, wait_for: int = 0, timeout: float = 15, queues: bool = True) -> list[MessageExt]:
    """Every message in ``topic`` (all queues), waiting up to ``timeout`` for ``wait_for`` of them."""
    got: list[MessageExt] = []
    async with PullConsumer("TIMER_CHECK", ns) as pc:
        mqs = await pc.fetch_queues(topic)
        offsets = dict.fromkeys(mqs, 0)
        with anyio.move_on_after(timeout):
            while True:
                for mq in mqs:
                    r = await pc.pull(mq, offsets[mq], 32)
                    if r.status is PullStatus.FOUND:
                        got += r.messages
                        offsets[mq] = r.next_begin_offset
                if len(got) >= wait_for:
                    break
                await anyio.sleep(0.05)
    return got


async def admin(addr: str, code: int, ext: dict[str, str] | None = None) -> RemotingCommand:
    async with TcpRemotingClient(RemotingConfig(name="timer-admin")) as c:
        return await c.invoke(addr, RemotingCommand.request(code, ext or {}), 5)


async def wheel_past(addr: str, ms: int, timeout: float = 15) -> None:
    """Wait until the timer checkpoint says every slot up to ``ms`` has been delivered."""
    with anyio.fail_after(timeout):
        while True:
            r = await admin(addr, RequestCode.GET_TIMER_CHECK_POINT)
            if r.code == 0 and struct.unpack(">q", r.body[:8])[0] > ms:
                return
            await anyio.sleep(0.1)


async def test_delivered_on_time_never_early(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory(broker_conf=FAST)
    ns = proc.namesrv_addr
    async with Producer("TIMER_P", ns) as p:
        await p.send(Message("TmA", b"warm-up"))  # creates the topic
        sent: dict[bytes, int] = {}
        base = now_ms()
        for i, ms in enumerate((700, 1200, 1700)):
            body = f"delay-{i}".encode()
            r = await p.send(Message("TmA", body, delay=ms / 1000))
            assert r.ok and r.recall_handle
            sent[body] = base + ms
        at = now_ms() + 1000
        r = await p.send(Message("TmA", b"at", deliver_at=at))
        sent[b"at"] = at
        r = await p.send(Message("TmA", b"past", deliver_at=now_ms() - 5000))  # due: stored as sent
        assert r.recall_handle is None
        early = await drain(ns, "TmA", timeout=0.3)
        drained_at = now_ms()
        # the due ones are there at once; a timed one only if sending took past its time (a busy machine)
        assert {b"past", b"warm-up"} <= {m.body for m in early}
        assert all(sent[m.body] <= drained_at for m in early if m.body in sent), [m.body for m in early]
        got = await drain(ns, "TmA", wait_for=2 + len(sent))  # from the start again: every message
    timed = {m.body: m for m in got if m.body in sent}
    assert set(timed) == set(sent)
    for body, due in sent.items():
        m = timed[body]
        assert m.store_timestamp >= due - 100 >= 0, (body, m.store_timestamp, due)  # slot precision, never early
        assert m.properties["REAL_TOPIC"] == "TmA" and "TIMER_OUT_MS" in m.properties
        assert "TIMER_DEQUEUE_MS" in m.properties
    assert len([m for m in got if m.body in sent]) == len(sent)


async def test_refusals_horizon_not_a_number_and_disabled(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory(broker_conf={**FAST, "timerMaxDelaySec": 60})
    async with Producer("TIMER_P", proc.namesrv_addr) as p:
        await p.send(Message("TmB", b"warm-up"))
        with pytest.raises(BrokerError) as e:
            await p.send(Message("TmB", b"far", delay=61))
        assert e.value.code == ResponseCode.MESSAGE_ILLEGAL and "max delay 60000ms" in str(e.value)
        r = await p.send(Message("TmB", b"edge", delay=59))
        assert r.ok
        with pytest.raises(BrokerError) as e:
            await p.send(Message("TmB", b"nan", properties={"TIMER_DELIVER_MS": "soon"}))
        assert e.value.code == ResponseCode.MESSAGE_ILLEGAL and "not a number" in str(e.value)
    proc.stop()
    off: RmqdProcess = rmqd_factory(broker_conf={**FAST, "timerWheelEnable": False})
    async with Producer("TIMER_P", off.namesrv_addr) as p:
        await p.send(Message("TmB", b"warm-up"))
        with pytest.raises(SendError) as e:  # SYSTEM_ERROR: retried by the client as Java's is, then raised
            await p.send(Message("TmB", b"timed", delay=1))
        cause = e.value.__cause__
        assert isinstance(cause, BrokerError) and cause.code == ResponseCode.SYSTEM_ERROR
        assert "timerWheelEnable is false" in str(cause)
    assert [m.body for m in await drain(off.namesrv_addr, "TmB", timeout=1.5)] == [b"warm-up"]
    r = await admin(off.broker_addr, RequestCode.GET_TIMER_CHECK_POINT)
    assert r.code == ResponseCode.SYSTEM_ERROR and r.remark == "The checkpoint is null"


async def test_delay_level_wins_over_timer_properties(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory(broker_conf={**FAST, "messageDelayLevel": "1s 2s"})
    async with Producer("TIMER_P", proc.namesrv_addr) as p:
        await p.send(Message("TmC", b"warm-up"))
        m = Message("TmC", b"both", delay_level=1, properties={"TIMER_DELAY_SEC": "300"})
        await p.send(m)
    got = await drain(proc.namesrv_addr, "TmC", wait_for=2, timeout=10)
    both = [x for x in got if x.body == b"both"]
    assert len(both) == 1 and "TIMER_DELAY_SEC" not in both[0].properties  # dropped, as RocketMQ 5 does
    assert both[0].properties["REAL_TOPIC"] == "TmC" and both[0].store_timestamp - both[0].born_timestamp >= 900


async def test_recall_by_handle(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory(broker_conf={**FAST, "recallMessageEnable": True})
    ns = proc.namesrv_addr
    async with Producer("TIMER_P", ns) as p:
        await p.send(Message("TmD", b"warm-up"))
        keep = await p.send(Message("TmD", b"keep", delay=1.5))
        drop = await p.send(Message("TmD", b"drop", delay=1.5))
        assert drop.recall_handle is not None
        assert await p.recall("TmD", drop.recall_handle) == drop.msg_id
        with pytest.raises(ValueError, match="not a recall handle"):
            await p.recall("TmD", "bm90IGEgaGFuZGxl")  # base64 of "not a handle": refused before sending
        for handle, remark in (("bm90IGEgaGFuZGxl", "recall handle is invalid"), ("%%%", "recall handle is invalid"),
                               (encode_handle("TmD", "broker-z", now_ms() + 5000, "X"), "broker service not available"),
                               (encode_handle("TmD", "broker-a", now_ms() - 5000, "X"), "timestamp invalid"),
                               (encode_handle("TmX", "broker-a", now_ms() + 5000, "X"), "topic not match")):
            r = await admin(proc.broker_addr, RequestCode.RECALL_MESSAGE, {"topic": "TmD", "recallHandle": handle})
            assert r.code == ResponseCode.ILLEGAL_OPERATION and remark in (r.remark or ""), (handle, r.remark)
        with pytest.raises(BrokerError) as e:
            await p.recall("Other", drop.recall_handle)
        assert e.value.code == ResponseCode.TOPIC_NOT_EXIST
        assert keep.recall_handle is not None
    got = await drain(ns, "TmD", wait_for=2, timeout=6)
    await anyio.sleep(1.0)  # the recalled one would have been delivered with "keep"
    got = await drain(ns, "TmD", wait_for=2, timeout=1)
    assert sorted(m.body for m in got) == [b"keep", b"warm-up"]
    metrics = json.loads((await admin(proc.broker_addr, RequestCode.GET_TIMER_METRICS)).body)
    assert metrics["timingCount"].get("TmD", {"count": 0})["count"] == 0


async def test_recall_forbidden_by_default(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory(broker_conf=FAST)
    async with Producer("TIMER_P", proc.namesrv_addr) as p:
        await p.send(Message("TmE", b"warm-up"))
        r = await p.send(Message("TmE", b"x", delay=30))
        with pytest.raises(BrokerError) as e:
            await p.recall("TmE", r.recall_handle or "")
        assert e.value.code == ResponseCode.NO_PERMISSION and "forbidden" in str(e.value)


async def test_checkpoint_and_metrics_answered(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory(broker_conf=FAST)
    async with Producer("TIMER_P", proc.namesrv_addr) as p:
        await p.send(Message("TmF", b"warm-up"))
        for i in range(5):
            await p.send(Message("TmF", f"m{i}".encode(), delay=60))
    deadline = time.monotonic() + 10
    while True:
        metrics = json.loads((await admin(proc.broker_addr, RequestCode.GET_TIMER_METRICS)).body)
        if metrics["timingCount"].get("TmF", {}).get("count") == 5 or time.monotonic() > deadline:
            break
        await anyio.sleep(0.1)
    assert metrics["timingCount"]["TmF"]["count"] == 5
    await anyio.sleep(0.3)  # a checkpoint round
    r = await admin(proc.broker_addr, RequestCode.GET_TIMER_CHECK_POINT)
    assert r.code == 0 and len(r.body) == 56
    read_time, flush_pos, queue_offset, master_offset, *_ = struct.unpack(">7q", r.body)
    assert abs(read_time - now_ms()) < 5000 and flush_pos == 5 * 32 and queue_offset == master_offset == 5


@pytest.mark.slow
async def test_survives_sigkill_and_a_restart_past_due(rmqd_factory: Any) -> None:
    """Timers checkpointed and timers sent just before a SIGKILL; the restart comes after some were
    due (delivered at once, none lost), the rest are delivered on time after it."""
    proc: RmqdProcess = rmqd_factory(broker_conf=FAST)
    ns = proc.namesrv_addr
    due: dict[bytes, int] = {}
    async with Producer("TIMER_P", ns) as p:
        await p.send(Message("TmG", b"warm-up"))
        for i in range(20):
            delay = 2000 if i % 2 else 6000  # half due while rmqd is down, half after the restart
            body = f"old-{i}".encode()
            await p.send(Message("TmG", body, delay=delay / 1000))
            due[body] = now_ms() + delay
        await anyio.sleep(0.5)  # checkpointed
        for i in range(10):
            body = f"new-{i}".encode()
            await p.send(Message("TmG", body, delay=(2000 if i % 2 else 6000) / 1000))
            due[body] = now_ms() + (2000 if i % 2 else 6000)
    proc.kill()
    await anyio.sleep(3)
    proc.start()
    got = await drain(ns, "TmG", wait_for=1 + len(due), timeout=20)
    bodies = [m.body for m in got]
    assert set(due) <= set(bodies), sorted(set(due) - set(bodies))
    for m in got:
        if m.body in due:
            assert m.store_timestamp >= due[m.body] - 100
    assert len(bodies) - len(set(bodies)) <= len(due)  # at-least-once: a replay may repeat, not multiply


async def test_delete_marker_by_property_accepted_with_recall_disabled(rmqd_factory: Any) -> None:
    """5.3.3 gates only RECALL_MESSAGE on ``recallMessageEnable``: a send carrying ``TIMER_DEL_UNIQKEY``
    (``topic+UNIQ_KEY`` of the target, same due time) is parked and deletes the target in its slot;
    one due now or earlier is refused (WHEEL_TIMER_MSG_ILLEGAL)."""
    proc: RmqdProcess = rmqd_factory(broker_conf=FAST)  # recallMessageEnable: false (RocketMQ's default)
    ns = proc.namesrv_addr
    async with Producer("TIMER_P", ns) as p:
        await p.send(Message("TmH", b"warm-up"))
        due = now_ms() + 1500
        keep = await p.send(Message("TmH", b"keep", deliver_at=due))
        target = await p.send(Message("TmH", b"target", deliver_at=due))
        marker = await p.send(Message("TmH", b"0", properties={
            "TIMER_DELIVER_MS": str(due), "TIMER_DEL_UNIQKEY": f"TmH+{target.msg_id}"}))
        assert keep.ok and target.ok and marker.ok
        assert marker.recall_handle  # 5.3.3 answers every parked message with one
        with pytest.raises(BrokerError) as e:
            await p.send(Message("TmH", b"0", properties={
                "TIMER_DELIVER_MS": str(now_ms() - 10), "TIMER_DEL_UNIQKEY": f"TmH+{keep.msg_id}"}))
        assert e.value.code == ResponseCode.MESSAGE_ILLEGAL
        assert "the delay time should be bigger than the current time" in str(e.value)
    got = await drain(ns, "TmH", wait_for=2, timeout=10)
    assert sorted(m.body for m in got) == [b"keep", b"warm-up"]
    await wheel_past(proc.broker_addr, due)  # the target's slot is delivered: it would be here by now
    got = await drain(ns, "TmH", wait_for=3, timeout=0.5)
    assert sorted(m.body for m in got) == [b"keep", b"warm-up"]


async def test_delay_level_and_timer_delivered_once_at_the_level(rmqd_factory: Any) -> None:
    """DELAY > 0 with any TIMER_* property: 5.3.3's HookUtils.checkIfTimerMessage clears all three TIMER_*
    properties, so the message waits for its delay level only and is delivered once, never parked in the
    wheel (a committed transaction the same)."""
    proc: RmqdProcess = rmqd_factory(broker_conf={**FAST, "messageDelayLevel": "1s 2s"})
    ns = proc.namesrv_addr
    async with Producer("TIMER_P", ns) as p:
        await p.send(Message("TmI", b"warm-up"))
        sent = now_ms()
        for name, value in (("TIMER_DELIVER_MS", str(sent + 3000)), ("TIMER_DELAY_MS", "3000"),
                            ("TIMER_DELAY_SEC", "3")):
            r = await p.send(Message("TmI", name.encode(), delay_level=1, properties={name: value}))
            assert r.recall_handle is None  # not a timer message
        got = await drain(ns, "TmI", wait_for=4, timeout=10)
        metrics = json.loads((await admin(proc.broker_addr, RequestCode.GET_TIMER_METRICS)).body)
    assert metrics["timingCount"].get("TmI", {"count": 0})["count"] == 0  # nothing in the wheel
    assert sorted(m.body for m in got) == [b"TIMER_DELAY_MS", b"TIMER_DELAY_SEC", b"TIMER_DELIVER_MS", b"warm-up"]
    for m in got:
        if m.body != b"warm-up":
            assert 900 <= m.store_timestamp - sent < 2500, (m.body, m.store_timestamp - sent)  # the level's 1 s
            assert not {"TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_OUT_MS"} & set(m.properties)
    await wheel_past(proc.broker_addr, sent + 3000)  # the timers' slots are delivered: no second copy
    again = await drain(ns, "TmI", wait_for=5, timeout=0.5)
    assert len(again) == 4


async def test_due_timer_is_re_put_with_wait_false(rmqd_factory: Any) -> None:
    """5.3.3's convertMessage re-puts a due timer with WAIT=false (a SYNC_MASTER's slave never holds or fails
    a timer delivery): consumers see the property as on RocketMQ."""
    proc: RmqdProcess = rmqd_factory(broker_conf=FAST)
    ns = proc.namesrv_addr
    async with Producer("TIMER_W", ns) as p:
        await p.send(Message("TmW", b"warm-up"))  # creates the topic
        r = await p.send(Message("TmW", b"due", delay=0.3))
        assert r.ok
        got = await drain(ns, "TmW", wait_for=2)
    due = [m for m in got if m.body == b"due"]
    assert len(due) == 1 and due[0].properties.get("WAIT") == "false", due
