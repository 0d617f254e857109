"""PullConsumer, LitePullConsumer and Admin against rmqd."""

from __future__ import annotations

import time

import anyio
import pytest

from rmq.client import (
    Admin,
    LitePullConsumer,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
)
from rmq.client.testing import FAST, create_topic

pytestmark = pytest.mark.anyio


async def _fill(ns: str, name: str, topic: str, n: int, queues: int = 2) -> list[int]:
    await create_topic(ns, topic, queues)
    stamps = []
    async with Producer(f"P_{name}", ns) as producer:
        for i in range(n):
            r = await producer.send(Message(topic, str(i), tags="odd" if i % 2 else "even",
                                            properties={"i": str(i)}, keys=f"key-{i}"),
                                    queue=MessageQueue(topic, "broker-a", i % queues))
            assert r.ok
            stamps.append(int(time.time() * 1000))
    return stamps


async def test_pull_consumer_building_blocks(ns: str, name: str) -> None:
    topic = f"T_{name}"
    with anyio.fail_after(30):
        await _fill(ns, name, topic, 40)
        async with PullConsumer(f"C_{name}", ns) as pc:
            queues = await pc.fetch_queues(topic)
            assert queues == [MessageQueue(topic, "broker-a", 0), MessageQueue(topic, "broker-a", 1)]
            mq = queues[0]
            assert await pc.min_offset(mq) == 0 and await pc.max_offset(mq) == 20
            res = await pc.pull(mq, 0, 8)
            assert res.status is PullStatus.FOUND and len(res.messages) == 8 and res.next_begin_offset == 8
            assert res.min_offset == 0 and res.max_offset == 20
            assert [m.queue_offset for m in res.messages] == list(range(8))
            odd = await pc.pull(queues[1], 0, 32, expression="odd")
            assert {m.tags for m in odd.messages} == {"odd"}
            sql = await pc.pull(mq, 0, 32, expression="i BETWEEN 10 AND 13", expression_type="SQL92")
            assert sorted(int(m.body) for m in sql.messages) == [10, 12]
            end = await pc.pull(mq, 20, 32)
            assert end.status is PullStatus.NO_NEW_MSG and end.next_begin_offset == 20
            bad = await pc.pull(mq, 999, 32)
            assert bad.status is PullStatus.OFFSET_ILLEGAL and bad.next_begin_offset == 20
            first_ts = await pc.earliest_msg_store_time(mq)
            assert first_ts > 0
            assert await pc.search_offset(mq, first_ts) == 0
            assert await pc.search_offset(mq, int(time.time() * 1000) + 60_000) in (19, 20)
            assert await pc.fetch_consume_offset(mq) in (None, 0)  # Java: 0 for a fresh queue still in memory
            await pc.update_consume_offset(mq, 7)
            assert await pc.fetch_consume_offset(mq) == 7


async def test_pull_consumer_long_poll_wakes_on_new_message(ns: str, name: str) -> None:
    topic = f"T_{name}"
    await create_topic(ns, topic, 1)
    with anyio.fail_after(30):
        async with PullConsumer(f"C_{name}", ns) as pc, Producer(f"P_{name}", ns) as producer:
            mq = (await pc.fetch_queues(topic))[0]
            result = None

            async def wait_pull() -> None:
                nonlocal result
                result = await pc.pull(mq, 0, 32, block=True)

            async with anyio.create_task_group() as tg:
                tg.start_soon(wait_pull)
                await anyio.sleep(0.3)
                t0 = time.monotonic()
                await producer.send(Message(topic, b"wake"))
            assert result is not None and result.status is PullStatus.FOUND
            assert time.monotonic() - t0 < 1.0


async def test_lite_pull_subscribe_poll_commit_seek(ns: str, name: str) -> None:
    topic, group = f"T_{name}", f"G_{name}"
    with anyio.fail_after(40):
        stamps = await _fill(ns, name, topic, 40)
        async with LitePullConsumer(group, ns, consume_from_where="FIRST_OFFSET", auto_commit=False, **FAST) as lite:
            lite.subscribe(topic)
            got = []
            while len(got) < 40:
                got.extend(await lite.poll(timeout=5))
            assert sorted(int(m.body) for m in got) == list(range(40))
            assert await lite.poll(timeout=0.2) == []
            mq0, mq1 = lite.assignment()[0], lite.assignment()[1]
            assert await lite.committed(mq0) in (None, 0)  # nothing committed yet (auto_commit off)
            await lite.commit()
            assert await lite.committed(mq0) == 20 and await lite.committed(mq1) == 20
            await lite.seek(mq0, 15)
            again = await lite.poll(timeout=5)
            assert [m.queue_offset for m in again] == [15, 16, 17, 18, 19]
            await lite.seek_to_begin(mq1)
            again = []
            while len(again) < 20:
                again.extend(await lite.poll(timeout=5))
            assert [m.queue_offset for m in again] == list(range(20))
            await lite.seek_by_timestamp(mq0, stamps[30])
            msgs = await lite.poll(timeout=5)
            # RocketMQ's search: an offset stored in that very millisecond (any of them, when several
            # were), else the nearest; with fast sends several messages share stamps[30]'s millisecond
            q0_times = {m.queue_offset: m.store_timestamp for m in got if m.queue_id == mq0.queue_id}
            nearest = min(abs(t - stamps[30]) for t in q0_times.values())
            assert msgs and abs(q0_times[msgs[0].queue_offset] - stamps[30]) == nearest, (q0_times, stamps[30])
            assert 14 <= msgs[0].queue_offset <= 19
            await lite.seek_to_end(mq0)
            lite.pause([mq0])
            async with Producer(f"P2_{name}", ns) as producer:
                await producer.send(Message(topic, b"paused"), queue=mq0)
                await producer.send(Message(topic, b"flowing"), queue=mq1)
            msgs = await lite.poll(timeout=5)
            assert [m.body for m in msgs] == [b"flowing"]
            assert await lite.poll(timeout=0.5) == []
            lite.resume([mq0])
            msgs = await lite.poll(timeout=5)
            assert [m.body for m in msgs] == [b"paused"]
            with pytest.raises(ValueError):
                await lite.seek(mq0, 10_000)


async def test_lite_pull_assign_and_auto_commit(ns: str, name: str) -> None:
    topic, group = f"T_{name}", f"G_{name}"
    with anyio.fail_after(30):
        await _fill(ns, name, topic, 10)
        mq = MessageQueue(topic, "broker-a", 1)
        async with LitePullConsumer(group, ns, consume_from_where="FIRST_OFFSET", persist_interval=0.2) as lite:
            lite.assign([mq])
            got = []
            while len(got) < 5:
                got.extend(await lite.poll(timeout=5))
            assert {m.queue_id for m in got} == {1}
        async with PullConsumer(group, ns) as pc:
            assert await pc.fetch_consume_offset(mq) == 5  # committed at shutdown


async def test_admin(ns: str, name: str) -> None:
    topic, group = f"T_{name}", f"G_{name}"
    with anyio.fail_after(40):
        async with Admin(ns) as admin:
            info = await admin.cluster_info()
            assert "DefaultCluster" in info.clusters and info.master_addrs()
            await admin.create_topic(topic, 3)
            assert topic in await admin.list_topics()
            route = await admin.topic_route(topic)
            assert route.queue_datas[0].read_queue_nums == 3
            async with Producer(f"P_{name}", ns) as producer:
                sent = [await producer.send(Message(topic, f"m{i}", keys=[f"order-{i}", "common"]))
                        for i in range(6)]
            stats = await admin.topic_stats(topic)
            assert sum(s.max_offset for s in stats) == 6 and len(stats) == 3
            # lookups
            m = await admin.view_message(sent[2].offset_msg_id)
            assert m.body == b"m2"
            m = await admin.query_message_by_id(topic, sent[3].msg_id)
            assert m.body == b"m3"
            found = await admin.query_message(topic, "order-4")
            assert [x.body for x in found] == [b"m4"]
            assert len(await admin.query_message(topic, "common")) == 6
            # progress of a group
            consumed = 0

            async def listener(msg: object) -> None:
                nonlocal consumed
                consumed += 1

            before_consume = int(time.time() * 1000)
            async with PushConsumer(group, ns, listener=listener, consume_from_where="FIRST_OFFSET", **FAST) as c:
                c.subscribe(topic)
                while consumed < 6 or await admin.consumer_lag(group, topic):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
                assert group in "".join(await admin.consumer_ids(group, topic)) or await admin.consumer_ids(group, topic)
            progress = await admin.consumer_progress(group, topic)
            assert sum(p.committed for p in progress) == 6 and all(p.lag == 0 for p in progress)
            # reset to before everything: the group reads it all again
            reset = await admin.reset_offset_by_timestamp(group, topic, before_consume - 60_000)
            assert reset and all(v == 0 for v in reset.values())
            progress = await admin.consumer_progress(group, topic)
            assert sum(p.lag for p in progress) == 6
            await admin.delete_topic(topic)
            assert topic not in await admin.list_topics()
