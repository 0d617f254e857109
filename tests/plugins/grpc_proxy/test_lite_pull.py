"""RocketMQ 5's lite-pull RPCs on the gRPC endpoint (PullMessage, UpdateOffset, GetOffset, QueryOffset),
served by the broker's own pull and offset codes; rmq's stubs play the client."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

from rmq.client import Admin, Message, Producer
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.plugins.grpc_proxy.v2 import service_pb2_grpc as sg
from rmq.testing.daemon import RmqdProcess

pytestmark = [pytest.mark.anyio, pytest.mark.grpc]
MD = (("x-mq-client-id", "lite@1@1@x"),)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def mq(topic: str, qid: int = 0) -> d.MessageQueue:
    return d.MessageQueue(topic=d.Resource(name=topic), id=qid)


async def pull(stub: Any, topic: str, offset: int, n: int = 32, tag: str = "*",
               poll_ms: int = 0) -> tuple[int, list[bytes], int]:
    req = s.PullMessageRequest(group=d.Resource(name="LITE_G"), message_queue=mq(topic), offset=offset, batch_size=n,
                               filter_expression=d.FilterExpression(type=d.TAG, expression=tag))
    if poll_ms:
        req.long_polling_timeout.FromMilliseconds(poll_ms)
    code, bodies, nxt = -1, [], -1
    async for r in stub.PullMessage(req, metadata=MD, timeout=10):
        kind = r.WhichOneof("content")
        if kind == "status":
            code = r.status.code
        elif kind == "message":
            bodies.append(r.message.body)
        else:
            nxt = r.next_offset
    return code, bodies, nxt


async def test_pull_offsets_and_queries(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    async with Admin(proc.namesrv_addr) as a:
        await a.create_topic("LiteT", 1)
    before = int(time.time() * 1000) - 1
    async with Producer("LITE_P", proc.namesrv_addr) as p:
        for i in range(5):
            await p.send(Message("LiteT", b"m%d" % i, tags="A" if i % 2 == 0 else "B"))
    async with grpc.aio.insecure_channel(proc.grpc_endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        code, bodies, nxt = await pull(stub, "LiteT", 0, 3)
        assert code == d.Code.OK and bodies == [b"m0", b"m1", b"m2"] and nxt == 3
        code, bodies, nxt = await pull(stub, "LiteT", 0, 32, "A")
        assert code == d.Code.OK and bodies == [b"m0", b"m2", b"m4"] and nxt == 5
        code, bodies, nxt = await pull(stub, "LiteT", 5, 32, poll_ms=300)
        assert code == d.Code.MESSAGE_NOT_FOUND and bodies == [] and nxt == 5
        code, _, nxt = await pull(stub, "LiteT", 99)
        assert code in (d.Code.ILLEGAL_OFFSET, d.Code.MESSAGE_NOT_FOUND) and nxt == 5
        code, _, _ = await pull(stub, "NoSuchLite", 0)
        assert code == d.Code.TOPIC_NOT_FOUND
        # offsets kept by the broker for the group
        got = await stub.GetOffset(s.GetOffsetRequest(group=d.Resource(name="LITE_G"), message_queue=mq("LiteT")),
                                   metadata=MD)
        assert got.status.code == d.Code.OK and got.offset == 0  # nothing committed, queue start in memory (4.9)
        up = await stub.UpdateOffset(s.UpdateOffsetRequest(group=d.Resource(name="LITE_G"), message_queue=mq("LiteT"),
                                                           offset=3), metadata=MD)
        assert up.status.code == d.Code.OK
        got = await stub.GetOffset(s.GetOffsetRequest(group=d.Resource(name="LITE_G"), message_queue=mq("LiteT")),
                                   metadata=MD)
        assert got.status.code == d.Code.OK and got.offset == 3
        bad = await stub.UpdateOffset(s.UpdateOffsetRequest(group=d.Resource(name="LITE_G"), message_queue=mq("LiteT", 7),
                                                            offset=1), metadata=MD)
        assert bad.status.code == d.Code.BAD_REQUEST
        # queue positions: beginning, end, by time
        q = await stub.QueryOffset(s.QueryOffsetRequest(message_queue=mq("LiteT"), query_offset_policy=d.BEGINNING),
                                   metadata=MD)
        assert q.status.code == d.Code.OK and q.offset == 0
        q = await stub.QueryOffset(s.QueryOffsetRequest(message_queue=mq("LiteT"), query_offset_policy=d.END),
                                   metadata=MD)
        assert q.offset == 5
        req = s.QueryOffsetRequest(message_queue=mq("LiteT"), query_offset_policy=d.TIMESTAMP)
        req.timestamp.FromMilliseconds(before)
        q = await stub.QueryOffset(req, metadata=MD)
        assert q.status.code == d.Code.OK and q.offset == 0
        q = await stub.QueryOffset(s.QueryOffsetRequest(message_queue=mq("LiteT"), query_offset_policy=d.TIMESTAMP),
                                   metadata=MD)
        assert q.status.code == d.Code.BAD_REQUEST
        r = await stub.GetOffset(s.GetOffsetRequest(group=d.Resource(name="LITE_G"), message_queue=mq("LiteT")))
        assert r.status.code == d.Code.CLIENT_ID_REQUIRED


async def test_telemetry_thread_stack_and_verify_message(rmqd_factory: Any) -> None:
    """The broker's calls to a consumer reach a 5.x client over its Telemetry stream, as the proxy's:
    running info -> print_thread_stack_trace_command, consume directly -> verify_message_command."""
    import anyio

    proc: RmqdProcess = rmqd_factory()
    async with Admin(proc.namesrv_addr) as a:
        await a.create_topic("TeleT", 1)
        async with Producer("TELE_P", proc.namesrv_addr) as p:
            sent = await p.send(Message("TeleT", b"verify me"))
        cid = "tele@1@1@x"
        settings = d.Settings(client_type=d.SIMPLE_CONSUMER, subscription=d.Subscription(
            group=d.Resource(name="TELE_G"), subscriptions=[d.SubscriptionEntry(
                topic=d.Resource(name="TeleT"), expression=d.FilterExpression(type=d.TAG, expression="*"))]))
        outbox: list[s.TelemetryCommand] = [s.TelemetryCommand(settings=settings)]
        more = anyio.Event()
        seen: list[s.TelemetryCommand] = []

        async def requests() -> Any:
            while True:
                while outbox:
                    yield outbox.pop(0)
                await more.wait()

        async with grpc.aio.insecure_channel(proc.grpc_endpoint) as ch:
            stub = sg.MessagingServiceStub(ch)
            call = stub.Telemetry(requests(), metadata=(("x-mq-client-id", cid),))

            async def answer() -> None:
                nonlocal more
                async for cmd in call:
                    seen.append(cmd)
                    kind = cmd.WhichOneof("command")
                    if kind == "print_thread_stack_trace_command":
                        outbox.append(s.TelemetryCommand(status=d.Status(code=d.Code.OK), thread_stack_trace=s.ThreadStackTrace(
                            nonce=cmd.print_thread_stack_trace_command.nonce, thread_stack_trace="main: waiting")))
                    elif kind == "verify_message_command":
                        assert cmd.verify_message_command.message.body == b"verify me"
                        outbox.append(s.TelemetryCommand(status=d.Status(code=d.Code.OK),
                                                         verify_message_result=s.VerifyMessageResult(
                                                             nonce=cmd.verify_message_command.nonce)))
                    more.set()
                    more = anyio.Event()

            async with anyio.create_task_group() as tg:
                tg.start_soon(answer)
                with anyio.fail_after(15):
                    while not seen:  # noqa: ASYNC110 - the settings answer first
                        await anyio.sleep(0.05)
                conn = await a.consumer_connection("TELE_G")
                assert [c["clientId"] for c in conn["connectionSet"]] == [cid]
                info = await a.consumer_running_info("TELE_G", cid, jstack=True)
                assert info["jstack"] == "main: waiting"
                result = await a.consume_message_directly("TELE_G", cid, sent.offset_msg_id, "TeleT")
                assert result["consumeResult"] == "CR_SUCCESS"
                call.cancel()
                tg.cancel_scope.cancel()
            with anyio.move_on_after(10):  # the cancelled stream ends on this loop, not in a later test's
                await call.code()  # (grpc's poller would call back into this closed loop from there)
