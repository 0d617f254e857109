"""Group membership changes: queues move between members without losing messages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import anyio
import pytest

from rmq.client import Message, MessageExt, Producer, PushConsumer
from rmq.client.testing import FAST, create_topic

pytestmark = pytest.mark.anyio
QUEUES = 8


def _partitioned(consumers: list[PushConsumer], topic: str) -> bool:
    owned = [{q for q in c.assignment() if q.topic == topic} for c in consumers]
    union = set().union(*owned)
    return len(union) == QUEUES and sum(len(o) for o in owned) == QUEUES and all(owned)


async def _wait_partition(consumers: list[PushConsumer], topic: str, limit: float) -> float:
    t0 = time.monotonic()
    with anyio.fail_after(limit):
        while not _partitioned(consumers, topic):  # noqa: ASYNC110
            await anyio.sleep(0.05)
    return time.monotonic() - t0


async def test_third_member_joins_and_one_leaves_without_loss(ns: str, name: str) -> None:
    topic, group = f"T_{name}", f"G_{name}"
    await create_topic(ns, topic, QUEUES)
    received: Counter[int] = Counter()

    async def listener(m: MessageExt) -> None:
        received[int(m.body)] += 1

    def consumer() -> PushConsumer:
        return PushConsumer(group, ns, listener=listener, consume_from_where="FIRST_OFFSET", **FAST)

    sent = 0
    stop = anyio.Event()
    produced = anyio.Event()

    async def produce(producer: Producer) -> None:
        nonlocal sent
        while not stop.is_set():
            await producer.send(Message(topic, str(sent)))
            sent += 1
            await anyio.sleep(0.003)
        produced.set()

    with anyio.fail_after(60):
        async with Producer(f"P_{name}", ns) as producer, anyio.create_task_group() as tg:
            a, b, c = consumer(), consumer(), consumer()
            async with a, b:
                a.subscribe(topic)
                b.subscribe(topic)
                await _wait_partition([a, b], topic, 15)
                tg.start_soon(produce, producer)
                await anyio.sleep(0.5)
                async with c:
                    c.subscribe(topic)
                    await _wait_partition([a, b, c], topic, 15)
                    await anyio.sleep(0.5)
                    await b.shutdown()  # graceful leave: offsets committed, unregistered
                    await _wait_partition([a, c], topic, 15)
                    await anyio.sleep(0.5)
                    stop.set()
                    await produced.wait()
                    with anyio.fail_after(15):
                        while not set(range(sent)) <= set(received):  # noqa: ASYNC110
                            await anyio.sleep(0.05)
    assert set(received) == set(range(sent)), "a message was lost"
    dups = sum(n - 1 for n in received.values())
    assert dups <= sent // 4, f"{dups} duplicates of {sent}: more than around the handovers"


CHILD = textwrap.dedent(
    """
    import sys, time
    from rmq.client.blocking import PushConsumer
    ns, topic, group = sys.argv[1:4]
    c = PushConsumer(group, namesrv_addr=ns, listener=lambda m: None, consume_from_where="FIRST_OFFSET",
                     rebalance_interval=1.0, heartbeat_interval=1.0)
    c.subscribe(topic)
    c.start()
    while not any(q.topic == topic for q in c.assignment()):
        time.sleep(0.05)
    print("ready", flush=True)
    time.sleep(600)
    """
)


async def test_killed_member_queues_taken_over(ns: str, name: str) -> None:
    topic, group = f"T_{name}", f"G_{name}"
    await create_topic(ns, topic, QUEUES)
    got: set[bytes] = set()

    async def listener(m: MessageExt) -> None:
        got.add(m.body)

    child = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child we SIGKILL
        [sys.executable, "-c", CHILD, ns, topic, group], stdout=subprocess.PIPE,
                             env={**os.environ})
    try:
        with anyio.fail_after(45):
            async with PushConsumer(group, ns, listener=listener, consume_from_where="FIRST_OFFSET", **FAST) as me:
                me.subscribe(topic)
                line = await anyio.to_thread.run_sync(child.stdout.readline)  # type: ignore[union-attr]
                assert line.strip() == b"ready"
                with anyio.fail_after(15):  # both members share the queues
                    while not 0 < len([q for q in me.assignment() if q.topic == topic]) < QUEUES:  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                child.send_signal(signal.SIGKILL)
                child.wait(5)
                t0 = time.monotonic()
                with anyio.fail_after(10):  # broker drops the dead connection; we rebalance
                    while len([q for q in me.assignment() if q.topic == topic]) < QUEUES:  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                took = time.monotonic() - t0
                async with Producer(f"P_{name}", ns) as producer:
                    for i in range(40):
                        await producer.send(Message(topic, str(i)))
                with anyio.fail_after(10):
                    while len(got) < 40:  # noqa: ASYNC110
                        await anyio.sleep(0.05)
        assert took < 1.0 + 3.0  # one rebalance interval (plus slack)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(5)


async def test_allocation_by_name_and_unknown_name(ns: str, name: str) -> None:
    topic, group = f"T_{name}", f"G_{name}"
    await create_topic(ns, topic, QUEUES)

    async def listener(m: MessageExt) -> None:
        return None

    with anyio.fail_after(30):
        a = PushConsumer(group, ns, listener=listener, allocation="averagely_by_circle", **FAST)
        b = PushConsumer(group, ns, listener=listener, allocation="averagely_by_circle", **FAST)
        async with a, b:
            a.subscribe(topic)
            b.subscribe(topic)
            await _wait_partition([a, b], topic, 15)
            ids = sorted(q.queue_id for q in a.assignment() if q.topic == topic)
            assert ids in ([0, 2, 4, 6], [1, 3, 5, 7])  # circle: every other queue
        bad = PushConsumer(f"X_{name}", ns, listener=listener, allocation="no_such_strategy")
        with pytest.raises(KeyError, match="available: .*averagely"):
            async with bad:
                pass
