"""A new group's first ReceiveMessage starts where RocketMQ's proxy starts it: ConsumeInitMode.MAX
(ReceiveMessageActivity), so at the queue's newest message, not its whole backlog, once the queue's first
message no longer counts as in memory (here: initPopOffsetByCheckMsgInMem off) (#27 item 3)."""

from __future__ import annotations

from typing import Any

import pytest

from rmq.client import Message, Producer
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.testing.daemon import RmqdProcess
from tests.plugins.grpc_proxy.test_auto_renew import TOPIC, consumer
from tests.plugins.grpc_proxy.test_send import create

pytestmark = [pytest.mark.anyio, pytest.mark.grpc]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_new_group_starts_at_the_newest_message(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory(broker_conf={"initPopOffsetByCheckMsgInMem": False})
    await create(proc.broker_addr, TOPIC, 1, "NORMAL")
    async with Producer("GR_P", proc.namesrv_addr) as p:
        for i in range(3):
            await p.send(Message(TOPIC, b"old%d" % i))
        async with consumer(proc.grpc_endpoint, "simple-a@1") as c:
            code, got = await c.receive(auto_renew=False)
            assert code == d.Code.OK and [m.body for m in got] == [b"old2"]  # max - 1, as getInitOffset
            await p.send(Message(TOPIC, b"new"))
            code, got = await c.receive(auto_renew=False, poll_ms=3000)
            assert [m.body for m in got] == [b"new"]
