"""The gRPC endpoint faces strangers (issue #26, items 4 and 8): every RPC is authorised before any
side effect (the DLQ forward included), names are validated as on remoting, receipt handles are
the broker's own, a signature's date is no older or newer than 15 minutes, errors name no Python
internals, and hostile bytes on the port leave it serving. A real rmqd; rmq's stubs play the
clients, raw sockets the hostile ones."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import socket
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest
from google.protobuf import duration_pb2

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.plugins.grpc_proxy.v2 import service_pb2_grpc as sg
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.acl import sign
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.testing.daemon import RmqdProcess

pytestmark = [pytest.mark.anyio, pytest.mark.grpc]
C = d.Code
ADMIN = ("rmqadmin", "adminsecret")
USER = ("denyuser1", "denysecret1")  # may PUB|SUB GSecT only
PYTHON_NAMES = re.compile(r"<class |Traceback|\b[A-Z]\w*(Error|Exception)\b")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def md(creds: tuple[str, str] | None = None, *, skew_s: float = 0, date: bool = True,
       cid: str = "sec@1@1@x") -> tuple[tuple[str, str], ...]:
    """gRPC metadata as a 5.x SDK sends it, signed over a date ``skew_s`` from now."""
    out = [("x-mq-client-id", cid)]
    if creds is not None:
        stamp = datetime.fromtimestamp(time.time() + skew_s, UTC).strftime("%Y%m%dT%H%M%SZ")
        sig = hmac.new(creds[1].encode(), stamp.encode(), hashlib.sha1).hexdigest()
        out.append(("authorization", f"MQv2-HMAC-SHA1 Credential={creds[0]}, SignedHeaders=x-mq-date-time, "
                                     f"Signature={sig}"))
        if date:
            out.append(("x-mq-date-time", stamp))
    return tuple(out)


async def remoting(addr: str, code: int, ext: dict[str, str], creds: tuple[str, str] | None = None) -> RemotingCommand:
    async with TcpRemotingClient(RemotingConfig(name="grpc-sec-test")) as c:
        cmd = RemotingCommand.request(code, ext)
        if creds is not None:
            sign(cmd.ext, cmd.body, *creds)
        return await c.invoke(addr, cmd, 5)


async def create_topic(proc: RmqdProcess, topic: str, creds: tuple[str, str] | None = None) -> None:
    r = await remoting(proc.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}, creds)
    assert r.code == 0, r.remark


async def dlq_topics(proc: RmqdProcess, creds: tuple[str, str] | None = None) -> list[str]:
    """The %DLQ% topics of the broker's whole topic table (GET_ALL_TOPIC_CONFIG)."""
    r = await remoting(proc.broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG, {}, creds)
    assert r.code == 0, r.remark
    return [t for t in json.loads(r.body or b"{}")["topicConfigTable"] if "%DLQ%" in t]


async def send(stub: Any, topic: str, body: bytes, meta: Any) -> None:
    msg = d.Message(topic=d.Resource(name=topic), body=body, system_properties=d.SystemProperties(
        message_id=f"01{time.time_ns()}", message_type=d.NORMAL, body_encoding=d.IDENTITY))
    r = await stub.SendMessage(s.SendMessageRequest(messages=[msg]), metadata=meta)
    assert r.status.code == C.OK, r.status


async def receive(stub: Any, topic: str, group: str, meta: Any) -> list[d.Message]:
    got = []
    async for resp in stub.ReceiveMessage(s.ReceiveMessageRequest(
            group=d.Resource(name=group), message_queue=d.MessageQueue(topic=d.Resource(name=topic), id=-1),
            batch_size=4, filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
            invisible_duration=duration_pb2.Duration(seconds=60),
            long_polling_timeout=duration_pb2.Duration(seconds=5)), metadata=meta, timeout=20):
        if resp.HasField("message"):
            got.append(resp.message)
    return got


def forward(group: str, topic: str, handle: str) -> s.ForwardMessageToDeadLetterQueueRequest:
    return s.ForwardMessageToDeadLetterQueueRequest(group=d.Resource(name=group), topic=d.Resource(name=topic),
                                                    receipt_handle=handle, message_id="x", delivery_attempt=1,
                                                    max_delivery_attempts=1)


@pytest.fixture
def acl_rmqd(rmqd_factory: Any, tmp_path: Path) -> RmqdProcess:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(f"accounts:\n  - accessKey: {ADMIN[0]}\n    secretKey: {ADMIN[1]}\n    admin: true\n"
                   f"  - accessKey: {USER[0]}\n    secretKey: {USER[1]}\n    defaultTopicPerm: DENY\n"
                   "    topicPerms: [GSecT=PUB|SUB]\n    defaultGroupPerm: SUB\n")
    return rmqd_factory(broker_conf={"aclEnable": True, "plainAclFile": str(acl)})  # type: ignore[no-any-return]


async def test_dlq_forward_is_refused_before_it_creates_or_copies_anything(acl_rmqd: RmqdProcess) -> None:
    """No credentials, a forged handle, an illegal group, or an account that may not read the topic:
    each is refused, and afterwards no %DLQ% topic exists (so nothing was copied). Then a real
    receipt, with the right account, still forwards."""
    proc = acl_rmqd
    await create_topic(proc, "GSecOther", ADMIN)
    now = int(time.time() * 1000)
    async with grpc.aio.insecure_channel(proc.grpc_endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        await send(stub, "GSecOther", b"secret body", md(ADMIN))
        forged = f"0 {now} 60000 0 0 broker-a 0 0"
        codes = set()
        for i in range(20):  # no credentials, forged receipts, a new group each time
            r = await stub.ForwardMessageToDeadLetterQueue(forward(f"Stranger{i}", "GSecOther", forged), metadata=md())
            codes.add(r.status.code)
        assert await dlq_topics(proc, ADMIN) == []  # the hole: each call made a topic and copied the message
        assert codes == {C.UNAUTHORIZED}
        r = await stub.ForwardMessageToDeadLetterQueue(forward("x\x00y", "GSecOther", forged), metadata=md(ADMIN))
        assert r.status.code == C.ILLEGAL_CONSUMER_GROUP, r.status
        for handle in (forged, forged + " " + "0" * 32, forged.replace(" 0 0", " 0 1") + " " + "f" * 32):
            r = await stub.ForwardMessageToDeadLetterQueue(forward("GSecG", "GSecOther", handle), metadata=md(ADMIN))
            assert r.status.code == C.INVALID_RECEIPT_HANDLE, r.status
        [real] = await receive(stub, "GSecOther", "GSecG", md(ADMIN))
        handle = real.system_properties.receipt_handle
        r = await stub.ForwardMessageToDeadLetterQueue(forward("GSecG", "GSecOther", handle), metadata=md(USER))
        assert r.status.code == C.FORBIDDEN, r.status  # the account may not SUB GSecOther
        altered = handle[:-1] + ("0" if handle[-1] != "0" else "1")
        r = await stub.ForwardMessageToDeadLetterQueue(forward("GSecG", "GSecOther", altered), metadata=md(ADMIN))
        assert r.status.code == C.INVALID_RECEIPT_HANDLE, r.status
        r = await stub.ForwardMessageToDeadLetterQueue(forward("OtherG", "GSecOther", handle), metadata=md(ADMIN))
        assert r.status.code == C.INVALID_RECEIPT_HANDLE, r.status  # another group's receipt
        assert await dlq_topics(proc, ADMIN) == []
        # the real receipt with the right account: forwarded once, and not twice
        r = await stub.ForwardMessageToDeadLetterQueue(forward("GSecG", "GSecOther", handle), metadata=md(ADMIN))
        assert r.status.code == C.OK, r.status
        r = await stub.ForwardMessageToDeadLetterQueue(forward("GSecG", "GSecOther", handle), metadata=md(ADMIN))
        assert r.status.code == C.INVALID_RECEIPT_HANDLE, r.status
    assert await dlq_topics(proc, ADMIN) == ["%DLQ%GSecG"]


async def test_dlq_forward_without_acl_takes_only_its_own_receipts(rmqd: RmqdProcess) -> None:
    """Without ACL a forged receipt naming a stored message copies nothing either."""
    await create_topic(rmqd, "GSecOpen")
    async with grpc.aio.insecure_channel(rmqd.grpc_endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        await send(stub, "GSecOpen", b"body", md())
        forged = f"0 {int(time.time() * 1000)} 60000 0 0 broker-a 0 0"
        for i in range(10):
            r = await stub.ForwardMessageToDeadLetterQueue(forward(f"G{i}", "GSecOpen", forged), metadata=md())
            assert r.status.code == C.INVALID_RECEIPT_HANDLE, r.status
    assert await dlq_topics(rmqd) == []


async def test_signature_dates_older_or_newer_than_15_minutes_are_refused(acl_rmqd: RmqdProcess) -> None:
    await create_topic(acl_rmqd, "GSecT", ADMIN)
    async with grpc.aio.insecure_channel(acl_rmqd.grpc_endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        req = s.QueryRouteRequest(topic=d.Resource(name="GSecT"))
        assert (await stub.QueryRoute(req, metadata=md(USER))).status.code == C.OK
        for meta in (md(USER, skew_s=-16 * 60), md(USER, skew_s=16 * 60), md(USER, skew_s=-30 * 86400),
                     md(USER, date=False), md()):
            r = await stub.QueryRoute(req, metadata=meta)
            assert r.status.code == C.UNAUTHORIZED, (meta, r.status)
        # and a captured (stale) header cannot send either
        msg = d.Message(topic=d.Resource(name="GSecT"), body=b"replayed", system_properties=d.SystemProperties(
            message_id="01REPLAY", message_type=d.NORMAL, body_encoding=d.IDENTITY))
        r = await stub.SendMessage(s.SendMessageRequest(messages=[msg]), metadata=md(USER, skew_s=-3600))
        assert r.status.code == C.UNAUTHORIZED
        assert (await stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="GSecOther")),
                                      metadata=md(USER))).status.code == C.FORBIDDEN


async def test_error_text_names_no_python_internals(rmqd: RmqdProcess) -> None:
    """Receipts a naive parser chokes on ("²" is a digit to str.isdigit, not to int) are refused
    with the proxy's status, never with a Python exception's name."""
    await create_topic(rmqd, "GSecErr")
    now = int(time.time() * 1000)
    handles = ["1 \u00b2 1 0 0 b 0 0", f"1 {now} 9999 0 0 b \u00b2 1", f"1 {now} 9999 0 0 b 99999999999999999999 1",
               "", " ", "\x00" * 8, "1 2 3 4 5 6 7 8 9 10 11", "x" * 5000]
    seen: list[str] = []
    async with grpc.aio.insecure_channel(rmqd.grpc_endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        group, topic = d.Resource(name="GErr"), d.Resource(name="GSecErr")
        for h in handles:
            a = await stub.AckMessage(s.AckMessageRequest(group=group, topic=topic, entries=[
                s.AckMessageEntry(message_id="m", receipt_handle=h)]), metadata=md())
            c = await stub.ChangeInvisibleDuration(s.ChangeInvisibleDurationRequest(
                group=group, topic=topic, receipt_handle=h, message_id="m",
                invisible_duration=duration_pb2.Duration(seconds=10)), metadata=md())
            f = await stub.ForwardMessageToDeadLetterQueue(forward("GErr", "GSecErr", h), metadata=md())
            for st in (a.status, a.entries[0].status, c.status, f.status):
                seen.append(st.message)
                assert st.code == C.INVALID_RECEIPT_HANDLE, (h, st)
        # bytes that are no protobuf message at all (grpcio's own answer names the decoder's exception)
        base = "/apache.rocketmq.v2.MessagingService/"
        r = s.QueryRouteResponse.FromString(await ch.unary_unary(base + "QueryRoute")(b"\xff\xff\xff\xff"))
        assert r.status.code == C.BAD_REQUEST
        seen.append(r.status.message)
        async for raw in ch.unary_stream(base + "ReceiveMessage")(b"\x0a\xff\xff\xff\x0f"):
            rr = s.ReceiveMessageResponse.FromString(raw)
            assert rr.status.code == C.BAD_REQUEST
            seen.append(rr.status.message)
    assert not [m for m in seen if PYTHON_NAMES.search(m)], seen


def _raw(port: int, data: bytes) -> None:
    """Send ``data`` on a fresh connection and read until the server closes or goes quiet."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except OSError:
            pass  # reset by the server: fine


async def test_hostile_clients_leave_the_grpc_port_serving(rmqd: RmqdProcess) -> None:
    """Garbage, an HTTP/2 preface then junk, a TLS record of junk, an oversized message, unknown
    methods and hundreds of concurrent streams: afterwards a real client sends and receives."""
    port = rmqd.grpc_port
    await create_topic(rmqd, "GSecHostile")
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    junk = bytes(range(256)) * 64
    for data in (junk, preface + junk, preface + b"\x00\x00\x04\x08\x00\x00\x00\x00\x00" * 500,
                 b"\x16\x03\x01\x02\x00" + junk, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\x00"):
        await anyio.to_thread.run_sync(_raw, port, data)
    async with grpc.aio.insecure_channel(rmqd.grpc_endpoint, options=[
            ("grpc.max_send_message_length", 64 * 1024 * 1024)]) as ch:
        stub = sg.MessagingServiceStub(ch)
        big = d.Message(topic=d.Resource(name="GSecHostile"), body=b"x" * (9 * 1024 * 1024),
                        system_properties=d.SystemProperties(message_id="01BIG", body_encoding=d.IDENTITY))
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.SendMessage(s.SendMessageRequest(messages=[big]), metadata=md())
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        for path in ("/apache.rocketmq.v2.MessagingService/Nope", "/x.Y/Z"):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await ch.unary_unary(path)(b"\x0a\x03abc")
            assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        # many streams at once: routes, and telemetry streams opened and dropped
        calls = [stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="GSecHostile")), metadata=md())
                 for _ in range(300)]
        streams = [stub.Telemetry(metadata=md(cid=f"flood{i}")) for i in range(100)]
        answers = await asyncio.gather(*calls)
        assert {a.status.code for a in answers} == {C.OK}
        for st in streams:
            st.cancel()
    async with grpc.aio.insecure_channel(rmqd.grpc_endpoint) as ch:  # a real client, on a fresh connection
        stub = sg.MessagingServiceStub(ch)
        await send(stub, "GSecHostile", b"still serving", md())
        got = await receive(stub, "GSecHostile", "GSecHostileG", md())
        assert [m.body for m in got] == [b"still serving"]
