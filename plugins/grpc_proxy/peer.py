"""The gRPC clients as the broker sees them: ``GrpcPeer`` stands in for a remoting connection (the
broker's processors register it and call it back: running info, consume directly, transaction
checks, all relayed over the client's Telemetry stream), and ``PeerTable`` keeps one per client id
(``x-mq-client-id``), bounded against a stranger inventing ids."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from rmq.plugins.grpc_proxy.common import C, json_bytes
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.message import MessageExt, decode_messages

log = logging.getLogger("rmq.grpc")

MAX_PEERS = 10_000  # gRPC clients (x-mq-client-id) kept at once
MAX_CLIENT_ID = 256  # characters of x-mq-client-id (an SDK's is host@pid@index@..., well under 100)


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


class PeerTable:
    """One ``GrpcPeer`` per client id; ``resolve_peer`` is front.py's real client address (behind its
    splice), ``convert`` and ``on_check`` are given to every new peer."""

    def __init__(self, convert: Callable[[MessageExt], d.Message],
                 on_check: Callable[[str, str, tuple[int, int, str]], None]) -> None:
        self.table: dict[str, GrpcPeer] = {}
        self.resolve_peer: Callable[[str], tuple[str, int] | None] | None = None
        self._convert = convert
        self._on_check = on_check

    def get(self, context: Any) -> GrpcPeer | None:
        """The caller's peer (made on its first call), None without a usable client id."""
        md = dict(context.invocation_metadata() or ())
        cid = md.get("x-mq-client-id") or ""
        if not cid or len(cid) > MAX_CLIENT_ID:
            return None
        p = self.table.get(cid)
        if p is None or p.closed:
            raw = context.peer() or ""
            real = self.resolve_peer(raw) if self.resolve_peer is not None else None
            p = GrpcPeer(cid, f"ipv4:{real[0]}:{real[1]}" if real else raw)
            p.convert = self._convert
            p.on_check = self._on_check
            if cid in self.table or self._room():
                self.table[cid] = p
            # else: every kept peer holds a stream; this one serves its call and is not kept
        return p

    def _room(self) -> bool:
        """Room for one more peer: a stranger inventing client ids must not grow the table without
        bound, so past MAX_PEERS the oldest peer without a Telemetry stream goes (closed: the broker
        forgets its registrations; the client's next call makes a new one)."""
        if len(self.table) < MAX_PEERS:
            return True
        for cid, old in self.table.items():
            if old.closed or old.streams == 0:
                del self.table[cid]
                old.close()
                return True
        return False

    def forget(self, context: Any) -> None:
        """The client said it terminates: its peer is closed (the broker drops its registrations)."""
        md = dict(context.invocation_metadata() or ())
        peer = self.table.pop(md.get("x-mq-client-id") or "", None)
        if peer is not None:
            peer.close()

    def client_ip(self, context: Any) -> str:
        """The client's IP (behind front.py's splice, the real one), for white lists and logs."""
        raw = context.peer() or ""
        real = self.resolve_peer(raw) if self.resolve_peer is not None else None
        if real is not None:
            return real[0]
        host = raw.split(":", 1)[1] if raw.startswith(("ipv4:", "ipv6:")) else raw
        return host.rpartition(":")[0].strip("[]") or host

    def close_all(self) -> None:
        for peer in list(self.table.values()):
            peer.close()
