"""The gRPC MessagingService (apache.rocketmq.v2) of a broker, RocketMQ 5's proxy in "local" mode.

Every RPC is translated into the remoting request the broker already serves (SEND_MESSAGE_V2,
POP_MESSAGE, ACK_MESSAGE, END_TRANSACTION...) and handed to the broker role's request handler,
interceptors (ACL) included, through a ``GrpcPeer`` standing in for the connection; the answer is
translated back with the proxy's status codes (reference: rocketmq-grpc-v2.md §2-§8). So gRPC and
remoting clients share one implementation of every semantic, and a 5.x producer's message can
be consumed by a 4.x consumer and the reverse.

Routes list every broker of the topic under its own id, this one from its own tables, the others
from the name servers, each with its own proxy's endpoint (routes.py); assignments name masters only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import itertools
import json
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from rmq.kernel import PutResult, PutStatus
from rmq.plugins.grpc_proxy.access import ACCOUNT, Gate, Refused
from rmq.plugins.grpc_proxy.hashing import consistent_hash, java_string_hash
from rmq.plugins.grpc_proxy.renew import GrpcOptions, Renewer, Tracked
from rmq.plugins.grpc_proxy.routes import Member
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.plugins.grpc_proxy.v2 import service_pb2_grpc as sg
from rmq.protocol.acl import sign
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import SysFlag, encode_properties
from rmq.protocol.message import BatchError, MessageExt, decode_messages, decode_offset_msg_id, encode_batch
from rmq.protocol.names import dlq_topic, validate_topic

if TYPE_CHECKING:
    from rmq.kernel import BrokerContext

log = logging.getLogger("rmq.grpc")

C = d.Code
POP_MESSAGE, ACK_MESSAGE, CHANGE_INVISIBLE = 200050, 200051, 200053
MAX_BODY = 4 * 1024 * 1024
ALL_TYPES = [d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION]
TYPES = {"NORMAL": [d.NORMAL], "FIFO": [d.FIFO], "DELAY": [d.DELAY], "TRANSACTION": [d.TRANSACTION], "MIXED": ALL_TYPES}


def accepted(tc: Any) -> list[int]:
    """The message types a topic accepts (RocketMQ 5's ``message.type`` attribute; none = NORMAL)."""
    return TYPES.get(getattr(tc, "message_type", "NORMAL"), [d.NORMAL])
SYSTEM_KEYS = frozenset((
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
    "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
    "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET",
    "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID", "CORRELATION_ID",
    "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET",
    "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL", "__BORNHOST", "BORN_TIMESTAMP",
    "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "__CRC32#", "__SHARDINGKEY", "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "TRANSACTION_CHECK_TIMES", "RECALL_HANDLE",
))
NOT_OURS = "receipt handle was not issued by this broker for this group and topic"
MAX_PEERS = 10_000  # gRPC clients (x-mq-client-id) kept at once
MAX_CLIENT_ID = 256  # characters of x-mq-client-id (an SDK's is host@pid@index@..., well under 100)
# a send answered with one of these stored the message (no slave holds it yet): kept so a retry does not
# store it again (``_resend``), for this long and this many at most
UNREPLICATED = (ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.FLUSH_SLAVE_TIMEOUT)
UNREPLICATED_TTL_S = 60.0
MAX_UNREPLICATED = 10_000
DLQ_CLAIM_MS = 30_000  # a DLQ forward holds the message this long while it copies it
CUSTOMIZED_BACKOFF = [1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200]

# remoting answer -> the proxy's status code
_CODES = {
    ResponseCode.SUCCESS: C.OK,
    ResponseCode.TOPIC_NOT_EXIST: C.TOPIC_NOT_FOUND,
    ResponseCode.NO_PERMISSION: C.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: C.BAD_REQUEST,
    ResponseCode.SYSTEM_BUSY: C.TOO_MANY_REQUESTS,
    ResponseCode.FLUSH_DISK_TIMEOUT: C.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: C.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: C.HA_NOT_AVAILABLE,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: C.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: C.ILLEGAL_FILTER_EXPRESSION,
    ResponseCode.NO_MESSAGE: C.INVALID_RECEIPT_HANDLE,
    ResponseCode.PULL_NOT_FOUND: C.MESSAGE_NOT_FOUND,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: C.NOT_IMPLEMENTED,
}


def status(code: int, message: str = "OK") -> d.Status:
    return d.Status(code=code, message=message or d.Code.Name(code))


def from_remoting(resp: RemotingCommand | None) -> d.Status:
    if resp is None:
        return status(C.INTERNAL_SERVER_ERROR, "no answer from the broker")
    code = _CODES.get(resp.code, C.INTERNAL_SERVER_ERROR)  # type: ignore[call-overload]
    return status(code, resp.remark or ("OK" if code == C.OK else d.Code.Name(code)))


def ts(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def ms_of(t: timestamp_pb2.Timestamp) -> int:
    return t.seconds * 1000 + t.nanos // 1_000_000


def dur_ms(v: duration_pb2.Duration) -> int:
    return v.seconds * 1000 + v.nanos // 1_000_000


class GrpcPeer:
    """A gRPC client seen as a remoting ``Connection`` by the broker's processors: its Telemetry
    stream is where broker-to-client requests (a transaction check) go."""

    _ids = itertools.count(1_000_000_000)

    def __init__(self, client_id: str, peer: str) -> None:
        self.id = next(self._ids)
        host, _, port = peer.rpartition(":")
        host = host.split(":", 1)[1] if host.startswith(("ipv4:", "ipv6:")) else host
        self.remote_addr = (host.strip("[]") or "127.0.0.1", int(port) if port.isdigit() else 0)
        self.local_addr = ("0.0.0.0", 0)
        self.attributes: dict[str, Any] = {}
        self.client_id = client_id
        self.outbox: asyncio.Queue[d.Message | s.TelemetryCommand] = asyncio.Queue(maxsize=1024)
        self.settings: d.Settings | None = None
        self._closed = False
        self.streams = 0  # open Telemetry streams: a peer with one is never evicted
        self._callbacks: list[Callable[[Any], None]] = []
        self.convert: Callable[[MessageExt], d.Message] | None = None
        self.waiting: dict[str, asyncio.Future[s.TelemetryCommand]] = {}  # nonce -> the answer awaited
        self.on_check: Callable[[str, str, tuple[int, int, str]], None] | None = None  # a relayed check's half

    @property
    def closed(self) -> bool:
        return self._closed

    async def send_request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:  # noqa: ASYNC109
        """The broker's calls to a consumer, as the proxy turns them into Telemetry commands:
        GET_CONSUMER_RUNNING_INFO -> print_thread_stack_trace_command (answered by thread_stack_trace),
        CONSUME_MESSAGE_DIRECTLY -> verify_message_command (answered by verify_message_result)."""
        nonce = f"{self.client_id}-{next(self._ids)}"
        if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            command = s.TelemetryCommand(print_thread_stack_trace_command=s.PrintThreadStackTraceCommand(nonce=nonce))
        elif cmd.code == RequestCode.CONSUME_MESSAGE_DIRECTLY and cmd.body and self.convert is not None:
            msgs = decode_messages(cmd.body)
            if not msgs:
                return cmd.response(ResponseCode.SYSTEM_ERROR, "no message to verify")
            command = s.TelemetryCommand(verify_message_command=s.VerifyMessageCommand(
                nonce=nonce, message=self.convert(msgs[0])))
        else:
            raise ConnectionError(f"a gRPC client answers no remoting request {cmd.code}")
        if self._closed:
            raise ConnectionError(f"gRPC client {self.client_id} has no telemetry stream")
        fut: asyncio.Future[s.TelemetryCommand] = asyncio.get_running_loop().create_future()
        self.waiting[nonce] = fut
        started = time.monotonic()
        try:
            self.outbox.put_nowait(command)
            answer = await asyncio.wait_for(fut, timeout)
        except asyncio.QueueFull:
            raise ConnectionError(f"gRPC client {self.client_id}: telemetry backlog full") from None
        finally:
            self.waiting.pop(nonce, None)
        ok = not answer.HasField("status") or answer.status.code == C.OK
        if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            info = {"properties": {"clientId": self.client_id, "language": "GRPC", "PROP_CONSUMER_START_TIMESTAMP": "0"},
                    "subscriptionSet": [], "mqTable": {}, "statusTable": {},
                    "jstack": answer.thread_stack_trace.thread_stack_trace}
            return cmd.response(ResponseCode.SUCCESS if ok else ResponseCode.SYSTEM_ERROR,
                                None if ok else answer.status.message, body=json_bytes(info))
        result = {"order": False, "autoCommit": True, "consumeResult": "CR_SUCCESS" if ok else "CR_THROW_EXCEPTION",
                  "remark": None if ok else answer.status.message,
                  "spentTimeMills": int((time.monotonic() - started) * 1000)}
        return cmd.response(ResponseCode.SUCCESS, None, body=json_bytes(result))

    def answered(self, cmd: s.TelemetryCommand) -> None:
        """A client's answer on its Telemetry stream to a command sent by ``send_request``."""
        kind = cmd.WhichOneof("command")
        nonce = cmd.thread_stack_trace.nonce if kind == "thread_stack_trace" else cmd.verify_message_result.nonce
        fut = self.waiting.get(nonce)
        if fut is not None and not fut.done():
            fut.set_result(cmd)

    async def send_oneway(self, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.CHECK_TRANSACTION_STATE and cmd.body and self.convert is not None:
            for m in decode_messages(cmd.body):
                txid = cmd.ext.get("transactionId") or m.properties.get("UNIQ_KEY", "")
                m.properties.setdefault("UNIQ_KEY", txid)
                if self.on_check is not None:  # as the proxy: the check says where the half is now
                    try:
                        where = (int(cmd.ext.get("tranStateTableOffset", "")), int(cmd.ext.get("commitLogOffset", "")),
                                 m.properties.get("PGROUP") or m.topic)
                    except ValueError:
                        pass
                    else:
                        self.on_check(m.topic, txid, where)
                msg = self.convert(m)
                command = s.TelemetryCommand(recover_orphaned_transaction_command=s.RecoverOrphanedTransactionCommand(
                    message=msg, transaction_id=txid))
                try:
                    self.outbox.put_nowait(command)
                except asyncio.QueueFull:
                    log.warning("gRPC client %s: telemetry backlog full; a transaction check was dropped", self.client_id)

    async def send_response(self, cmd: RemotingCommand) -> None:
        return None

    def on_close(self, callback: Callable[[Any], None]) -> None:
        if self._closed:
            callback(self)
        else:
            self._callbacks.append(callback)

    async def aclose(self) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for cb in self._callbacks:
            try:
                cb(self)
            except Exception:  # noqa: BLE001 - one listener's failure must not skip the others
                log.exception("gRPC peer close callback failed")


class MessagingService(sg.MessagingServiceServicer):
    def __init__(self, broker: BrokerContext, handle: Callable[[Any, RemotingCommand], Awaitable[RemotingCommand | None]],
                 endpoint: tuple[str, int], accounts: Any = None, options: GrpcOptions | None = None) -> None:
        self.broker = broker
        self.options = options or GrpcOptions()
        self.renewer = Renewer(self.options, self._renew_change, self._online,
                               lambda n: CUSTOMIZED_BACKOFF[min(n, len(CUSTOMIZED_BACKOFF) - 1)] * 1000)
        self.handle = handle
        self.gate = Gate(accounts)  # access.py: authentication, names and permissions before every method
        self.resolve_peer: Callable[[str], tuple[str, int] | None] | None = None  # front.py's real client address
        self.host, self.port = endpoint
        self.peers: dict[str, GrpcPeer] = {}
        self._rr = itertools.count()
        self.unreplicated: dict[tuple[str, str], tuple[float, int, s.SendResultEntry]] = {}  # see _resend
        self.sending: dict[tuple[str, str], asyncio.Future[s.SendResultEntry]] = {}  # (topic, message id) storing now
        self.transactions: dict[str, tuple[int, int, str]] = {}  # topic@txid -> (queue offset, commitlog offset, group)
        self.routes: Any = None  # routes.RouteView: the topic's other brokers, from the name servers
        # receipt handles are signed with this, so only handles this broker issued are acted on; a
        # restart makes earlier handles invalid, as it does the in-memory POP state they point to
        self._receipt_key = secrets.token_bytes(32)

    # ------------------------------------------------------------------ plumbing

    def _peer(self, context: grpc.aio.ServicerContext) -> GrpcPeer | None:
        md = dict(context.invocation_metadata() or ())
        cid = md.get("x-mq-client-id") or ""
        if not cid or len(cid) > MAX_CLIENT_ID:
            return None
        p = self.peers.get(cid)
        if p is None or p.closed:
            raw = context.peer() or ""
            real = self.resolve_peer(raw) if self.resolve_peer is not None else None
            p = GrpcPeer(cid, f"ipv4:{real[0]}:{real[1]}" if real else raw)
            p.convert = self.to_message
            p.on_check = self._remember
            if cid in self.peers or self._room():
                self.peers[cid] = p
            # else: every kept peer holds a stream; this one serves its call and is not kept
        return p

    def _room(self) -> bool:
        """Room for one more peer: a stranger inventing client ids must not grow the table without
        bound, so past MAX_PEERS the oldest peer without a Telemetry stream goes (closed: the broker
        forgets its registrations; the client's next call makes a new one)."""
        if len(self.peers) < MAX_PEERS:
            return True
        for cid, old in self.peers.items():
            if old.closed or old.streams == 0:
                del self.peers[cid]
                old.close()
                return True
        return False

    def client_ip(self, context: Any) -> str:
        """The client's IP (behind front.py's splice, the real one), for white lists and logs."""
        raw = context.peer() or ""
        real = self.resolve_peer(raw) if self.resolve_peer is not None else None
        if real is not None:
            return real[0]
        host = raw.split(":", 1)[1] if raw.startswith(("ipv4:", "ipv6:")) else raw
        return host.rpartition(":")[0].strip("[]") or host

    async def _call(self, peer: GrpcPeer, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand | None:
        """The broker's own request for an RPC, signed as the account the gate authenticated (the
        broker's ACL then checks it again), unsigned for a white-listed peer or with ACL off."""
        cmd = RemotingCommand.request(code, ext, body)
        account = ACCOUNT.get()
        if account is not None:
            sign(cmd.ext, cmd.body, *account)
        return await self.handle(peer, cmd)

    # ------------------------------------------------------------------ receipt handles

    def _mac(self, group: str, topic: str, handle: str) -> str:
        data = f"{group}\n{topic}\n{handle}".encode()
        return hmac.new(self._receipt_key, data, hashlib.sha256).hexdigest()[:32]

    def seal(self, group: str, topic: str, handle: str) -> str:
        """A receipt handle bound to its group and topic: the POP receipt and its MAC."""
        return f"{handle} {self._mac(group, topic, handle)}"

    def unseal(self, group: str, topic: str, sealed: str) -> list[str] | None:
        """The POP receipt's fields of a handle this broker issued for this group and topic, else None
        (forged, altered, another group's or topic's, or from before a restart)."""
        handle, _, mac = sealed.rpartition(" ")
        # bytes: compare_digest raises TypeError on str with non-ASCII characters (a peer chooses them)
        given = mac.encode("utf-8", "surrogatepass")
        if not handle or len(mac) != 32 or not hmac.compare_digest(self._mac(group, topic, handle).encode(), given):
            return None
        return self._handle_parts(handle)

    def _topic(self, name: str) -> Any:
        return self.broker.topics.table.get(name)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ routes, heartbeat, telemetry

    async def _members(self, topic: str) -> tuple[list[Member], list[int]]:
        """The topic's brokers (routes.py): this one from its own tables under the id it holds now,
        the others from the name servers; and the topic's message types as a broker has them."""
        b = self.broker
        me, my_id = b.config.brokerName, int(getattr(b, "broker_id", 0))
        tc = self._topic(topic)
        out = [Member(me, my_id, self.host, self.port, tc.readQueueNums, tc.writeQueueNums, tc.perm)] if tc else []
        route = await self.routes.route(topic) if self.routes is not None else None
        if route is not None:
            out += await self.routes.members(route, me, my_id, b.broker_addr, self.port)
        if tc is not None:
            return out, accepted(tc)
        return out, (await self.routes.message_types(topic, route) if out else [])

    @staticmethod
    def _broker_of(m: Member) -> d.Broker:
        try:
            ipaddress.ip_address(m.host)
            scheme = d.IPv6 if ":" in m.host else d.IPv4
        except ValueError:
            scheme = d.DOMAIN_NAME
        return d.Broker(name=m.name, id=m.bid, endpoints=d.Endpoints(scheme=scheme, addresses=[
            d.Address(host=m.host, port=m.port)]))

    async def QueryRoute(self, request: s.QueryRouteRequest, context: Any) -> s.QueryRouteResponse:  # noqa: N802
        """Every broker of the topic, masters and slaves under their ids, each with its endpoint (the
        proxy's ``queryRoute``: clients keep the masters' queues)."""
        topic = request.topic.name
        if validate_topic(topic) is not None:
            return s.QueryRouteResponse(status=status(C.ILLEGAL_TOPIC, validate_topic(topic) or ""))
        members, kinds = await self._members(topic)
        if not members:
            return s.QueryRouteResponse(status=status(C.TOPIC_NOT_FOUND, f"topic {topic} not found"))
        queues = []
        for m in members:
            broker = self._broker_of(m)
            for i in range(max(m.read, m.write)):
                rd, wr = i < m.read and m.perm & 4, i < m.write and m.perm & 2
                perm = d.READ_WRITE if rd and wr else d.READ if rd else d.WRITE if wr else d.NONE
                queues.append(d.MessageQueue(topic=d.Resource(name=topic), id=i, permission=perm, broker=broker,
                                             accept_message_types=kinds or [d.NORMAL]))
        return s.QueryRouteResponse(status=status(C.OK), message_queues=queues)

    async def Heartbeat(self, request: s.HeartbeatRequest, context: Any) -> s.HeartbeatResponse:  # noqa: N802
        peer = self._peer(context)
        if peer is None:
            return s.HeartbeatResponse(status=status(C.CLIENT_ID_REQUIRED, "x-mq-client-id is required"))
        await self._register(peer)
        return s.HeartbeatResponse(status=status(C.OK))

    async def _register(self, peer: GrpcPeer) -> None:
        """A remoting heartbeat for the client, as the proxy's: a producer per published topic (group =
        topic), a consumer as its group (CONSUME_POP, CLUSTERING) with its subscriptions, so admin
        views list it and the broker's calls to a consumer (running info, consume directly) reach it."""
        st = peer.settings
        if st is None:
            return
        producers: list[dict[str, Any]] = []
        consumers: list[dict[str, Any]] = []
        if st.client_type == d.PRODUCER:
            producers = [{"groupName": t.name} for t in st.publishing.topics]
        elif st.client_type in (d.PUSH_CONSUMER, d.SIMPLE_CONSUMER) and st.subscription.group.name:
            subs = [{"topic": e.topic.name, "subString": e.expression.expression or "*",
                     "expressionType": "SQL92" if e.expression.type == d.SQL else "TAG", "tagsSet": [], "codeSet": [],
                     "subVersion": 0, "classFilterMode": False}
                    for e in st.subscription.subscriptions if e.topic.name]
            consumers = [{"groupName": st.subscription.group.name, "consumeType": "CONSUME_POP",
                          "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                          "subscriptionDataSet": subs, "unitMode": False}]
        if producers or consumers:
            body = json_bytes({"clientID": peer.client_id, "producerDataSet": producers, "consumerDataSet": consumers})
            await self._call(peer, RequestCode.HEART_BEAT, {}, body)

    async def Telemetry(self, request_iterator: Any, context: Any) -> AsyncIterator[s.TelemetryCommand]:  # noqa: N802
        peer = self._peer(context)
        if peer is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "x-mq-client-id is required")
            return
        reader = asyncio.ensure_future(self._read_telemetry(peer, request_iterator))
        get: asyncio.Future[Any] | None = None
        peer.streams += 1
        try:
            while not reader.done() or not peer.outbox.empty():
                get = asyncio.ensure_future(peer.outbox.get())
                done, _ = await asyncio.wait({get, reader}, return_when=asyncio.FIRST_COMPLETED)
                if get in done:
                    item, get = get.result(), None
                    yield item
                else:
                    get.cancel()
                    get = None
        finally:
            peer.streams -= 1
            reader.cancel()
            if get is not None:
                get.cancel()

    async def _read_telemetry(self, peer: GrpcPeer, request_iterator: Any) -> None:
        async for cmd in request_iterator:
            if cmd is None:  # bytes that are not a TelemetryCommand (access.safe_decoder)
                await peer.outbox.put(s.TelemetryCommand(status=status(C.BAD_REQUEST, "not a TelemetryCommand")))
                continue
            try:  # the gate for a stream: each command's names and permissions (access.py)
                self.gate.authorize("Telemetry", cmd, ACCOUNT.get())
            except Refused as e:
                await peer.outbox.put(s.TelemetryCommand(status=status(e.code, e.message)))
                continue
            if cmd.HasField("settings"):
                peer.settings = cmd.settings
                await self._register(peer)
                await peer.outbox.put(s.TelemetryCommand(status=status(C.OK), settings=self._merged(cmd.settings)))
            elif cmd.HasField("thread_stack_trace") or cmd.HasField("verify_message_result"):
                peer.answered(cmd)

    def _merged(self, st: d.Settings) -> d.Settings:
        out = d.Settings()
        out.CopyFrom(st)
        if st.client_type == d.PRODUCER:
            out.backoff_policy.CopyFrom(d.RetryPolicy(max_attempts=3, exponential_backoff=d.ExponentialBackoff(
                initial=duration_pb2.Duration(nanos=10_000_000), max=duration_pb2.Duration(seconds=1), multiplier=2)))
            out.publishing.max_body_size = MAX_BODY
            out.publishing.validate_message_type = True
        else:
            group = st.subscription.group.name
            sgc = self.broker.groups.table.get(group) if group else None  # type: ignore[attr-defined]
            retry_max = sgc.retryMaxTimes if sgc is not None else 16
            out.subscription.receive_batch_size = 32
            out.subscription.long_polling_timeout.CopyFrom(duration_pb2.Duration(seconds=20))
            out.subscription.fifo = bool(sgc is not None and sgc.consumeMessageOrderly)
            out.backoff_policy.CopyFrom(d.RetryPolicy(max_attempts=retry_max + 1, customized_backoff=d.CustomizedBackoff(
                next=[duration_pb2.Duration(seconds=x) for x in CUSTOMIZED_BACKOFF])))
        out.metric.on = False
        return out

    async def NotifyClientTermination(self, request: Any, context: Any) -> s.NotifyClientTerminationResponse:  # noqa: N802
        md = dict(context.invocation_metadata() or ())
        peer = self.peers.pop(md.get("x-mq-client-id") or "", None)
        if peer is not None:
            peer.close()
        return s.NotifyClientTerminationResponse(status=status(C.OK))

    # ------------------------------------------------------------------ producing

    async def SendMessage(self, request: s.SendMessageRequest, context: Any) -> s.SendMessageResponse:  # noqa: N802
        """One message, or several of one topic as one batch (the proxy's SEND_BATCH_MESSAGE): one
        entry per message, the top status the entries' common one or MULTIPLE_RESULTS."""
        peer = self._peer(context)
        if peer is None:
            return s.SendMessageResponse(status=status(C.CLIENT_ID_REQUIRED, "x-mq-client-id is required"))
        if not request.messages:
            return s.SendMessageResponse(status=status(C.MESSAGE_CORRUPTED, "no message to send"))
        if len(request.messages) == 1:
            entry = await self._send_one(peer, request.messages[0])
            return s.SendMessageResponse(status=entry.status, entries=[entry])
        entries = await self._send_batch(peer, request.messages)
        codes = {e.status.code for e in entries}
        top = entries[0].status if len(codes) == 1 else status(C.MULTIPLE_RESULTS, "multiple results")
        return s.SendMessageResponse(status=top, entries=entries)

    def _prepare(self, m: d.Message, batch: bool) -> tuple[dict[str, str], int, int] | s.SendResultEntry:
        """A message's remoting properties, sysFlag and queue, or the entry refusing it. The queue of
        a message group is the proxy's (Guava's consistentHash of the group's Java hashCode over the
        write queues); a batch, like the proxy's, ignores the group for the choice."""
        topic = m.topic.name
        sp = m.system_properties
        if not m.body:
            return s.SendResultEntry(status=status(C.MESSAGE_BODY_EMPTY, "message body is empty"))
        if len(m.body) > MAX_BODY:
            return s.SendResultEntry(status=status(C.MESSAGE_BODY_TOO_LARGE, f"body over {MAX_BODY} bytes"))
        if not sp.message_id:
            return s.SendResultEntry(status=status(C.ILLEGAL_MESSAGE_ID, "message_id is blank"))
        for k in m.user_properties:
            if k in SYSTEM_KEYS or not k or any(ord(ch) < 32 for ch in k):
                return s.SendResultEntry(status=status(C.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {k!r} is reserved"))
        if sp.HasField("tag") and (not sp.tag.strip() or "|" in sp.tag):
            return s.SendResultEntry(status=status(C.ILLEGAL_MESSAGE_TAG, f"tag {sp.tag!r} is illegal"))
        tc = self._topic(topic)
        if tc is None:
            return s.SendResultEntry(status=status(C.TOPIC_NOT_FOUND, f"topic {topic} not found"))
        kind = sp.message_type or d.NORMAL
        if kind not in accepted(tc):
            return s.SendResultEntry(status=status(C.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, (
                f"the topic {topic} accepts {tc.message_type} messages, not {d.MessageType.Name(kind)}")))
        nq = max(tc.writeQueueNums, 1)
        props: dict[str, str] = dict(m.user_properties)
        props["UNIQ_KEY"] = sp.message_id
        if sp.HasField("tag"):
            props["TAGS"] = sp.tag
        if sp.keys:
            props["KEYS"] = " ".join(sp.keys)
        sys_flag = 0
        if sp.HasField("message_group"):
            props["__SHARDINGKEY"] = sp.message_group
        if sp.HasField("message_group") and not batch:
            qid = consistent_hash(java_string_hash(sp.message_group), nq)
        else:
            qid = next(self._rr) % nq
        if sp.HasField("delivery_timestamp"):
            when = ms_of(sp.delivery_timestamp)
            if when - time.time() * 1000 > 86_400_000:
                return s.SendResultEntry(status=status(C.ILLEGAL_DELIVERY_TIME, "delivery time more than 1 day ahead"))
            props["TIMER_DELIVER_MS"] = str(when)
        if sp.message_type == d.TRANSACTION:
            props["TRAN_MSG"] = "true"
            props["PGROUP"] = topic
            sys_flag |= SysFlag.TX_PREPARED
            if sp.HasField("orphaned_transaction_recovery_duration"):
                props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(sp.orphaned_transaction_recovery_duration.seconds)
        return props, sys_flag, qid

    @staticmethod
    def _send_ext(topic: str, qid: int, sys_flag: int, born: int, props: str, batch: bool) -> dict[str, str]:
        return {"a": topic, "b": topic, "c": "TBW102", "d": "4", "e": str(qid), "f": str(sys_flag), "g": str(born),
                "h": "0", "i": props, "j": "0", "k": "false", "m": "true" if batch else "false"}

    async def _send_batch(self, peer: GrpcPeer, messages: Any) -> list[s.SendResultEntry]:
        """Several messages of one topic in one SEND_BATCH_MESSAGE: all stored or none."""
        topic = messages[0].topic.name
        items: list[tuple[bytes, int, str]] = []
        qid = sys_flag = 0
        for i, m in enumerate(messages):
            if m.topic.name != topic:
                return [s.SendResultEntry(status=status(C.MESSAGE_CORRUPTED, "topic in message is not same"))
                        for _ in messages]
            prepared = self._prepare(m, batch=True)
            if isinstance(prepared, s.SendResultEntry):
                return [prepared for _ in messages]
            props, flag, q = prepared
            if i == 0:
                qid, sys_flag = q, flag  # the proxy's header: the first message's queue and flag
            items.append((bytes(m.body), 0, encode_properties(props)))
        first = messages[0].system_properties
        born = ms_of(first.born_timestamp) if first.HasField("born_timestamp") else int(time.time() * 1000)
        try:
            body = encode_batch(items)
        except BatchError as e:
            return [s.SendResultEntry(status=status(C.MESSAGE_CORRUPTED, str(e))) for _ in messages]
        ext = self._send_ext(topic, qid, sys_flag, born, "", True)
        resp = await self._call(peer, RequestCode.SEND_BATCH_MESSAGE, ext, body)
        st = from_remoting(resp)
        if resp is None or st.code != C.OK:
            return [s.SendResultEntry(status=st) for _ in messages]
        offset = int(resp.ext.get("queueOffset", "0") or 0)
        return [s.SendResultEntry(status=st, message_id=m.system_properties.message_id, offset=offset + i)
                for i, m in enumerate(messages)]

    async def _send_one(self, peer: GrpcPeer, m: d.Message) -> s.SendResultEntry:
        """One message. A retry of a message (same topic and message id) this broker is storing or
        stored without a slave is answered from that attempt (``_resend``), never stored twice; the
        store runs on when the client gives up waiting (the SDK's 3 s deadline is slaveTimeout's), so
        its outcome is there for the retry."""
        prepared = self._prepare(m, batch=False)
        if isinstance(prepared, s.SendResultEntry):
            return prepared
        key = (m.topic.name, m.system_properties.message_id)
        first = self.sending.get(key)
        if first is not None:  # the client gave up on an attempt still storing it: that attempt answers
            with contextlib.suppress(Exception):  # it failed: this one stores the message
                done = await asyncio.shield(first)
                if done.status.code == C.OK:
                    return done
        kept = self.unreplicated.get(key)
        if kept is not None and (again := await self._resend(key, kept)) is not None:
            return again
        task = asyncio.ensure_future(self._store_one(peer, m, prepared))
        self.sending[key] = task
        task.add_done_callback(lambda t: self.sending.pop(key) if self.sending.get(key) is t else None)
        return await asyncio.shield(task)

    async def _store_one(self, peer: GrpcPeer, m: d.Message, prepared: tuple[dict[str, str], int, int]) -> Any:
        props, sys_flag, qid = prepared
        topic = m.topic.name
        sp = m.system_properties
        born = ms_of(sp.born_timestamp) if sp.HasField("born_timestamp") else int(time.time() * 1000)
        ext = self._send_ext(topic, qid, sys_flag, born, encode_properties(props), False)
        resp = await self._call(peer, RequestCode.SEND_MESSAGE_V2, ext, bytes(m.body))
        st = from_remoting(resp)
        if resp is None or (st.code != C.OK and resp.code not in UNREPLICATED):
            return s.SendResultEntry(status=st)
        offset = int(resp.ext.get("queueOffset", "0") or 0)
        try:
            phys = int(decode_offset_msg_id(resp.ext.get("msgId", ""))[-1])
        except (ValueError, TypeError, IndexError):
            phys = -1
        if sys_flag & SysFlag.TX_PREPARED:
            self._remember(topic, sp.message_id, (offset, max(phys, 0), topic))
        entry = s.SendResultEntry(status=status(C.OK), message_id=sp.message_id, transaction_id=sp.message_id,
                                  offset=offset, recall_handle=resp.ext.get("recallHandle", ""))
        if st.code != C.OK:  # stored here, not (yet) on a slave: the SDK's retry must not store it again
            if phys >= 0:
                self.unreplicated[(topic, sp.message_id)] = (time.monotonic(), phys, entry)
                while len(self.unreplicated) > MAX_UNREPLICATED:
                    self.unreplicated.pop(next(iter(self.unreplicated)))
            return s.SendResultEntry(status=st)
        return entry

    async def _resend(self, key: tuple[str, str], kept: tuple[float, int, s.SendResultEntry]) -> Any:
        """A send retried (same message id) after this broker stored the message and answered that no
        slave held it (HA_NOT_AVAILABLE / SLAVE_PERSISTENCE_TIMEOUT, which the SDKs retry): the copy
        stored then is the message, so the answer is whether a slave holds it now, with that copy's
        receipt; no second copy is stored (it would be a duplicate the consumers see, with the same
        message id, while the first may be held invisible). None: nothing kept to answer with (too
        old, or the copy is no longer in the commitlog), so the send goes ahead."""
        at, phys, entry = kept
        b: Any = self.broker
        rec = b.store.look_message_by_offset(phys) if time.monotonic() - at < UNREPLICATED_TTL_S else None
        if rec is None or len(rec) < 4 or b.is_slave:
            self.unreplicated.pop(key, None)
            return None
        result = PutResult(PutStatus.PUT_OK, wrote_offset=phys, wrote_bytes=int.from_bytes(rec[:4], "big"))
        if b.sync_master and b.replication is not None:
            await b.wait_slave(result)
        if result.status is PutStatus.PUT_OK:
            self.unreplicated.pop(key, None)
            return entry
        code = C.HA_NOT_AVAILABLE if result.status is PutStatus.SLAVE_NOT_AVAILABLE else C.SLAVE_PERSISTENCE_TIMEOUT
        return s.SendResultEntry(status=status(code, f"stored, no slave holds it yet: {result.status.name}"))

    def _remember(self, topic: str, txid: str, where: tuple[int, int, str]) -> None:
        """Where a transaction's half is (half queue offset, commitlog offset, producer group): from its
        send, then from each check relayed to the producer, as the proxy's ``addTransactionDataByBrokerAddr``
        on CHECK_TRANSACTION_STATE. The table is memory only; the half itself is the durable state, and
        a check carries where it is, so a check answered after a restart still ends it (a check's
        put-back also moves the half: the newest place wins). A producer's own answer after a restart
        finds nothing, as under the proxy, and the next check resolves the half."""
        key = f"{topic}@{txid}"
        self.transactions.pop(key, None)
        self.transactions[key] = where
        if len(self.transactions) > 100_000:  # answered or forgotten: keep the table bounded
            self.transactions.pop(next(iter(self.transactions)))

    async def EndTransaction(self, request: s.EndTransactionRequest, context: Any) -> s.EndTransactionResponse:  # noqa: N802
        peer = self._peer(context)
        if peer is None:
            return s.EndTransactionResponse(status=status(C.CLIENT_ID_REQUIRED, "x-mq-client-id is required"))
        if not request.transaction_id:
            return s.EndTransactionResponse(status=status(C.INVALID_TRANSACTION_ID, "transaction_id is blank"))
        topic = request.topic.name
        data = self.transactions.pop(f"{topic}@{request.transaction_id}", None)
        if data is None:
            return s.EndTransactionResponse(status=status(C.INTERNAL_SERVER_ERROR, "cannot found transaction data"))
        queue_offset, phys, group = data
        kind = {d.COMMIT: 8, d.ROLLBACK: 12}.get(request.resolution, 0)
        if kind == 0:  # unknown: the broker asks again later
            self.transactions[f"{topic}@{request.transaction_id}"] = data
            return s.EndTransactionResponse(status=status(C.OK))
        ext = {"producerGroup": group, "tranStateTableOffset": str(queue_offset), "commitLogOffset": str(phys),
               "commitOrRollback": str(kind), "fromTransactionCheck": str(request.source == d.SOURCE_SERVER_CHECK).lower(),
               "msgId": request.message_id, "transactionId": request.transaction_id}
        resp = await self._call(peer, RequestCode.END_TRANSACTION, ext)
        return s.EndTransactionResponse(status=from_remoting(resp) if resp is not None else status(C.OK))

    async def RecallMessage(self, request: s.RecallMessageRequest, context: Any) -> s.RecallMessageResponse:  # noqa: N802
        peer = self._peer(context)
        if peer is None:
            return s.RecallMessageResponse(status=status(C.CLIENT_ID_REQUIRED, "x-mq-client-id is required"))
        resp = await self._call(peer, RequestCode.RECALL_MESSAGE, {"topic": request.topic.name,
                                                                  "recallHandle": request.recall_handle})
        st = from_remoting(resp)
        return s.RecallMessageResponse(status=st, message_id=resp.ext.get("msgId", "") if resp is not None else "")

    # ------------------------------------------------------------------ consuming (POP)

    def _orderly(self, group: str) -> bool:
        sgc = self.broker.groups.table.get(group)  # type: ignore[attr-defined]
        return bool(sgc is not None and sgc.consumeMessageOrderly)

    async def QueryAssignment(self, request: s.QueryAssignmentRequest, context: Any) -> s.QueryAssignmentResponse:  # noqa: N802
        """Each master's readable queues (the proxy's ``queryAssignment``: a slave is never assigned, POP
        goes to masters): one queue -1 per broker, or every queue for a FIFO group."""
        topic = request.topic.name
        members, kinds = await self._members(topic)
        if not members:
            return s.QueryAssignmentResponse(status=status(C.TOPIC_NOT_FOUND, f"topic {topic} not found"))
        fifo = self._orderly(request.group.name)
        mqs = [d.MessageQueue(topic=d.Resource(name=topic), id=i, permission=_PERMS[m.perm & 6], broker=self._broker_of(m),
                              accept_message_types=kinds or [d.NORMAL])
               for m in members if m.bid == 0 and m.perm & 4 and m.read > 0 for i in (range(m.read) if fifo else [-1])]
        if not mqs:
            return s.QueryAssignmentResponse(status=status(C.FORBIDDEN, "no readable queue"))
        return s.QueryAssignmentResponse(status=status(C.OK), assignments=[d.Assignment(message_queue=q) for q in mqs])

    async def ReceiveMessage(self, request: s.ReceiveMessageRequest, context: Any) -> AsyncIterator[s.ReceiveMessageResponse]:  # noqa: N802
        peer = self._peer(context)
        if peer is None:
            yield s.ReceiveMessageResponse(status=status(C.CLIENT_ID_REQUIRED, "x-mq-client-id is required"))
            return
        group = request.group.name
        topic = request.message_queue.topic.name
        auto = request.auto_renew and self.options.enableProxyAutoRenew  # renew.py keeps them invisible
        if auto or not request.HasField("invisible_duration"):
            invisible = self.options.defaultInvisibleTimeMills
        else:
            invisible = dur_ms(request.invisible_duration)
            if not 10_000 <= invisible <= 12 * 3_600_000:
                yield s.ReceiveMessageResponse(status=status(C.ILLEGAL_INVISIBLE_TIME, "invisible time must be 10 s .. 12 h"))
                return
        poll = dur_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else 20_000
        remaining = context.time_remaining()
        if remaining is not None:
            poll = min(poll, max(0, int(remaining * 1000) - 1500))
        poll = max(0, min(poll, 20_000))
        expr = request.filter_expression
        etype = "SQL92" if expr.type == d.SQL else "TAG"
        ext = {"consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": str(min(max(request.batch_size, 1), 32)),
               "invisibleTime": str(invisible), "pollTime": str(poll), "bornTime": str(int(time.time() * 1000)),
               "initMode": "1", "expType": etype, "exp": expr.expression or "*",
               "order": "true" if self._orderly(group) else "false"}
        resp = await self._call(peer, POP_MESSAGE, ext)
        st = from_remoting(resp)
        if resp is None or resp.code != ResponseCode.SUCCESS:
            if st.code == C.MESSAGE_NOT_FOUND:
                st = status(C.MESSAGE_NOT_FOUND, "no new message")
            yield s.ReceiveMessageResponse(status=st)
            return
        h = resp.ext
        yield s.ReceiveMessageResponse(status=status(C.OK))
        for m in decode_messages(resp.body or b""):
            handle = " ".join((str(m.queue_offset), h["popTime"], h["invisibleTime"], h.get("reviveQid", "0"), "0",
                               self.broker.config.brokerName, str(m.queue_id), str(m.queue_offset)))
            msg = self.to_message(m, handle, invisible)
            sealed = msg.system_properties.receipt_handle = self.seal(group, msg.topic.name, handle)
            if auto:
                self.renewer.add(peer, group, msg.system_properties.message_id, Tracked(
                    msg.topic.name, sealed, handle.split(" "), m.reconsume_times, ACCOUNT.get()))
            yield s.ReceiveMessageResponse(message=msg)
        yield s.ReceiveMessageResponse(delivery_timestamp=ts(int(time.time() * 1000)))

    # ------------------------------------------------------------------ lite pull (offsets kept by the broker)

    def _mq_problem(self, mq: d.MessageQueue) -> str | None:
        tc = self._topic(mq.topic.name)
        if tc is None:
            return f"topic {mq.topic.name[:80]!r} not found"
        if not 0 <= mq.id < max(tc.readQueueNums, tc.writeQueueNums):
            return f"queue {mq.id} of {mq.topic.name[:80]!r} does not exist"
        return None

    async def PullMessage(self, request: s.PullMessageRequest, context: Any) -> AsyncIterator[s.PullMessageResponse]:  # noqa: N802
        """The broker's PULL_MESSAGE on one queue: status, the messages, then the next offset."""
        peer = self._peer(context)
        if peer is None:
            yield s.PullMessageResponse(status=status(C.CLIENT_ID_REQUIRED, "x-mq-client-id is required"))
            return
        mq = request.message_queue
        bad = self._mq_problem(mq)
        if bad is not None:
            yield s.PullMessageResponse(status=status(C.TOPIC_NOT_FOUND if "topic" in bad[:6] else C.BAD_REQUEST, bad))
            return
        poll = dur_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else 0
        remaining = context.time_remaining()
        if remaining is not None:
            poll = min(poll, max(0, int(remaining * 1000) - 1500))
        expr = request.filter_expression
        ext = {"consumerGroup": request.group.name, "topic": mq.topic.name, "queueId": str(mq.id),
               "queueOffset": str(max(request.offset, 0)), "maxMsgNums": str(min(max(request.batch_size, 1), 32)),
               "sysFlag": str(0x4 | (0x2 if poll > 0 else 0)), "commitOffset": "0",
               "suspendTimeoutMillis": str(max(0, min(poll, 30_000))), "subscription": expr.expression or "*",
               "subVersion": "0", "expressionType": "SQL92" if expr.type == d.SQL else "TAG"}
        resp = await self._call(peer, RequestCode.PULL_MESSAGE, ext)
        if resp is None:
            yield s.PullMessageResponse(status=status(C.INTERNAL_SERVER_ERROR, "no answer from the broker"))
            return
        nxt = int(resp.ext.get("nextBeginOffset") or request.offset)
        if resp.code == ResponseCode.SUCCESS:
            yield s.PullMessageResponse(status=status(C.OK))
            for m in decode_messages(resp.body or b""):
                yield s.PullMessageResponse(message=self.to_message(m))
        elif resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            yield s.PullMessageResponse(status=status(C.MESSAGE_NOT_FOUND, "no new message"))
        elif resp.code == ResponseCode.PULL_OFFSET_MOVED:
            yield s.PullMessageResponse(status=status(C.ILLEGAL_OFFSET, f"offset {request.offset} moved to {nxt}"))
        else:
            yield s.PullMessageResponse(status=from_remoting(resp))
            return
        yield s.PullMessageResponse(next_offset=nxt)

    async def UpdateOffset(self, request: s.UpdateOffsetRequest, context: Any) -> s.UpdateOffsetResponse:  # noqa: N802
        peer = self._peer(context)
        if peer is None:
            return s.UpdateOffsetResponse(status=status(C.CLIENT_ID_REQUIRED, "x-mq-client-id is required"))
        mq = request.message_queue
        bad = self._mq_problem(mq)
        if bad is not None:
            return s.UpdateOffsetResponse(status=status(C.BAD_REQUEST, bad))
        if request.offset < 0:
            return s.UpdateOffsetResponse(status=status(C.ILLEGAL_OFFSET, f"offset {request.offset} < 0"))
        resp = await self._call(peer, RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": request.group.name, "topic": mq.topic.name, "queueId": str(mq.id),
            "commitOffset": str(request.offset)})
        return s.UpdateOffsetResponse(status=from_remoting(resp))

    async def GetOffset(self, request: s.GetOffsetRequest, context: Any) -> s.GetOffsetResponse:  # noqa: N802
        peer = self._peer(context)
        if peer is None:
            return s.GetOffsetResponse(status=status(C.CLIENT_ID_REQUIRED, "x-mq-client-id is required"))
        mq = request.message_queue
        bad = self._mq_problem(mq)
        if bad is not None:
            return s.GetOffsetResponse(status=status(C.BAD_REQUEST, bad))
        resp = await self._call(peer, RequestCode.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": request.group.name, "topic": mq.topic.name, "queueId": str(mq.id)})
        if resp is not None and resp.code == ResponseCode.QUERY_NOT_FOUND:
            return s.GetOffsetResponse(status=status(C.OFFSET_NOT_FOUND, resp.remark or "no committed offset"))
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return s.GetOffsetResponse(status=from_remoting(resp))
        return s.GetOffsetResponse(status=status(C.OK), offset=int(resp.ext.get("offset") or 0))

    async def QueryOffset(self, request: s.QueryOffsetRequest, context: Any) -> s.QueryOffsetResponse:  # noqa: N802
        """The queue's first or next offset, or the offset of a time (BEGINNING, END, TIMESTAMP)."""
        peer = self._peer(context)
        if peer is None:
            return s.QueryOffsetResponse(status=status(C.CLIENT_ID_REQUIRED, "x-mq-client-id is required"))
        mq = request.message_queue
        bad = self._mq_problem(mq)
        if bad is not None:
            return s.QueryOffsetResponse(status=status(C.BAD_REQUEST, bad))
        ext = {"topic": mq.topic.name, "queueId": str(mq.id)}
        policy = request.query_offset_policy
        if policy == d.TIMESTAMP:
            if not request.HasField("timestamp"):
                return s.QueryOffsetResponse(status=status(C.BAD_REQUEST, "TIMESTAMP needs a timestamp"))
            code, ext["timestamp"] = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, str(ms_of(request.timestamp))
        else:
            code = RequestCode.GET_MAX_OFFSET if policy == d.END else RequestCode.GET_MIN_OFFSET
        resp = await self._call(peer, code, ext)
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return s.QueryOffsetResponse(status=from_remoting(resp))
        return s.QueryOffsetResponse(status=status(C.OK), offset=int(resp.ext.get("offset") or 0))

    def to_message(self, m: MessageExt, handle: str = "", invisible: int = 0) -> d.Message:
        props = m.properties
        sp = d.SystemProperties(
            message_id=props.get("UNIQ_KEY") or m.msg_id or "",
            body_digest=d.Digest(type=d.MD5, checksum=hashlib.md5(m.body).hexdigest().upper()),  # noqa: S324 - as the proxy
            body_encoding=d.IDENTITY,
            born_timestamp=ts(m.born_timestamp), born_host=m.born_host.rpartition(":")[0] or m.born_host,
            store_timestamp=ts(m.store_timestamp), store_host=m.store_host,
            queue_id=m.queue_id, queue_offset=m.queue_offset, delivery_attempt=m.reconsume_times + 1)
        if props.get("TAGS"):
            sp.tag = props["TAGS"]
        if props.get("KEYS"):
            sp.keys.extend(k for k in props["KEYS"].split(" ") if k)
        if props.get("__SHARDINGKEY"):
            sp.message_group = props["__SHARDINGKEY"]
            sp.message_type = d.FIFO
        elif props.get("TIMER_DELIVER_MS") or props.get("TIMER_OUT_MS"):
            sp.message_type = d.DELAY
            sp.delivery_timestamp.CopyFrom(ts(int(props.get("TIMER_DELIVER_MS") or props["TIMER_OUT_MS"])))
        elif props.get("TRAN_MSG") == "true":
            sp.message_type = d.TRANSACTION
        else:
            sp.message_type = d.NORMAL
        if handle:
            sp.receipt_handle = handle
            sp.invisible_duration.CopyFrom(duration_pb2.Duration(seconds=invisible // 1000))
        user = {k: v for k, v in props.items() if k not in SYSTEM_KEYS}
        return d.Message(topic=d.Resource(name=props.get("REAL_TOPIC") or m.topic), user_properties=user,
                         system_properties=sp, body=m.body)

    @staticmethod
    def _handle_parts(handle: str) -> list[str] | None:
        parts = handle.split(" ")
        return parts if len(parts) == 8 and all(_INT.fullmatch(parts[i]) for i in (0, 1, 2, 3, 6, 7)) else None

    async def AckMessage(self, request: s.AckMessageRequest, context: Any) -> s.AckMessageResponse:  # noqa: N802
        peer = self._peer(context)
        if peer is None:
            return s.AckMessageResponse(status=status(C.CLIENT_ID_REQUIRED, "x-mq-client-id is required"))
        results = []
        now = time.time() * 1000
        group, topic = request.group.name, request.topic.name
        for e in request.entries:
            parts = self.unseal(group, topic, e.receipt_handle)
            if parts is not None:  # an auto-renewed receipt: the newest one acks it
                parts = self.renewer.take(peer, group, e.message_id, e.receipt_handle) or parts
            if parts is None:
                st = status(C.INVALID_RECEIPT_HANDLE, NOT_OURS)
            elif now >= int(parts[1]) + int(parts[2]):
                st = status(C.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
            else:
                resp = await self._call(peer, ACK_MESSAGE, {
                    "consumerGroup": group, "topic": topic, "queueId": parts[6],
                    "extraInfo": " ".join(parts), "offset": parts[7]})
                st = from_remoting(resp)
            results.append(s.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=st))
        codes = {r.status.code for r in results}
        top = results[0].status if len(codes) == 1 and results else status(C.MULTIPLE_RESULTS, "multiple results")
        return s.AckMessageResponse(status=top, entries=results)

    async def ChangeInvisibleDuration(self, request: s.ChangeInvisibleDurationRequest, context: Any) -> Any:  # noqa: N802
        peer = self._peer(context)
        if peer is None:
            return s.ChangeInvisibleDurationResponse(status=status(C.CLIENT_ID_REQUIRED, "x-mq-client-id is required"))
        group, topic = request.group.name, request.topic.name
        parts = self.unseal(group, topic, request.receipt_handle)
        if parts is None:
            return s.ChangeInvisibleDurationResponse(status=status(C.INVALID_RECEIPT_HANDLE, NOT_OURS))
        parts = self.renewer.take(peer, group, request.message_id, request.receipt_handle) or parts
        if time.time() * 1000 >= int(parts[1]) + int(parts[2]):
            return s.ChangeInvisibleDurationResponse(status=status(C.INVALID_RECEIPT_HANDLE, "receipt handle is expired"))
        invisible = dur_ms(request.invisible_duration)
        if not 0 <= invisible <= 12 * 3_600_000:
            return s.ChangeInvisibleDurationResponse(status=status(C.ILLEGAL_INVISIBLE_TIME, "0 .. 12 h"))
        st, parts = await self._change_invisible(peer, group, topic, parts, invisible)
        if parts is None:
            return s.ChangeInvisibleDurationResponse(status=st)
        return s.ChangeInvisibleDurationResponse(status=st, receipt_handle=self.seal(group, topic, " ".join(parts)))

    async def _renew_change(self, peer: GrpcPeer, group: str, topic: str, parts: list[str], invisible: int,
                            account: Any) -> tuple[list[str] | None, bool]:
        """renew.py's CHANGE_INVISIBLETIME, signed as the account that received the message."""
        token = ACCOUNT.set(account)
        try:
            st, fresh = await self._change_invisible(peer, group, topic, parts, invisible)
        finally:
            ACCOUNT.reset(token)
        return fresh, st.code != C.INVALID_RECEIPT_HANDLE

    def _online(self, peer: GrpcPeer, group: str) -> bool:
        """The client still consumes for ``group`` (the proxy's ``clientIsOffline``, negated)."""
        info = self.broker.consumers.get(group)
        return not peer.closed and info is not None and peer in info.channels

    async def _change_invisible(self, peer: GrpcPeer, group: str, topic: str, parts: list[str],
                                invisible: int) -> tuple[d.Status, list[str] | None]:
        """The broker's CHANGE_INVISIBLETIME on a verified receipt: its status and the new receipt's
        fields (None when the broker refused: the message is no longer this receipt's)."""
        resp = await self._call(peer, CHANGE_INVISIBLE, {
            "consumerGroup": group, "topic": topic, "queueId": parts[6],
            "extraInfo": " ".join(parts), "offset": parts[7], "invisibleTime": str(invisible)})
        st = from_remoting(resp)
        if resp is None or st.code != C.OK:
            return st, None
        fresh = list(parts)
        fresh[1], fresh[2] = resp.ext.get("popTime", parts[1]), resp.ext.get("invisibleTime", parts[2])
        return st, fresh

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        """The received message into %DLQ%<group>, then acked. The gate has checked the names and the
        caller's SUB on group and topic; the receipt must be one this broker issued for them, and the
        broker's POP state must still hold it: it is claimed first (its invisible time renewed, so
        the receipt cannot be used twice), copied, then acked with the claim."""
        R = s.ForwardMessageToDeadLetterQueueResponse  # noqa: N806
        peer = self._peer(context)
        if peer is None:
            return R(status=status(C.CLIENT_ID_REQUIRED, "x-mq-client-id is required"))
        group, topic = request.group.name, request.topic.name
        parts = self.unseal(group, topic, request.receipt_handle)
        if parts is None:
            return R(status=status(C.INVALID_RECEIPT_HANDLE, NOT_OURS))
        parts = self.renewer.take(peer, group, request.message_id, request.receipt_handle) or parts
        if time.time() * 1000 >= int(parts[1]) + int(parts[2]):
            return R(status=status(C.INVALID_RECEIPT_HANDLE, "receipt handle is expired"))
        qid, off = int(parts[6]), int(parts[7])
        res = self.broker.store.get_messages(group, topic, qid, off, 1)
        if not res.messages or res.queue_offsets[0] != off:
            return R(status=status(C.INVALID_RECEIPT_HANDLE, "message gone"))
        st, claim = await self._change_invisible(peer, group, topic, parts, DLQ_CLAIM_MS)
        if claim is None:
            return R(status=st if st.code != C.OK else status(C.INVALID_RECEIPT_HANDLE, "receipt no longer valid"))
        from rmq.kernel import record_of  # noqa: PLC0415 - the rare path

        [msg] = decode_messages(bytes(res.messages[0]))
        dlq = dlq_topic(group)
        self.broker.ensure_topic(dlq, 1, 6)
        put = await self.broker.put(record_of(msg, dlq, 0, {"DLQ_ORIGIN_TOPIC": topic,
                                                           "DLQ_ORIGIN_MESSAGE_ID": msg.properties.get("UNIQ_KEY", "")}))
        if not put.ok:  # the claim runs out and the message is delivered again
            log.warning("gRPC: %s/%d/%d not stored into %s: %s", topic, qid, off, dlq, put.status.name)
            return R(status=status(C.INTERNAL_SERVER_ERROR, "the dead letter queue did not take the message"))
        resp = await self._call(peer, ACK_MESSAGE, {"consumerGroup": group, "topic": topic, "queueId": parts[6],
                                                    "extraInfo": " ".join(claim), "offset": parts[7]})
        return R(status=from_remoting(resp))

    async def SyncLiteSubscription(self, request: Any, context: Any) -> Any:  # noqa: N802
        """RocketMQ 5.4's lite topics are not served: NOT_IMPLEMENTED, as a status the SDK reads."""
        return s.SyncLiteSubscriptionResponse(status=status(C.NOT_IMPLEMENTED, "lite subscriptions are not served"))


_INT = re.compile(r"-?[0-9]{1,19}")
_PERMS = {6: d.READ_WRITE, 4: d.READ, 2: d.WRITE, 0: d.NONE}  # RocketMQ's perm bits -> the proxy's Permission


def json_bytes(obj: Any) -> bytes:
    return json.dumps(obj).encode()
