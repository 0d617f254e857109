"""Test helpers for code using rmq.client: create a topic, read a topic back, collect pushed messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from rmq.client import Admin, MessageExt, PullConsumer, PullStatus, PushConsumer

FAST = {"rebalance_interval": 1.0, "heartbeat_interval": 2.0, "persist_interval": 0.5, "pull_retry_delay": 0.2}


async def create_topic(ns: str, topic: str, queues: int = 4) -> None:
    async with Admin(ns) as admin:
        await admin.create_topic(topic, queues)


async def drain(ns: str, topic: str, expression: str = "*", expression_type: str = "TAG") -> list[MessageExt]:
    """Every message of ``topic`` now, queue by queue, via PullConsumer."""
    out: list[MessageExt] = []
    async with PullConsumer("drain_group", ns) as pc:
        for mq in await pc.fetch_queues(topic):
            off = await pc.min_offset(mq)
            hi = await pc.max_offset(mq)
            while off < hi:
                res = await pc.pull(mq, off, 32, expression=expression, expression_type=expression_type)
                if res.status is PullStatus.FOUND:
                    out.extend(res.messages)
                elif res.status is PullStatus.NO_NEW_MSG:
                    break
                off = res.next_begin_offset
    return out


async def collect_until(
    ns: str,
    group: str,
    topic: str,
    expression: str,
    until: Callable[[list[MessageExt]], bool],
    *,
    timeout: float = 30.0,
    **kwargs: Any,
) -> list[MessageExt]:
    got: list[MessageExt] = []
    done = anyio.Event()

    async def listener(msg: MessageExt) -> None:
        got.append(msg)
        if until(got):
            done.set()

    opts = {**FAST, **kwargs}
    async with PushConsumer(group, ns, listener=listener, **opts) as c:
        c.subscribe(topic, expression)
        with anyio.fail_after(timeout):
            await done.wait()
    return got
