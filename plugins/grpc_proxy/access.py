"""What every gRPC method touches, and the one gate that checks it before the method runs.

``RPC_ACCESS`` maps each ``MessagingService`` method to the request fields naming the topics and
groups it reads or writes, with the permission each needs (RocketMQ 5's ACL 2.0 makes the same
choices per request type). ``Gate.check`` runs before any handler: it authenticates the caller
(RocketMQ 5's ``MQv2-HMAC-SHA1`` signature over ``x-mq-date-time``, the date no further than 15
minutes from now so a captured header cannot be replayed later), validates every name with the
remoting rule (``protocol/names.py``), then checks each resource against the account's
permissions. Only then does the handler run, so a refused request has no side effect, whatever
the handler would have done before reaching the broker's own ACL (a DLQ forward, a topic
created). The broker's remoting ACL still checks the remoting requests the handlers make.

``guard`` installs the gate in front of every method of a service object, and turns an
unexpected exception into a generic "internal error" (the details go to the server's log, never
to the peer).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import attrs
import grpc

from rmq.kernel import RateLimitedLog
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.protocol.access import ANY, PUB, SUB, allowed
from rmq.protocol.names import RETRY_PREFIX as RETRY
from rmq.protocol.names import TRACE_TOPIC, printable, validate_group, validate_topic

log = logging.getLogger("rmq.grpc")
audit = RateLimitedLog(log)

C = d.Code
TOPIC, GROUP = "topic", "group"
MAX_SKEW_S = 15 * 60  # how far x-mq-date-time may be from the server's clock
DATE_FORMAT = "%Y%m%dT%H%M%SZ"
SERVICE = s.DESCRIPTOR.services_by_name["MessagingService"]

#: The account a request was authenticated as (access key, secret key), None when unsigned; set by
#: the gate for the task serving the request, read by the service when it signs remoting requests.
ACCOUNT: ContextVar[tuple[str, str] | None] = ContextVar("rmq_grpc_account", default=None)


@attrs.frozen
class Need:
    """One resource a request names: the field path (``a.b`` nested, ``a[].b`` every item of a
    repeated field), topic or group, the permission needed, and whether the field must be set."""

    path: str
    kind: str
    perm: int
    required: bool = True


@attrs.frozen
class Access:
    needs: tuple[Need, ...] = ()


def _sub(group: str, topic: str, *, topic_required: bool = True) -> Access:
    return Access((Need(group, GROUP, SUB), Need(topic, TOPIC, SUB, topic_required)))


#: Every MessagingService method -> what it touches. A method missing here is refused by ``guard``.
RPC_ACCESS: dict[str, Access] = {
    "QueryRoute": Access((Need("topic.name", TOPIC, ANY),)),  # PUB or SUB, as RocketMQ 5
    "Heartbeat": Access((Need("group.name", GROUP, SUB, False),)),  # producers send no group
    "SendMessage": Access((Need("messages[].topic.name", TOPIC, PUB),)),
    "QueryAssignment": _sub("group.name", "topic.name"),
    "ReceiveMessage": _sub("group.name", "message_queue.topic.name"),
    "AckMessage": _sub("group.name", "topic.name"),
    "ForwardMessageToDeadLetterQueue": _sub("group.name", "topic.name"),
    "PullMessage": _sub("group.name", "message_queue.topic.name"),
    "UpdateOffset": _sub("group.name", "message_queue.topic.name"),
    "GetOffset": _sub("group.name", "message_queue.topic.name"),
    "QueryOffset": Access((Need("message_queue.topic.name", TOPIC, SUB),)),
    "EndTransaction": Access((Need("topic.name", TOPIC, PUB),)),
    # checked per command on the stream: a settings command names what the client will publish or consume
    "Telemetry": Access((Need("settings.publishing.topics[].name", TOPIC, PUB, False),
                         Need("settings.subscription.group.name", GROUP, SUB, False),
                         Need("settings.subscription.subscriptions[].topic.name", TOPIC, SUB, False))),
    "NotifyClientTermination": Access((Need("group.name", GROUP, SUB, False),)),
    "ChangeInvisibleDuration": _sub("group.name", "topic.name"),
    "RecallMessage": Access((Need("topic.name", TOPIC, PUB),)),
    "SyncLiteSubscription": _sub("group.name", "topic.name", topic_required=False),
}


def values(msg: Any, path: str) -> list[str]:
    """The strings at ``path`` in ``msg`` (empty ones included; an unset message field gives "")."""
    items: list[Any] = [msg]
    for part in path.split("."):
        many = part.endswith("[]")
        name = part[:-2] if many else part
        nxt: list[Any] = []
        for it in items:
            v = getattr(it, name)
            nxt.extend(v) if many else nxt.append(v)
        items = nxt
    return [str(v) for v in items]


class Refused(Exception):  # noqa: N818 - a refusal, not an error
    """A request the gate will not let through: the proxy status to answer with."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _date_ok(stamp: str, now: float) -> bool:
    """``x-mq-date-time`` within MAX_SKEW_S of ``now``. The SDKs write their local time with a "Z"
    suffix, so the stamp is read both as UTC and as this host's local time: a client on the same
    clock and zone passes either way, a stamp far from both is refused."""
    try:
        naive = datetime.strptime(stamp, DATE_FORMAT)  # noqa: DTZ007 - read below as UTC and as local time
    except ValueError:
        return False
    as_utc = naive.replace(tzinfo=UTC).timestamp()
    as_local = naive.timestamp()
    return abs(now - as_utc) <= MAX_SKEW_S or abs(now - as_local) <= MAX_SKEW_S


class Gate:
    """Authentication, name validation and permissions for one endpoint. ``accounts`` is the ACL
    plugin's ``AclFile`` when ACL is on (None: names are still validated, nothing else)."""

    def __init__(self, accounts: Any = None) -> None:
        self.accounts = accounts
        self.denied = 0

    def authenticate(self, md: dict[str, str], ip: str, now: float | None = None) -> tuple[str, str] | None:
        """The caller's account, None when ACL is off or the peer is globally white-listed;
        Refused(UNAUTHORIZED) otherwise unless a valid, fresh signature names a known account."""
        acl = self.accounts
        if acl is None:
            return None
        auth = md.get("authorization") or ""
        if not auth:
            if any(white(ip) for white in acl.global_white):
                return None
            raise Refused(C.UNAUTHORIZED, "no credentials: the authorization header is required")
        fields = dict(p.strip().split("=", 1) for p in auth.partition(" ")[2].split(",") if "=" in p)
        ak, sig = fields.get("Credential", "").strip(), fields.get("Signature", "").strip()
        acct = acl.accounts.get(ak) if ak else None
        if acct is None:
            raise Refused(C.UNAUTHORIZED, f"unknown access key {printable(ak, 64)!r}")
        if acct.white(ip) or any(white(ip) for white in acl.global_white):
            return acct.access_key, acct.secret_key
        stamp = md.get("x-mq-date-time") or ""
        if not stamp:
            raise Refused(C.UNAUTHORIZED, "x-mq-date-time is required with credentials")
        if not _date_ok(stamp, time.time() if now is None else now):
            raise Refused(C.UNAUTHORIZED, "x-mq-date-time is malformed or more than 15 minutes from the server's clock")
        want = hmac.new(acct.secret_key.encode(), stamp.encode(), hashlib.sha1).hexdigest()
        if not hmac.compare_digest(want.encode(), sig.lower().encode("utf-8", "surrogatepass")):  # bytes: any text
            raise Refused(C.UNAUTHORIZED, f"signature check failed for access key {ak}")
        return acct.access_key, acct.secret_key

    def authorize(self, method: str, request: Any, account: tuple[str, str] | None) -> None:
        """Refused unless every name ``request`` gives for ``method`` is legal and permitted."""
        access = RPC_ACCESS.get(method)
        if access is None:
            raise Refused(C.NOT_IMPLEMENTED, "unknown method")
        wanted: list[tuple[str, Need]] = []
        for need in access.needs:
            names = values(request, need.path)
            if not need.required:
                names = [n for n in names if n]
            elif not names:
                names = [""]
            for name in names:
                if need.kind == TOPIC:
                    why = validate_topic(name)
                    if why is not None:
                        raise Refused(C.ILLEGAL_TOPIC, why)
                else:
                    why = validate_group(name)
                    if why is not None:
                        raise Refused(C.ILLEGAL_CONSUMER_GROUP, why)
                wanted.append((name, need))
        if self.accounts is None or account is None:
            return  # ACL off, or a globally white-listed peer
        acct = self.accounts.accounts.get(account[0])
        if acct is None:
            raise Refused(C.UNAUTHORIZED, "the account was removed")
        if acct.admin and not acct.topic_perms and not acct.group_perms:
            return
        for name, need in wanted:
            needed, kind = need.perm, need.kind
            if kind == TOPIC and name == TRACE_TOPIC and needed == PUB:
                continue  # traces are open to every account, as the remoting ACL
            if kind == TOPIC and name.startswith(RETRY):  # a retry topic is its group's: SUB on the group
                needed, kind, owned = SUB, GROUP, acct.group_perms.get(name, acct.default_group_perm)
            elif kind == TOPIC:
                owned = acct.topic_perms.get(name, acct.default_topic_perm)
            else:
                owned = acct.group_perms.get(RETRY + name, acct.default_group_perm)
            if not allowed(needed, owned):
                perm = {PUB: "PUB", SUB: "SUB"}.get(needed, "PUB or SUB")
                raise Refused(C.FORBIDDEN, f"no {perm} permission on {kind} {printable(name, 128)}")

    def check(self, method: str, request: Any, md: dict[str, str], ip: str) -> tuple[str, str] | None:
        """The account for a request of ``method`` (see authenticate), else Refused."""
        try:
            account = self.authenticate(md, ip)
            self.authorize(method, request, account)
        except Refused as e:
            self.denied += 1
            audit.warning(f"grpc-deny:{ip}:{method}:{e.code}", "gRPC %s from %s refused: %s",
                          method, ip, printable(e.message, 200))
            raise
        return account


# ---------------------------------------------------------------------- installing the gate

_INTERNALS = re.compile(r"Traceback|\bFile \"|<class |\b[A-Z]\w*(?:Error|Exception|Interrupt)\b")


def clean(message: str) -> str:
    """A status message safe for a stranger: one that names Python internals becomes generic."""
    if _INTERNALS.search(message):
        audit.warning(f"grpc-internal:{message[:40]}", "gRPC: an internal detail kept from the client: %s",
                      printable(message, 300))
        return "internal error"
    return message


def _response_type(method: str) -> Any:
    return getattr(s, SERVICE.methods_by_name[method].output_type.name)


def _scrub(resp: Any) -> Any:
    """Clean every status message of a response (top-level and per entry) in place."""
    if resp.HasField("status") and resp.status.message:
        resp.status.message = clean(resp.status.message)
    for e in getattr(resp, "entries", ()):
        if e.HasField("status") and e.status.message:
            e.status.message = clean(e.status.message)
    return resp


def guard(svc: Any, gate: Gate, client_ip: Callable[[Any], str]) -> None:
    """Replace every MessagingService method on ``svc`` with one that passes ``gate`` first
    (Telemetry: authentication here, each command through ``gate`` in the service) and answers
    an unexpected exception with a generic internal error."""
    for m in SERVICE.methods:
        setattr(svc, m.name, _wrap(m.name, getattr(svc, m.name), gate, client_ip, m.client_streaming,
                                   m.server_streaming))


def _wrap(name: str, fn: Any, gate: Gate, client_ip: Callable[[Any], str], client_stream: bool,
          server_stream: bool) -> Any:
    resp_type = _response_type(name)

    def admit(request: Any, context: Any) -> None:
        if request is None:  # see safe_decoder
            raise Refused(C.BAD_REQUEST, f"the request is not a valid {SERVICE.methods_by_name[name].input_type.name}")
        md = dict(context.invocation_metadata() or ())
        ip = client_ip(context)
        if client_stream:  # the commands are checked one by one as they arrive
            ACCOUNT.set(_authenticate_logged(gate, name, md, ip))
        else:
            ACCOUNT.set(gate.check(name, request, md, ip))

    if server_stream:
        async def streamed(request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                admit(request, context)
            except Refused as e:
                yield resp_type(status=d.Status(code=e.code, message=e.message))
                return
            try:
                async for item in fn(request, context):
                    yield _scrub(item)
            except grpc.aio.BaseError:
                raise
            except Exception:
                log.exception("gRPC %s failed", name)
                await context.abort(grpc.StatusCode.INTERNAL, "internal error")
        return streamed

    async def unary(request: Any, context: Any) -> Any:
        try:
            admit(request, context)
        except Refused as e:
            return resp_type(status=d.Status(code=e.code, message=e.message))
        try:
            return _scrub(await fn(request, context))
        except grpc.aio.BaseError:
            raise
        except Exception:
            log.exception("gRPC %s failed", name)
            return resp_type(status=d.Status(code=C.INTERNAL_SERVER_ERROR, message="internal error"))
    return unary


def safe_decoder(message_type: Any) -> Callable[[bytes], Any]:
    """A request deserializer that answers None for bytes that are not a valid message, so the
    guard refuses them with BAD_REQUEST (grpcio's own answer names the protobuf exception class)."""
    def decode(data: bytes) -> Any:
        try:
            return message_type.FromString(data)
        except Exception:  # noqa: BLE001 - DecodeError and anything the C decoder raises
            return None
    return decode


def register(server: Any, svc: Any) -> None:
    """Serve ``svc`` (already guarded) on ``server`` with safe_decoder for every request type: what
    the generated ``add_MessagingServiceServicer_to_server`` does, bad bytes aside."""
    make = {(False, False): grpc.unary_unary_rpc_method_handler, (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler, (True, True): grpc.stream_stream_rpc_method_handler}
    handlers = {
        m.name: make[(m.client_streaming, m.server_streaming)](
            getattr(svc, m.name), request_deserializer=safe_decoder(getattr(s, m.input_type.name)),
            response_serializer=_response_type(m.name).SerializeToString)
        for m in SERVICE.methods
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),))


def _authenticate_logged(gate: Gate, method: str, md: dict[str, str], ip: str) -> tuple[str, str] | None:
    try:
        return gate.authenticate(md, ip)
    except Refused as e:
        gate.denied += 1
        audit.warning(f"grpc-deny:{ip}:{method}:{e.code}", "gRPC %s from %s refused: %s", method, ip,
                      printable(e.message, 200))
        raise
