"""Producer features end to end against rmqd, checked through consumers."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from rmq.client import (
    Admin,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendStatus,
)
from rmq.client.testing import FAST, collect_until, create_topic, drain

pytestmark = pytest.mark.anyio


async def test_send_and_consume_preserves_everything(ns: str, name: str) -> None:
    topic, group = f"T_{name}", f"G_{name}"
    await create_topic(ns, topic, 4)
    big = bytes(range(256)) * 40  # 10 KiB: compressed on the wire, inflated for the consumer
    sent: dict[str, Message] = {}
    with anyio.fail_after(30):
        async with Producer(f"P_{name}", ns) as producer:
            msgs = [
                Message(topic, "plain ü", tags="TagA", keys=["k1", "k2"], properties={"color": "red", "n": "1"}),
                Message(topic, big, tags="TagB", keys="big"),
                Message(topic, b"", tags="TagC"),
            ]
            for m in msgs:
                r = await producer.send(m)
                assert r.status is SendStatus.SEND_OK and r.queue.topic == topic and r.queue_offset >= 0
                assert len(r.msg_id) == 32 and len(r.offset_msg_id) == 32
                sent[r.msg_id] = m
            got = await collect_until(ns, group, topic, "*", lambda got: len(got) >= 3, consume_from_where="FIRST_OFFSET")
    assert len(got) == 3
    for g in got:
        m = sent[g.msg_id]
        assert g.body == m.body and g.topic == topic
        assert g.tags == m.tags and g.keys == m.keys
        for k, v in m.properties.items():
            assert g.properties[k] == v
    assert {g.properties.get("color") for g in got} >= {"red"}


async def test_auto_created_topic_and_unknown_topic_error(ns: str, name: str, rmqd_factory: Any) -> None:
    with anyio.fail_after(30):
        async with Producer(f"P_{name}", ns) as producer:  # autoCreateTopicEnable (default): TBW102 route
            r = await producer.send(Message(f"Auto_{name}", b"x"))
            assert r.status is SendStatus.SEND_OK
        strict = rmqd_factory(broker_conf={"autoCreateTopicEnable": False})
        async with Producer(f"P_{name}", strict.namesrv_addr) as producer:
            with pytest.raises(Exception, match=r"no route info for topic .*autoCreateTopicEnable"):
                await producer.send(Message(f"Nope_{name}", b"x"))


async def test_batch_split_and_offsets(ns: str, name: str) -> None:
    topic = f"T_{name}"
    await create_topic(ns, topic, 1)
    with anyio.fail_after(30):
        async with Producer(f"P_{name}", ns, batch_max_bytes=8 * 1024) as producer:
            msgs = [Message(topic, f"m{i:03d}".encode() * 100, keys=f"key{i}", tags="B") for i in range(60)]
            results = await producer.send_batch(msgs)
            assert len(results) > 1  # split under the 8 KiB limit
            assert sum(len(r.msg_ids) for r in results) == 60
            offsets = [r.queue_offset for r in results]
            assert offsets == sorted(offsets)
        got = await drain(ns, topic)
    assert [m.body for m in got] == [m.body for m in msgs]
    assert [m.keys for m in got] == [f"key{i}" for i in range(60)]
    assert [m.queue_offset for m in got] == list(range(60))
    assert len({m.msg_id for m in got}) == 60


async def test_send_async_oneway_and_selectors(ns: str, name: str) -> None:
    topic = f"T_{name}"
    await create_topic(ns, topic, 8)
    results: list[Any] = []
    with anyio.fail_after(30):
        async with Producer(f"P_{name}", ns) as producer:
            for i in range(50):
                await producer.send_async(Message(topic, f"a{i}"), lambda r, e: results.append((r, e)))
            await producer.wait_async_sends()
            assert len(results) == 50 and all(e is None and r.ok for r, e in results)

            async def acb(r: Any, e: Any) -> None:
                results.append((r, e))

            await producer.send_async(Message(topic, "coro-callback"), acb)
            await producer.wait_async_sends()
            assert len(results) == 51
            for i in range(5):
                await producer.send_oneway(Message(topic, f"ow{i}"))
            # same sharding key -> same queue
            qs = {(await producer.send(Message(topic, f"o{i}"), sharding_key="cust-7")).queue for i in range(10)}
            assert len(qs) == 1
            # any callable selector
            last = MessageQueue(topic, "x", 0)

            def pick_last(queues: Any, msg: Any, arg: Any) -> MessageQueue:
                nonlocal last
                last = queues[-1]
                return last

            r = await producer.send(Message(topic, "sel"), selector=pick_last)
            assert r.queue == last and last.queue_id == 7
            r = await producer.send(Message(topic, "q"), queue=MessageQueue(topic, r.queue.broker_name, 3))
            assert r.queue.queue_id == 3
        got = await drain(ns, topic)
    bodies = {m.body for m in got}
    assert {f"ow{i}".encode() for i in range(5)} <= bodies
    assert len(got) == 50 + 1 + 5 + 10 + 2


async def test_delay_level(ns: str, name: str) -> None:
    topic = f"T_{name}"
    await create_topic(ns, topic, 1)
    with anyio.fail_after(30):
        async with Producer(f"P_{name}", ns) as producer:
            r = await producer.send(Message(topic, b"later", delay_level=2))
            assert r.ok
            sent_at = anyio.current_time()
            async with PullConsumer(f"C_{name}", ns) as pc:
                mq = (await pc.fetch_queues(topic))[0]
                res = await pc.pull(mq, 0, 32)
                assert res.status is PullStatus.NO_NEW_MSG  # hidden until due
                while True:
                    res = await pc.pull(mq, 0, 32, block=True)
                    if res.status is PullStatus.FOUND:
                        break
    assert anyio.current_time() - sent_at >= 0.8
    assert res.messages[0].body == b"later"


async def test_push_consumer_basic_counts(ns: str, name: str) -> None:
    """Many messages over several queues, async listener, every message exactly once."""
    topic, group = f"T_{name}", f"G_{name}"
    await create_topic(ns, topic, 4)
    n = 2000
    with anyio.fail_after(60):
        async with Producer(f"P_{name}", ns) as producer:
            for i in range(0, n, 100):
                await producer.send_batch([Message(topic, str(i + j)) for j in range(100)])
        got = await collect_until(ns, group, topic, "*", lambda got: len(got) >= n, consume_from_where="FIRST_OFFSET")
        assert sorted(int(m.body) for m in got) == list(range(n))
        async with Admin(ns) as admin:
            with anyio.fail_after(10):
                while await admin.consumer_lag(group, topic) != 0:  # noqa: ASYNC110
                    await anyio.sleep(0.1)


async def test_sync_listener_batches(ns: str, name: str) -> None:
    topic, group = f"T_{name}", f"G_{name}"
    await create_topic(ns, topic, 2)
    batches: list[int] = []
    done = anyio.Event()
    total = 0

    def listener(msgs: list[Any]) -> None:  # plain function: runs in a worker thread
        nonlocal total
        assert isinstance(msgs, list)
        batches.append(len(msgs))
        total += len(msgs)

    with anyio.fail_after(30):
        async with Producer(f"P_{name}", ns) as producer:
            await producer.send_batch([Message(topic, str(i)) for i in range(100)])
        async with PushConsumer(group, ns, listener=listener, consume_from_where="FIRST_OFFSET",
                                consume_batch_size=8, **FAST) as c:
            c.subscribe(topic)
            while total < 100:  # noqa: ASYNC110
                await anyio.sleep(0.05)
    assert total == 100 and max(batches) <= 8 and max(batches) > 1
    _ = done
