"""The gRPC gate (plugins/grpc_proxy/access.py): RPC_ACCESS names every method of the service, the
date window of a signature, and the guard's generic answer to a handler's unexpected exception."""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from rmq.plugins.acl.accounts import AclFile
from rmq.plugins.grpc_proxy.access import DATE_FORMAT, RPC_ACCESS, SERVICE, Gate, Refused, guard, values
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.plugins.grpc_proxy.v2 import service_pb2_grpc as sg

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_rpc_access_covers_every_method_of_the_service() -> None:
    """Every MessagingService method has an entry, and every entry's field paths exist on its request
    type: a method added to the protos without one fails here (and is refused by the guard)."""
    methods = {m.name: m for m in SERVICE.methods}
    assert set(RPC_ACCESS) == set(methods)
    for name, access in RPC_ACCESS.items():
        request_type = getattr(s, methods[name].input_type.name)
        for need in access.needs:
            assert values(request_type(), need.path) in ([], [""]), (name, need.path)
    # the DLQ forward in particular: SUB on both the group and the topic, both required
    dlq = RPC_ACCESS["ForwardMessageToDeadLetterQueue"].needs
    assert {(n.path, n.kind, n.required) for n in dlq} == {("group.name", "group", True), ("topic.name", "topic", True)}


def _acl(tmp_path: Path, extra: str = "", group_perm: str = "SUB") -> AclFile:
    path = tmp_path / "plain_acl.yml"
    path.write_text(f"{extra}accounts:\n  - accessKey: gateuser1\n    secretKey: gatesecret1\n"
                    f"    defaultTopicPerm: DENY\n    topicPerms: [GateT=SUB]\n    defaultGroupPerm: {group_perm}\n")
    acl = AclFile(path)
    acl.load()
    return acl


def _md(stamp: str | None, secret: str = "gatesecret1") -> dict[str, str]:
    sig = hmac.new(secret.encode(), (stamp or "").encode(), hashlib.sha1).hexdigest()
    md = {"authorization": f"MQv2-HMAC-SHA1 Credential=gateuser1, SignedHeaders=x-mq-date-time, Signature={sig}"}
    if stamp is not None:
        md["x-mq-date-time"] = stamp
    return md


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime(DATE_FORMAT)


def test_signatures_only_within_fifteen_minutes_of_the_servers_clock(tmp_path: Path) -> None:
    gate, now = Gate(_acl(tmp_path)), time.time()
    for ok in (now, now - 14 * 60, now + 14 * 60):
        assert gate.authenticate(_md(_stamp(ok)), "10.1.2.3", now) == ("gateuser1", "gatesecret1")
    for bad in (_md(_stamp(now - 16 * 60)), _md(_stamp(now + 16 * 60)), _md(_stamp(now - 86400 * 365)),
                _md(None), _md("yesterday"), _md(_stamp(now), secret="wrongsecret")):
        with pytest.raises(Refused) as e:
            gate.authenticate(bad, "10.1.2.3", now)
        assert e.value.code == d.Code.UNAUTHORIZED
    with pytest.raises(Refused) as e:  # no credentials at all
        gate.authenticate({}, "10.1.2.3", now)
    assert e.value.code == d.Code.UNAUTHORIZED
    white = Gate(_acl(tmp_path, "globalWhiteRemoteAddresses: ['10.9.*.*']\n"))
    assert white.authenticate({}, "10.9.0.1", now) is None  # a white-listed peer goes on unsigned


def test_names_are_checked_before_permissions(tmp_path: Path) -> None:
    gate = Gate(_acl(tmp_path))
    acct = ("gateuser1", "gatesecret1")
    fwd = s.ForwardMessageToDeadLetterQueueRequest
    cases = [
        (fwd(group=d.Resource(name="x\x00y"), topic=d.Resource(name="GateT")), d.Code.ILLEGAL_CONSUMER_GROUP),
        (fwd(group=d.Resource(name=""), topic=d.Resource(name="GateT")), d.Code.ILLEGAL_CONSUMER_GROUP),
        (fwd(group=d.Resource(name="G"), topic=d.Resource(name="a/../b")), d.Code.ILLEGAL_TOPIC),
        (fwd(group=d.Resource(name="G"), topic=d.Resource(name="Other")), d.Code.FORBIDDEN),
    ]
    for request, code in cases:
        with pytest.raises(Refused) as e:
            gate.authorize("ForwardMessageToDeadLetterQueue", request, acct)
        assert e.value.code == code, request
    gate.authorize("ForwardMessageToDeadLetterQueue", fwd(group=d.Resource(name="G"), topic=d.Resource(name="GateT")),
                   acct)
    with pytest.raises(Refused) as e:  # the account may SUB GateT, not PUB
        gate.authorize("SendMessage", s.SendMessageRequest(messages=[d.Message(topic=d.Resource(name="GateT"))]), acct)
    assert e.value.code == d.Code.FORBIDDEN
    # a retry topic is its group's: SUB on the group decides, whatever the request claims to do with it
    retry = s.SendMessageRequest(messages=[d.Message(topic=d.Resource(name="%RETRY%NoSuchRight"))])
    gate.authorize("SendMessage", retry, acct)  # defaultGroupPerm: SUB
    strict = Gate(_acl(tmp_path, group_perm="DENY"))
    with pytest.raises(Refused) as e:
        strict.authorize("SendMessage", retry, acct)
    assert e.value.code == d.Code.FORBIDDEN


class Broken(sg.MessagingServiceServicer):
    """Handlers with a bug: what a stranger sees of it is the subject."""

    async def QueryRoute(self, request: Any, context: Any) -> Any:  # noqa: N802
        raise ValueError("invalid literal for int() with base 10: 'secret detail'")

    async def ReceiveMessage(self, request: Any, context: Any) -> Any:  # noqa: N802
        yield s.ReceiveMessageResponse(status=d.Status(code=d.Code.OK, message="OK"))
        raise KeyError("internal key")

    async def Heartbeat(self, request: Any, context: Any) -> Any:  # noqa: N802
        return s.HeartbeatResponse(status=d.Status(code=d.Code.INTERNAL_SERVER_ERROR,
                                                   message="SYSTEM_ERROR: TypeError: unsupported operand"))


async def test_unexpected_exceptions_answer_internal_error_without_python_names(caplog: Any) -> None:
    svc = Broken()
    guard(svc, Gate(None), lambda ctx: "127.0.0.1")
    server = grpc.aio.server()
    sg.add_MessagingServiceServicer_to_server(svc, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = sg.MessagingServiceStub(ch)
            r = await stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="T")))
            assert (r.status.code, r.status.message) == (d.Code.INTERNAL_SERVER_ERROR, "internal error")
            h = await stub.Heartbeat(s.HeartbeatRequest())
            assert h.status.message == "internal error"
            call = stub.ReceiveMessage(s.ReceiveMessageRequest(
                group=d.Resource(name="G"), message_queue=d.MessageQueue(topic=d.Resource(name="T"))))
            with pytest.raises(grpc.aio.AioRpcError) as e:
                async for _ in call:
                    pass
            assert e.value.code() == grpc.StatusCode.INTERNAL and e.value.details() == "internal error"
    finally:
        await server.stop(None)
        # every completion of the in-process server lands while this test's loop runs: one arriving after
        # it closed reaches grpcio's shared poller in a later test and fails it (RuntimeError: loop closed)
        await server.wait_for_termination(timeout=10)
    assert "secret detail" in caplog.text  # the server's log keeps what the client is not told


class Ctx:
    """What ``PeerTable.get`` reads of a call: its metadata and grpcio's peer string."""

    def __init__(self, cid: str) -> None:
        self.md = (("x-mq-client-id", cid),)

    def invocation_metadata(self) -> Any:
        return self.md

    def peer(self) -> str:
        return "ipv4:127.0.0.1:4000"


def test_invented_client_ids_do_not_grow_the_peer_table(monkeypatch: pytest.MonkeyPatch) -> None:
    from rmq.plugins.grpc_proxy import peer, service

    async def handle(conn: Any, cmd: Any) -> Any:
        return None

    monkeypatch.setattr(peer, "MAX_PEERS", 3)
    svc = service.MessagingService(None, handle, ("127.0.0.1", 0))  # type: ignore[arg-type]
    streaming = svc.peers.get(Ctx("live"))
    assert streaming is not None
    streaming.streams = 1  # a client with an open Telemetry stream stays
    evicted = [svc.peers.get(Ctx(f"stranger{i}")) for i in range(100)]
    table = svc.peers.table
    assert len(table) == 3 and "live" in table and not table["live"].closed
    assert all(p is not None for p in evicted) and sum(p.closed for p in evicted if p is not None) == 98
    assert svc.peers.get(Ctx("x" * 257)) is None  # an id no SDK makes
