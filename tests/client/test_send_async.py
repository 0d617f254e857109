"""send_async on asyncio without a task per send (rmq.client.sendcb): what send_async promised with a task
still holds — results, callbacks of both kinds, failing callbacks, back-pressure, retries on another broker,
timeouts, shutdown with sends in flight."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import anyio
import pytest

from rmq.client import Admin, Message, Producer, SendError, SendStatus
from rmq.client.route import PERM_READ
from rmq.client.testing import create_topic, drain

from .test_trace import _traces

pytestmark = pytest.mark.anyio


async def test_callbacks_without_a_task(ns: str, name: str) -> None:
    """Once the route and the connection exist, a send_async leaves no task behind it; plain callbacks run
    (a failing one does not stop the others), coroutine ones too, and max_async_in_flight holds."""
    topic = f"T_{name}"
    await create_topic(ns, topic, 4)
    results: list[Any] = []
    peak = 0
    with anyio.fail_after(30):
        async with Producer(f"P_{name}", ns, max_async_in_flight=3) as producer:
            assert (await producer.send(Message(topic, "warm"))).ok  # route and connection ready

            def cb(r: Any, e: Any) -> None:
                nonlocal peak
                peak = max(peak, producer._aio_inflight)
                results.append((r, e))
                if len(results) % 7 == 0:
                    raise RuntimeError("a user callback failing")

            for i in range(60):
                await producer.send_async(Message(topic, f"a{i}"), cb)
                assert not producer._aio_tasks  # the send went out without a task
                assert producer._aio_inflight <= 3
            await producer.wait_async_sends()
            assert len(results) == 60 and all(e is None and r.status is SendStatus.SEND_OK for r, e in results)
            assert 1 <= peak <= 3

            async def acb(r: Any, e: Any) -> None:
                await asyncio.sleep(0)
                results.append((r, e))

            await producer.send_async(Message(topic, "coro"), acb)
            await producer.send_async(Message(topic, "none"))
            await producer.wait_async_sends()
            assert len(results) == 61 and results[-1][0].ok
            assert producer._aio_inflight == 0 and not producer._aio_sends
        got = await drain(ns, topic)
    assert len(got) == 63


async def test_round_robin_when_the_first_sends_wait_for_a_connection(ns: str, name: str) -> None:
    """Route known, broker not connected yet: the sends go to tasks (to the queue send_async picked), all
    succeed, spread evenly over the queues."""
    topic = f"T_{name}"
    await create_topic(ns, topic, 4)
    results: list[Any] = []
    with anyio.fail_after(30):
        async with Producer(f"P_{name}", ns) as producer:
            assert len(await producer.fetch_publish_queues(topic)) == 4
            assert not producer.instance.remoting.connections() or all(
                c.remote_addr[1] != int(producer.instance.master_addr("broker-a").rsplit(":", 1)[1])
                for c in producer.instance.remoting.connections())
            for i in range(8):
                await producer.send_async(Message(topic, f"f{i}"), lambda r, e: results.append((r, e)))
            assert len(producer._aio_tasks) == 8
            await producer.wait_async_sends()
    assert all(e is None for _, e in results)
    counts = [sum(r.queue.queue_id == q for r, _ in results) for q in range(4)]
    assert counts == [2, 2, 2, 2], counts


async def test_retry_on_another_broker(rmqd_factory: Any, name: str) -> None:
    """A broker refusing the send (NO_PERMISSION, a retried code): the answer's callback hands the send to
    the retry loop, which sends it to the other broker."""
    a = rmqd_factory(broker_conf={"brokerName": "broker-a"})
    b = rmqd_factory(namesrv=False, broker_conf={"brokerName": "broker-b", "namesrvAddr": a.namesrv_addr})
    ns = a.namesrv_addr
    topic = f"T_{name}"
    results: list[Any] = []
    with anyio.fail_after(60):
        async with Admin(ns) as admin:
            await admin.create_topic(topic, 2)
            async with Producer(f"P_{name}", ns, route_interval=3600) as producer:
                for i in range(6):  # both brokers' connections open, the route cached
                    assert (await producer.send(Message(topic, f"w{i}"))).ok
                await admin.create_topic(topic, 2, perm=PERM_READ, broker_addr=a.broker_addr)
                for i in range(10):
                    await producer.send_async(Message(topic, f"r{i}"), lambda r, e: results.append((r, e)))
                await producer.wait_async_sends()
                assert producer._fault is not None and not producer._fault.is_available("broker-a")  # refused once
    assert len(results) == 10
    assert all(e is None and r.ok and r.queue.broker_name == "broker-b" for r, e in results), results
    assert b.broker_addr


async def test_timeout_and_shutdown_in_flight(rmqd_factory: Any, name: str) -> None:
    """A broker that stops answering: the send's timeout reaches the callback as an error; sends still in
    flight at shutdown are dropped (as a cancelled task's) and shutdown does not wait for them."""
    d = rmqd_factory()
    topic = f"T_{name}"
    await create_topic(d.namesrv_addr, topic, 2)
    results: list[Any] = []
    assert d.proc is not None
    with anyio.fail_after(60):
        async with Producer(f"P_{name}", d.namesrv_addr, retry_times_async=1) as producer:
            assert (await producer.send(Message(topic, "warm"))).ok
            os.kill(d.proc.pid, signal.SIGSTOP)
            try:
                await producer.send_async(Message(topic, "late"), lambda r, e: results.append((r, e)), timeout=0.5)
                await producer.wait_async_sends()
                assert len(results) == 1 and results[0][0] is None
                assert isinstance(results[0][1], SendError)
                await producer.send_async(Message(topic, "dropped"), lambda r, e: results.append((r, e)), timeout=30)
                assert producer._aio_sends
            finally:
                if producer._aio_inflight == 0:
                    os.kill(d.proc.pid, signal.SIGCONT)
        assert producer._aio_inflight == 0 and not producer._aio_sends
        os.kill(d.proc.pid, signal.SIGCONT)
    assert len(results) == 1


async def test_async_sends_are_traced(rmqd_factory: Any, name: str) -> None:
    """A send answered through the callback path writes its Pub trace record as a task-run send does."""
    proc = rmqd_factory(broker_conf={"traceTopicEnable": True})
    ns = proc.namesrv_addr
    topic = f"T_{name}"
    await create_topic(ns, topic, 2)
    ids: list[str] = []
    with anyio.fail_after(60):
        async with Producer(f"P_{name}", ns, enable_trace=True) as producer:
            ids.append((await producer.send(Message(topic, "warm"))).msg_id)
            for i in range(4):
                await producer.send_async(Message(topic, f"a{i}"), lambda r, e: ids.append(r.msg_id))
                assert not producer._aio_tasks
            await producer.wait_async_sends()
    records, _ = await _traces(ns, "RMQ_SYS_TRACE_TOPIC", 5)
    pubs = {r["msgId"]: r for r in records if r["traceType"] == "Pub"}
    assert set(ids) == set(pubs) and len(ids) == 5
    assert all(r["success"] == "true" and r["topic"] == topic for r in pubs.values())
