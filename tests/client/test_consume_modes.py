"""Retries, orderly, broadcasting, filters: PushConsumer behaviour against rmqd."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import anyio
import pytest

from rmq.client import ConsumeResult, Message, MessageExt, Producer, PushConsumer
from rmq.client.testing import FAST, collect_until, create_topic

pytestmark = pytest.mark.anyio


async def test_failed_messages_come_back_via_retry_topic(ns: str, name: str) -> None:
    topic, group = f"T_{name}", f"G_{name}"
    await create_topic(ns, topic, 2)
    seen: dict[bytes, list[int]] = defaultdict(list)
    done = anyio.Event()

    async def listener(msg: MessageExt) -> Any:
        seen[msg.body].append(msg.reconsume_times)
        assert msg.topic == topic  # restored from RETRY_TOPIC on redelivery
        if msg.body == b"raise" and msg.reconsume_times == 0:
            raise RuntimeError("first attempt fails")
        if msg.body == b"later" and msg.reconsume_times < 2:
            return ConsumeResult.RECONSUME_LATER
        if len(seen[b"later"]) == 3 and len(seen[b"raise"]) == 2:
            done.set()
        return None

    with anyio.fail_after(40):
        async with PushConsumer(group, ns, listener=listener, consume_from_where="FIRST_OFFSET", **FAST) as c:
            c.subscribe(topic)
            async with Producer(f"P_{name}", ns) as producer:
                for body in (b"ok", b"raise", b"later"):
                    await producer.send(Message(topic, body, keys=body.decode()))
            await done.wait()
    assert seen[b"ok"] == [0]
    assert seen[b"raise"] == [0, 1]
    assert seen[b"later"] == [0, 1, 2]


async def test_exhausted_retries_go_to_dlq(ns: str, name: str) -> None:
    topic, group = f"T_{name}", f"G_{name}"
    await create_topic(ns, topic, 1)
    attempts = 0

    async def listener(msg: MessageExt) -> ConsumeResult:
        nonlocal attempts
        attempts += 1
        return ConsumeResult.RECONSUME_LATER

    with anyio.fail_after(40):
        async with PushConsumer(group, ns, listener=listener, consume_from_where="FIRST_OFFSET",
                                max_reconsume_times=1, **FAST) as c:
            c.subscribe(topic)
            async with Producer(f"P_{name}", ns) as producer:
                await producer.send(Message(topic, b"poison"))
            dlq = await collect_until(ns, f"DLQ_{name}", f"%DLQ%{group}", "*", lambda g: len(g) >= 1,
                                      consume_from_where="FIRST_OFFSET")
    assert dlq[0].body == b"poison"
    assert attempts == 2  # first try + one retry


async def test_tag_and_sql92_filters(ns: str, name: str) -> None:
    topic = f"T_{name}"
    await create_topic(ns, topic, 2)
    with anyio.fail_after(40):
        async with Producer(f"P_{name}", ns) as producer:
            for i in range(30):
                tag = ("TagA", "TagB", "TagC")[i % 3]
                await producer.send(Message(topic, str(i), tags=tag, properties={"n": str(i)}))
        tagged = await collect_until(ns, f"GA_{name}", topic, "TagA || TagC", lambda g: len(g) >= 20,
                                     consume_from_where="FIRST_OFFSET")
        assert {m.tags for m in tagged} == {"TagA", "TagC"} and len(tagged) == 20
        got: list[MessageExt] = []
        done = anyio.Event()

        async def listener(m: MessageExt) -> None:
            got.append(m)
            if len(got) >= 5:
                done.set()

        async with PushConsumer(f"GS_{name}", ns, listener=listener, consume_from_where="FIRST_OFFSET", **FAST) as c:
            c.subscribe(topic, "n >= 25", "SQL92")
            await done.wait()
            await anyio.sleep(0.3)
        assert sorted(int(m.body) for m in got) == [25, 26, 27, 28, 29]


async def test_orderly_keeps_per_queue_order_and_retries_in_place(ns: str, name: str) -> None:
    topic, group = f"T_{name}", f"G_{name}"
    await create_topic(ns, topic, 4)
    per_key: dict[str, list[int]] = defaultdict(list)
    failed_once: set[bytes] = set()
    total = 0
    done = anyio.Event()

    def listener(msg: MessageExt) -> ConsumeResult | None:  # sync, orderly
        nonlocal total
        key, seq = msg.body.decode().split(":")
        if seq == "5" and msg.body not in failed_once:
            failed_once.add(msg.body)
            return ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        per_key[key].append(int(seq))
        total += 1
        if total >= 80:
            done.set()
        return None

    with anyio.fail_after(40):
        async with PushConsumer(group, ns, listener=listener, orderly=True, consume_from_where="FIRST_OFFSET",
                                suspend_current_queue_time=0.1, **FAST) as c:
            c.subscribe(topic)
            async with Producer(f"P_{name}", ns) as producer:
                for seq in range(20):
                    for key in ("a", "b", "c", "d"):
                        await producer.send(Message(topic, f"{key}:{seq}"), sharding_key=key)
            await done.wait()
            assert all(pq.locked for pq in c.process_queues.values())
    for key, seqs in per_key.items():
        assert seqs == list(range(20)), key
    assert len(failed_once) == 4


async def test_broadcasting_every_member_gets_everything(ns: str, name: str, tmp_path: Any) -> None:
    topic, group = f"T_{name}", f"G_{name}"
    await create_topic(ns, topic, 4)
    got: dict[int, list[bytes]] = {0: [], 1: []}

    def make(i: int) -> Any:
        async def listener(m: MessageExt) -> None:
            got[i].append(m.body)

        return listener

    with anyio.fail_after(30):
        consumers = [
            PushConsumer(group, ns, listener=make(i), message_model="BROADCASTING", consume_from_where="LAST_OFFSET",
                         offset_store_dir=str(tmp_path), instance_name=f"bc{i}", **FAST)
            for i in range(2)
        ]
        async with consumers[0], consumers[1]:
            for c in consumers:
                c.subscribe(topic)
            while not all(len(c.assignment()) == 4 for c in consumers):  # noqa: ASYNC110
                await anyio.sleep(0.05)
            async with Producer(f"P_{name}", ns) as producer:
                for i in range(20):
                    await producer.send(Message(topic, str(i)))
            while not all(len(v) >= 20 for v in got.values()):  # noqa: ASYNC110
                await anyio.sleep(0.05)
    for i in (0, 1):
        assert sorted(got[i], key=int) == [str(j).encode() for j in range(20)]
    files = list(tmp_path.rglob("offsets.json"))
    assert len(files) == 2  # one local offset file per instance
    doc = json.loads(files[0].read_text())
    assert sum(e["offset"] for e in doc["offsets"] if e["topic"] == topic) == 20


async def test_start_offset_rules(ns: str, name: str) -> None:
    """A new group starts where the broker says; only without a stored offset does consume_from_where apply.

    Java's broker answers 0 (not "none") for a queue whose first message is still in
    memory, so on a fresh topic every mode starts at 0, exactly as Java clients do.
    """
    import time as _time

    topic = f"T_{name}"
    await create_topic(ns, topic, 1)
    with anyio.fail_after(30):
        async with Producer(f"P_{name}", ns) as producer:
            for i in range(5):
                await producer.send(Message(topic, f"old{i}"))
                await anyio.sleep(0.01)
            await anyio.sleep(0.2)
            cut = int(_time.time() * 1000)
        for mode in ("TIMESTAMP", "LAST_OFFSET", "FIRST_OFFSET"):
            got = await collect_until(ns, f"G{mode}_{name}", topic, "*", lambda g: len(g) >= 5,
                                      consume_from_where=mode, consume_timestamp=cut)
            assert sorted(m.body for m in got) == [f"old{i}".encode() for i in range(5)], mode
        async with PushConsumer(f"GX_{name}", ns, listener=lambda m: None, consume_from_where="TIMESTAMP",
                                consume_timestamp=cut) as c:
            mq = (await c.fetch_subscribe_queues(topic))[0]
            assert await c.instance.search_offset(mq, cut) in (4, 5)  # nearest stored time: what TIMESTAMP uses


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_slow_listener_consumes_one_queues_batch_in_parallel(ns: str, name: str, kind: str) -> None:
    """As Java's pool (a thread per consume_batch_size chunk): the messages of one pulled batch of one queue
    are consumed side by side (up to consume_concurrency) when the listener is slow, and a stuck message
    holds the committed offset at itself while the messages after it are consumed."""
    import threading
    import time

    topic, group = f"T_{name}", f"G_{name}"
    await create_topic(ns, topic, 1)
    n, stuck_at = 80, 40
    lock = threading.Lock()
    now = {"in": 0, "max": 0}
    done, release = threading.Event(), threading.Event()
    seen: set[bytes] = set()

    def enter(msg: MessageExt) -> None:
        with lock:
            now["in"] += 1
            now["max"] = max(now["max"], now["in"])
            seen.add(msg.body)
            if len(seen) == n:
                done.set()

    def leave() -> None:
        with lock:
            now["in"] -= 1

    def sync_listener(msg: MessageExt) -> None:
        enter(msg)
        try:
            release.wait(60) if msg.body == b"stuck" else time.sleep(0.05)
        finally:
            leave()

    async def async_listener(msg: MessageExt) -> None:
        enter(msg)
        try:
            if msg.body == b"stuck":
                await anyio.to_thread.run_sync(release.wait, 60)
            else:
                await anyio.sleep(0.05)
        finally:
            leave()

    async with Producer(f"P_{name}", ns) as producer:  # a backlog: the consumer pulls batches of 32
        for i in range(n):
            await producer.send(Message(topic, b"stuck" if i == stuck_at else f"m{i}".encode()))
    listener = async_listener if kind == "async" else sync_listener
    try:
        async with PushConsumer(group, ns, listener=listener, consume_from_where="FIRST_OFFSET", **FAST) as c:
            c.subscribe(topic)
            assert await anyio.to_thread.run_sync(done.wait, 60), len(seen)
            assert c.offset_store is not None
            store = c.offset_store

            def settled() -> bool:  # every message but the stuck one consumed and its offset committed
                return [off for mq, off in store.table.items() if mq.topic == topic] == [stuck_at] and now["in"] == 1

            with anyio.move_on_after(30):
                while not settled():  # noqa: ASYNC110 - the consumer's own tasks and threads change it
                    await anyio.sleep(0.05)
            assert settled(), (dict(store.table), now)
            assert now["max"] > 4, now  # one queue, yet many of its messages at once
            release.set()
    finally:
        release.set()
