"""What a TCP connection is apart from how its bytes move: the one core of both transports.

Two transports carry remoting frames: ``aioconn.AsyncioConnection`` (an ``asyncio.Protocol``: the
server on asyncio, and the plaintext client there) and ``connection.TcpConnection`` (anyio streams:
TLS clients and the other anyio backends). The sans-IO :class:`~rmq.protocol.session.Session`
already owns frames, opaques and pending requests; this core owns the rest that does not depend
on the transport, once: identity and ``repr``, turning a read's events into requests, wake-ups
and protocol-error answers, serving a request (handler, error answer, logging), oneway and
response writes, a finished request's outcome, closing (every waiter woken) and the close
callbacks.

A request that was read is served, whoever closes the connection afterwards and however: a
producer that sends oneway requests and closes at once loses none of them (RocketMQ's broker
processes every request it decoded; only the answer's write fails). Only a local decision to
drop the connection (``aclose``, a server's shutdown) cancels the requests still running. The
work that outlives the peer stays bounded: it is what one connection had read, and the server
counts the connection against its ``max_connections`` until that work is done.

Every port faces strangers (DESIGN rule 9): nothing a peer sends and no failure here escapes
the connection; a bad header with a known opaque is answered, an undecodable stream closes the
connection; log lines are rate-limited and name the peer.

A transport supplies what differs (see :class:`ConnectionCore`). The hot path stays a direct
one: ``_serve`` awaits the handler itself and writing its answer is a plain call; only a write
that must wait for the peer to read awaits anything more.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

from rmq.kernel import RateLimitedLog
from rmq.protocol.command import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    HeaderError,
    RemotingClosedError,
    RemotingCommand,
    RemotingDecodeError,
    RemotingTimeoutError,
)
from rmq.protocol.dispatch import Router, error_response
from rmq.protocol.names import InvalidNameError, printable
from rmq.protocol.session import (
    ANSWERED,
    EXPIRED,
    UNDECODABLE,
    Oneway,
    ProtocolError,
    Request,
    Response,
    Session,
)

if TYPE_CHECKING:
    from rmq.kernel import RemotingConfig, RequestHandler

log = logging.getLogger("rmq.remoting")

WRITE_HIGH_WATER = 4 * 1024 * 1024  # writers wait for the peer to read beyond this many buffered bytes
_REFUSALS = (HeaderError, InvalidNameError)  # raised on purpose with the peer's answer: not worth a warning
_NO_HANDLER = Router().dispatch  # no handler given: every request is answered REQUEST_CODE_NOT_SUPPORTED


def address(get: Callable[[], Any]) -> tuple[str, int]:
    """The socket address ``get()`` returns as (host, port); ("?", 0) when the peer already reset
    the socket (getpeername fails then)."""
    try:
        raw = get()
        if isinstance(raw, tuple) and len(raw) >= 2:
            return str(raw[0]), int(raw[1])
        return ("?", 0) if raw is None else (str(raw), 0)
    except Exception:  # noqa: BLE001 - OSError(ENOTCONN) and friends: the connection is already gone
        return ("?", 0)


def no_delay(get_socket: Callable[[], Any]) -> None:
    """Nagle off on a TCP socket: a request or answer leaves when written, not with the next one."""
    try:
        sock = get_socket()
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except Exception:  # noqa: BLE001 - reset already, or not a socket: nothing to tune
        pass


class ConnectionCore:
    """A peer connection but for its transport; with one, satisfies ``rmq.kernel.hookspecs.remoting.Connection``.

    A transport subclass provides:

    * ``_wake_token(token)``: wake a waiter (a request's, given to the session, or ``_drained``);
    * ``_start_requests(cmds)``: give the requests of one read their task(s), each running ``_serve``;
    * ``_put(head, body) -> bool``: write (or queue) one frame; True when the writer must then await
      ``_wait_writable()`` (the transport flushes there, or the peer is slow to read);
    * ``_respond(resp) -> bool``: the same for a handler's answer (``_put`` of its encoding, unless
      the transport has a faster way);
    * ``_answer_refused(resp)``: send the answer the session built to a request it refused, from
      synchronous code;
    * ``_cancel_tasks()``: cancel the request tasks (a local close: see :meth:`_abandon`);
    * ``send_request``, ``aclose`` and ``wait_closed``, which depend on how it times out and closes.
    """

    def __init__(
        self,
        handler: RequestHandler | None,
        *,
        conn_id: int,
        max_frame_size: int,
        idle_timeout: float,
        name: str = "remoting",
        rlog: RateLimitedLog | None = None,
    ) -> None:
        self.id = conn_id
        self.name = name
        self.remote_addr: tuple[str, int] = ("?", 0)
        self.local_addr: tuple[str, int] = ("?", 0)
        self.attributes: dict[str, Any] = {}
        self._handler: RequestHandler = handler if handler is not None else _NO_HANDLER
        self._rlog = rlog if rlog is not None else RateLimitedLog(log)
        self._session = Session(max_frame_size)
        self._idle_timeout = idle_timeout
        self._last_activity = time.monotonic()
        self._wbuf: list[bytes] = []
        self._drained: Any = None  # a waiter for writers while the peer is slow to read
        self._closed = False
        self._abandoned = False  # closed locally: requests read but not served yet are dropped
        self._close_reason: str | None = None
        self._callbacks: list[Callable[[Any], None]] = []
        self._finished = False  # the transport is gone and the close callbacks ran

    @classmethod
    def for_config(
        cls, *transport: Any, handler: RequestHandler | None, config: RemotingConfig, conn_id: int,
        rlog: RateLimitedLog,
    ) -> Self:
        """A connection with a server's or client's settings (both ends build theirs this way);
        ``transport`` is what the subclass's constructor takes before the handler."""
        return cls(*transport, handler, conn_id=conn_id, max_frame_size=config.max_frame_size,
                   idle_timeout=config.idle_timeout, name=config.name, rlog=rlog)

    # ------------------------------------------------------------------ what a transport provides

    @staticmethod
    def _wake_token(token: Any) -> None:
        raise NotImplementedError

    def _start_requests(self, cmds: list[RemotingCommand]) -> None:
        raise NotImplementedError

    def _put(self, head: bytes, body: bytes) -> bool:
        raise NotImplementedError

    async def _wait_writable(self) -> None:
        raise NotImplementedError

    def _respond(self, resp: RemotingCommand) -> bool:
        head, body = self._session.send_response(resp)
        return self._put(head, body)

    def _answer_refused(self, resp: RemotingCommand) -> None:
        raise NotImplementedError

    def _cancel_tasks(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ public API

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def peer(self) -> str:
        return f"{self.remote_addr[0]}:{self.remote_addr[1]}"

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} #{self.id} {self.name} {self.peer} {state}>"

    def on_close(self, callback: Callable[[Any], None]) -> None:
        if self._finished:
            callback(self)
        else:
            self._callbacks.append(callback)

    async def send_oneway(self, cmd: RemotingCommand) -> None:
        self._check_open()
        head, body = self._session.send_oneway(cmd)
        if self._put(head, body):
            await self._wait_writable()

    async def send_response(self, cmd: RemotingCommand) -> None:
        """Write a response; dropped quietly when the peer is gone (a held pull outlived it)."""
        if not self._closed:
            head, body = self._session.send_response(cmd)
            try:
                if self._put(head, body):
                    await self._wait_writable()
                return
            except RemotingClosedError:
                pass
        log.debug("%s: dropping response opaque %d for closed %s", self.name, cmd.opaque, self.peer)

    def _check_open(self) -> None:
        if self._closed:
            raise RemotingClosedError(f"connection to {self.peer} is closed")

    def _outcome(self, pending: Any, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """The response of a finished request, or the error saying why there is none."""
        state = pending.state
        if state is ANSWERED:
            return pending.response  # type: ignore[no-any-return]
        opaque = pending.opaque
        if state is UNDECODABLE:
            remark = pending.response.remark if pending.response is not None else None
            raise RemotingDecodeError(
                f"response to request code {cmd.code} (opaque {opaque}) from {self.peer}"
                f" could not be decoded: {remark}"
            )
        if state is EXPIRED:
            raise RemotingTimeoutError(
                f"request code {cmd.code} (opaque {opaque}) to {self.peer} got no response in {timeout:g}s"
            )
        raise RemotingClosedError(  # woken by close
            f"connection to {self.peer} closed before the response to request code {cmd.code}"
            f" (opaque {opaque}): {self._close_reason or 'closed'}"
        )

    # ------------------------------------------------------------------ reading and serving

    def _dispatch(self, data: bytes) -> bool:
        """Feed the session: the requests of one read get their task(s), answered requests are
        woken. False: close."""
        reqs: list[RemotingCommand] | None = None
        wake = self._wake_token
        for ev in self._session.receive_data(data):
            t = type(ev)
            if t is Request or t is Oneway:
                if reqs is None:
                    reqs = [ev.cmd]  # type: ignore[union-attr]
                else:
                    reqs.append(ev.cmd)  # type: ignore[union-attr]
            elif t is Response:
                wake(ev.pending.token)  # type: ignore[union-attr]
            elif not self._on_protocol_error(ev):  # type: ignore[arg-type]
                if reqs is not None:
                    self._start_requests(reqs)
                return False
        if reqs is not None:
            self._start_requests(reqs)
        return True

    def _on_protocol_error(self, ev: ProtocolError) -> bool:
        """Log (rate-limited) and act on what the session reported: our request's answer was
        undecodable (wake its waiter), a whole request had a bad header (answer it when the session
        could). False: the stream cannot be followed any more, close."""
        if not ev.recoverable:
            self._close_reason = f"bad frame: {ev.reason}"
            self._rlog.warning(
                "bad-frame:" + ev.kind, "%s: closing connection #%d from %s: bad frame: %s",
                self.name, self.id, self.peer, printable(ev.reason),
            )
            return False
        if ev.pending is not None:
            self._wake_token(ev.pending.token)
            return True
        cmd = ev.cmd
        if cmd is not None and not cmd.flag & RESPONSE_FLAG:
            self._rlog.warning(
                "bad-header", "%s: request from %s (connection #%d, opaque %d) refused: %s", self.name,
                self.peer, self.id, cmd.opaque, printable(ev.reason),
            )
            if ev.response is not None:
                self._answer_refused(ev.response)
            return True
        log.debug("%s: from %s: %s", self.name, self.peer, printable(ev.reason))
        return True

    async def _serve(self, cmd: RemotingCommand) -> None:
        """One request: the handler's answer (or its failure's) is written back; whatever fails stays here."""
        try:
            try:
                resp = await self._handler(self, cmd)
            except Exception as exc:  # noqa: BLE001 - a handler's failure is this request's answer
                if not isinstance(exc, _REFUSALS):
                    self._rlog.warning(
                        "request-failed", "%s: request code %d from %s failed: %s", self.name, cmd.code,
                        self.peer, printable(repr(exc)),
                    )
                resp = error_response(cmd, exc)
            if resp is None or cmd.flag & ONEWAY_FLAG or self._closed:
                return
            resp.opaque = cmd.opaque
            resp.flag |= RESPONSE_FLAG
            if self._respond(resp):
                await self._wait_writable()
        except (RemotingClosedError, asyncio.CancelledError):
            pass  # the connection went away: nobody is left to answer
        except Exception as exc:  # noqa: BLE001 - e.g. a response that cannot be encoded
            self._rlog.error(
                "serve-failed", "%s: serving request code %d from %s failed: %s", self.name, cmd.code,
                self.peer, printable(repr(exc)),
            )
            log.debug("request failure", exc_info=True)

    def _internal_error(self, exc: Exception) -> None:
        """A bug or a socket oddity: logged, and this connection (only) closes for it."""
        self._close_reason = self._close_reason or f"internal error: {exc!r}"
        self._rlog.error(
            "internal", "%s: connection #%d with %s failed: %s", self.name, self.id, self.peer,
            printable(repr(exc)),
        )
        log.debug("%s: connection #%d failure", self.name, self.id, exc_info=True)

    def _idle_expired(self) -> str:
        """Log that the idle timeout closes this connection; the close reason."""
        idle = self._idle_timeout
        self._rlog.info("idle", "%s: closing connection #%d with %s idle for %gs", self.name, self.id,
                        self.peer, idle)
        return f"idle for {idle:g}s"

    # ------------------------------------------------------------------ closing

    def _close(self, reason: str) -> None:
        """Mark closed and wake every waiter (synchronous, idempotent). Requests already read
        still run to their end; their answers are dropped."""
        if not self._closed:
            self._closed = True
            self._close_reason = self._close_reason or reason
        wake = self._wake_token
        for pending in self._session.close():
            wake(pending.token)
        drained, self._drained = self._drained, None
        if drained is not None:
            wake(drained)

    def _abandon(self, reason: str) -> None:
        """Close by a local decision (``aclose``, a server's shutdown): the requests still running
        are cancelled as well, and no request of a read not yet served starts."""
        self._abandoned = True
        self._close(reason)
        self._cancel_tasks()

    def _finish(self) -> None:
        """The transport is gone: run the close callbacks, once; one listener's bug skips no other."""
        if self._finished:
            return
        self._finished = True
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            try:
                cb(self)
            except Exception as exc:  # noqa: BLE001 - one listener's bug must not skip the others
                self._rlog.error("close-callback", "%s: close callback of %s failed: %s", self.name,
                                 self.peer, printable(repr(exc)))
                log.debug("close callback failure", exc_info=True)
