"""The client rides through a broker restart: sends fail fast while it is down, then resume;
a push consumer reconnects and continues from its committed offsets."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from rmq.client import Message, MessageExt, Producer, PushConsumer, SendError
from rmq.client.testing import FAST, create_topic

pytestmark = pytest.mark.anyio


async def test_producer_and_consumer_survive_broker_restart(rmqd_factory: Any, name: str) -> None:
    proc = rmqd_factory()
    ns = proc.namesrv_addr
    topic, group = f"T_{name}", f"G_{name}"
    await create_topic(ns, topic, 2)
    got: set[bytes] = set()

    async def listener(m: MessageExt) -> None:
        got.add(m.body)

    with anyio.fail_after(60):
        async with Producer(f"P_{name}", ns, send_timeout=1.0) as producer, \
                PushConsumer(group, ns, listener=listener, consume_from_where="FIRST_OFFSET", **FAST) as consumer:
            consumer.subscribe(topic)
            for i in range(10):
                await producer.send(Message(topic, f"before{i}"))
            while len(got) < 10:  # noqa: ASYNC110
                await anyio.sleep(0.05)
            await anyio.to_thread.run_sync(proc.stop)
            with pytest.raises(SendError):
                await producer.send(Message(topic, b"while down"))
            await anyio.to_thread.run_sync(proc.start)
            sent_after = 0
            with anyio.fail_after(20):  # the name server comes back with the broker; routes are cached
                while sent_after < 10:
                    try:
                        await producer.send(Message(topic, f"after{sent_after}"))
                        sent_after += 1
                    except SendError:
                        await anyio.sleep(0.2)
            with anyio.fail_after(20):
                while not all(f"after{i}".encode() in got for i in range(10)):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
