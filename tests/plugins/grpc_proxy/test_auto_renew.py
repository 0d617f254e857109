"""ReceiveMessage with ``auto_renew`` (a 5.x PushConsumer's): the proxy keeps the message invisible while
the client processes it, however long, and stops on ack or when the client terminates (then the message
is soon visible to the group's other consumers). rmq's stubs play two consumers of one group."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import grpc
import pytest

from rmq.client import Message, Producer
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.plugins.grpc_proxy.v2 import service_pb2_grpc as sg
from rmq.testing.daemon import RmqdProcess
from tests.plugins.grpc_proxy.test_send import create

pytestmark = [pytest.mark.anyio, pytest.mark.grpc]
GROUP, TOPIC = "GR_G", "GrTopic"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Consumer:
    def __init__(self, stub: Any, cid: str) -> None:
        self.stub, self.md = stub, (("x-mq-client-id", cid),)

    async def receive(self, *, auto_renew: bool, poll_ms: int = 1000) -> tuple[int, list[d.Message]]:
        req = s.ReceiveMessageRequest(group=d.Resource(name=GROUP), message_queue=d.MessageQueue(
            topic=d.Resource(name=TOPIC), id=-1), filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
            batch_size=8, auto_renew=auto_renew)
        req.invisible_duration.FromMilliseconds(10_000)
        req.long_polling_timeout.FromMilliseconds(poll_ms)
        code, got = -1, []
        async for r in self.stub.ReceiveMessage(req, metadata=self.md, timeout=poll_ms / 1000 + 10):
            if r.WhichOneof("content") == "status":
                code = r.status.code
            elif r.WhichOneof("content") == "message":
                got.append(r.message)
        return code, got

    async def ack(self, m: d.Message) -> d.Status:
        r = await self.stub.AckMessage(s.AckMessageRequest(group=d.Resource(name=GROUP), topic=d.Resource(name=TOPIC),
                                                           entries=[s.AckMessageEntry(
                                                               message_id=m.system_properties.message_id,
                                                               receipt_handle=m.system_properties.receipt_handle)]),
                                       metadata=self.md)
        return r.status


@asynccontextmanager
async def consumer(endpoint: str, cid: str) -> AsyncIterator[Consumer]:
    """A consumer of GROUP registered as the SDK does (Telemetry settings), its stream open meanwhile."""
    settings = d.Settings(client_type=d.PUSH_CONSUMER, subscription=d.Subscription(
        group=d.Resource(name=GROUP), subscriptions=[d.SubscriptionEntry(
            topic=d.Resource(name=TOPIC), expression=d.FilterExpression(type=d.TAG, expression="*"))]))

    async def requests() -> Any:
        yield s.TelemetryCommand(settings=settings)
        await anyio.sleep_forever()

    async with grpc.aio.insecure_channel(endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        call = stub.Telemetry(requests(), metadata=(("x-mq-client-id", cid),))
        with anyio.fail_after(10):
            async for cmd in call:
                if cmd.HasField("settings"):
                    break
        try:
            yield Consumer(stub, cid)
        finally:
            call.cancel()
            with anyio.move_on_after(10):  # the cancelled stream ends on this loop, not in a later test's
                await call.code()


async def setup(proc: RmqdProcess) -> None:
    await create(proc.broker_addr, TOPIC, 1, "NORMAL")
    async with Producer("GR_P", proc.namesrv_addr) as p:
        await p.send(Message(TOPIC, b"slow work"))


async def test_auto_renew_keeps_the_message_invisible_until_acked(rmqd_factory: Any) -> None:
    renew = {"defaultInvisibleTimeMills": 2000, "renewAheadTimeMillis": 1500, "renewSchedulePeriodMillis": 200}
    proc: RmqdProcess = rmqd_factory(extra={"plugin": {"processors": {"grpc": renew}}})
    await setup(proc)
    async with consumer(proc.grpc_endpoint, "push-a@1") as a, consumer(proc.grpc_endpoint, "push-b@1") as b:
        code, got = await a.receive(auto_renew=True)
        assert code == d.Code.OK and [m.body for m in got] == [b"slow work"]
        assert got[0].system_properties.invisible_duration.ToMilliseconds() == 2000  # defaultInvisibleTimeMills
        until = time.monotonic() + 3 * 2.0  # three times the invisible time: renewed, never handed to b
        while time.monotonic() < until:
            code, other = await b.receive(auto_renew=False)
            assert other == [] and code == d.Code.MESSAGE_NOT_FOUND, [m.body for m in other]
        st = await a.ack(got[0])  # the receipt a holds is long past its own time: the newest one acks
        assert st.code == d.Code.OK, st
        code, other = await b.receive(auto_renew=False, poll_ms=2500)
        assert other == []


async def test_client_termination_releases_auto_renewed_messages(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()  # RocketMQ's defaults: 60 s invisible, scanned every 5 s
    await setup(proc)
    async with consumer(proc.grpc_endpoint, "push-b@1") as b:
        async with consumer(proc.grpc_endpoint, "push-a@1") as a:
            code, got = await a.receive(auto_renew=True)
            assert code == d.Code.OK and [m.body for m in got] == [b"slow work"]
            r = await a.stub.NotifyClientTermination(s.NotifyClientTerminationRequest(group=d.Resource(name=GROUP)),
                                                     metadata=a.md)
            assert r.status.code == d.Code.OK
        with anyio.fail_after(20):  # visible again after the next scan + invisibleTimeMillisWhenClear, not 60 s
            while True:
                code, other = await b.receive(auto_renew=False, poll_ms=2000)
                if other:
                    break
        assert [m.body for m in other] == [b"slow work"] and other[0].system_properties.delivery_attempt == 2
