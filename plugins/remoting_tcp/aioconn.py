"""The server side of a connection on ``asyncio.Protocol``: the per-byte, per-request path kept lean.

Why not anyio streams here: a stream read wakes a reader task per chunk and every
``send`` is a syscall plus an anyio checkpoint. On a protocol the event loop calls
``data_received`` directly, the sans-IO :class:`~rmq.protocol.session.Session` turns the
bytes into events, the requests of one read share one plain asyncio task until one of them
suspends (then the rest move to a new task, so a held long-poll never delays other
requests), and the responses produced in one loop iteration leave in one
``transport.write`` (one flush scheduled with ``call_soon`` when the first is queued; a read
whose requests all completed at once writes its answers right away, before the turn's other
callbacks). A handler may return a ``HeldAnswer`` (a SYNC_FLUSH send): it waits on the store's
``durable`` watermark as a plain waiter object and is queued by the flush that covers it, so
no task is parked per durable send.
Frames are written in call order. Flow control: above the transport's high-water mark
reading pauses (a peer that does not read its answers stops being served) and writers
wait until it drains.

The supervision rules of :mod:`rmq.plugins.remoting_tcp.connection` hold unchanged:
nothing a peer sends and no failure here escapes this connection; a bad header with a
known opaque is answered, an undecodable stream closes the connection; log lines are
rate-limited. Used by :class:`~rmq.plugins.remoting_tcp.server.TcpRemotingServer` when
it runs on asyncio (uvloop included); other backends keep the anyio ``TcpConnection``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, cast

from rmq.kernel import RateLimitedLog
from rmq.plugins.remoting_tcp.connection import _NO_HANDLER, _REFUSALS, WRITE_HIGH_WATER, ConnectionCommon
from rmq.protocol.command import (
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    HeldAnswer,
    RemotingClosedError,
    RemotingCommand,
)
from rmq.protocol.dispatch import error_response
from rmq.protocol.names import printable
from rmq.protocol.session import (
    Oneway,
    ProtocolError,
    Request,
    Response,
    Session,
)

if TYPE_CHECKING:
    from rmq.kernel import RemotingConfig, RequestHandler

log = logging.getLogger("rmq.remoting")

# Longest run of one read's requests served back to back before the rest yields to the loop: a
# 500-message batch takes a few ms, and a peer pipelining dozens would otherwise stall every
# other peer for a sizeable part of waitTimeMillsInSendQueue (200 ms), tripping flow control.
TURN_BUDGET = 0.005


def _wake(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


def _sockname(transport: asyncio.BaseTransport, key: str) -> tuple[str, int]:
    """The transport's address; ("?", 0) when the peer already reset the socket."""
    try:
        raw = transport.get_extra_info(key)
        if isinstance(raw, tuple) and len(raw) >= 2:
            return str(raw[0]), int(raw[1])
        return ("?", 0) if raw is None else (str(raw), 0)
    except Exception:  # noqa: BLE001 - gone already
        return ("?", 0)


class _Resume:
    """Awaiting it continues a coroutine already stepped by hand, which last yielded ``yielded``:
    what ``await coro`` would have done from there (sends, throws, cancellation forwarded)."""

    __slots__ = ("coro", "yielded")

    def __init__(self, coro: Coroutine[Any, Any, None], yielded: Any) -> None:
        self.coro = coro
        self.yielded = yielded

    def __await__(self) -> Generator[Any, Any, None]:
        coro = self.coro
        yielded = self.yielded
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - cancellation included: forwarded, not handled
                try:
                    yielded = coro.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    yielded = coro.send(sent)
                except StopIteration:
                    return


class _Release:
    """Future-like waiter on a ``HeldAnswer``'s watermark: queues the answer when woken (by the
    advance that reaches it, or by its timeout: then it leaves with ``late_code``)."""

    __slots__ = ("conn", "resp", "fired")

    def __init__(self, conn: AsyncioConnection, resp: HeldAnswer) -> None:
        self.conn = conn
        self.resp = resp
        self.fired = False

    def done(self) -> bool:
        return self.fired

    def set_result(self, _: object) -> None:
        if self.fired:
            return
        self.fired = True
        conn, resp = self.conn, self.resp
        if resp.mark.value < resp.at:
            resp.code = resp.late_code
        if conn._closed:
            return
        try:
            head, body = conn._session.send_response(resp)
            conn._queue(head, body)
        except Exception as exc:  # noqa: BLE001 - called from a flush round: never let it fail
            conn._rlog.error("held-answer", "%s: answering %s failed: %s", conn.name, conn.peer,
                             printable(repr(exc)))


class AsyncioConnection(ConnectionCommon, asyncio.Protocol):
    """A served peer connection; satisfies ``rmq.kernel.hookspecs.remoting.Connection``."""

    holds_answers = True  # a handler may return a HeldAnswer (see _serve)

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
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._wbuf: list[bytes] = []
        self._flush_scheduled = False
        self._paused = False
        self._drained: asyncio.Future[None] | None = None
        self._closed = False
        self._close_reason: str | None = None
        self._callbacks: list[Callable[[Any], None]] = []
        self._tasks: dict[int, asyncio.Task[None]] = {}  # request tasks, cancelled on close
        self._seq = 0
        self._split = False  # the last request served suspended: a task per request (see _serve_many)
        self._idle_handle: asyncio.TimerHandle | None = None
        self._done = self._loop.create_future()
        self.write_through = False  # requests written at once (the client side), not gathered per turn

    @classmethod
    def for_config(cls, handler: RequestHandler | None, config: RemotingConfig, conn_id: int,
                   rlog: RateLimitedLog) -> AsyncioConnection:
        return cls(handler, conn_id=conn_id, max_frame_size=config.max_frame_size,
                   idle_timeout=config.idle_timeout, name=config.name, rlog=rlog)

    # ------------------------------------------------------------------ public API

    def on_close(self, callback: Callable[[Any], None]) -> None:
        if self._done.done():
            callback(self)
        else:
            self._callbacks.append(callback)

    async def send_request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:  # noqa: ASYNC109
        if self._closed:
            raise RemotingClosedError(f"connection to {self.peer} is closed")
        woken: asyncio.Future[None] = self._loop.create_future()
        now = time.monotonic()
        pending, head, body = self._session.send_request(cmd, timeout, now, woken)
        timer = self._loop.call_later(max(timeout, 0), self._expire_at, now + timeout)
        try:
            if self.write_through:
                self._write_now(head, body)
            else:
                self._queue(head, body)
            await woken
        finally:
            timer.cancel()
            self._session.discard(pending)  # cancelled or failed: a late response is dropped
        return self._outcome(pending, cmd, timeout)

    async def send_oneway(self, cmd: RemotingCommand) -> None:
        if self._closed:
            raise RemotingClosedError(f"connection to {self.peer} is closed")
        head, body = self._session.send_oneway(cmd)
        self._queue(head, body)
        if self._paused:
            await self._wait_drained()

    async def send_response(self, cmd: RemotingCommand) -> None:
        """Write a response; dropped quietly when the peer is gone (a held pull outlived it)."""
        if self._closed:
            log.debug("%s: dropping response opaque %d for closed %s", self.name, cmd.opaque, self.peer)
            return
        head, body = self._session.send_response(cmd)
        self._queue(head, body)
        if self._paused:
            await self._wait_drained()

    async def aclose(self) -> None:
        self._close("closed locally")
        if self._transport is not None:
            self._transport.close()  # what is queued still goes out; connection_lost finishes the rest

    def abort(self) -> None:
        """Close at once, dropping unsent bytes (server shutdown)."""
        self._close("closed locally")
        if self._transport is not None:
            self._transport.abort()

    async def wait_closed(self) -> None:
        """Return once the transport is gone and close callbacks ran."""
        await asyncio.shield(self._done)

    # ------------------------------------------------------------------ writing

    def _queue(self, head: bytes, body: bytes) -> None:
        """Append one frame; the first frame of a loop iteration schedules the one flush."""
        if self._closed:
            raise RemotingClosedError(f"connection to {self.peer} is closed")
        wbuf = self._wbuf
        wbuf.append(head)
        if body:
            wbuf.append(body)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _write_now(self, head: bytes, body: bytes) -> None:
        """A client's request leaves at once (a syscall each): requests spread over time keep the
        broker and the client working side by side, where frames gathered per loop turn make the
        two take turns (measured: 32 pipelined sends on one connection ran at ~60 % of the
        broker's core batched, ~95 % written through)."""
        if self._wbuf or self._flush_scheduled:  # keep call order behind frames already queued
            self._queue(head, body)
            return
        transport = self._transport
        if transport is None or transport.is_closing():
            raise RemotingClosedError(f"connection to {self.peer} is closed")
        try:
            transport.write(head + body if body else head)
        except Exception as exc:  # noqa: BLE001 - the transport failed: this connection only
            self._fail(f"write failed: {exc!r}")
            raise RemotingClosedError(f"write to {self.peer} failed: {exc!r}") from None
        self._last_activity = time.monotonic()

    def _flush(self) -> None:
        self._flush_scheduled = False
        chunks = self._wbuf
        if not chunks:
            return
        self._wbuf = []
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        try:
            transport.write(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        except Exception as exc:  # noqa: BLE001 - the transport failed: this connection only
            self._fail(f"write failed: {exc!r}")
            return
        self._last_activity = time.monotonic()

    async def _wait_drained(self) -> None:
        if self._drained is None:
            self._drained = self._loop.create_future()
        await asyncio.shield(self._drained)
        if self._closed:
            raise RemotingClosedError(f"connection to {self.peer} closed while writing")

    def pause_writing(self) -> None:
        """The peer reads slower than we answer: stop reading its requests until it catches up."""
        self._paused = True
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._paused = False
        drained, self._drained = self._drained, None
        _wake(drained)
        if self._transport is not None and not self._transport.is_closing() and not self._closed:
            self._transport.resume_reading()

    # ------------------------------------------------------------------ protocol callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods
        self._transport = transport = cast(asyncio.Transport, transport)
        self.remote_addr = _sockname(transport, "peername")
        self.local_addr = _sockname(transport, "sockname")
        try:
            sock = transport.get_extra_info("socket")
            if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except Exception:  # noqa: BLE001 - reset already: nothing to tune
            pass
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        if self._closed:  # aclosed before the transport existed
            transport.close()
        elif self._idle_timeout and self._idle_timeout > 0:
            self._idle_handle = self._loop.call_later(self._idle_timeout, self._idle_check)

    def data_received(self, data: bytes) -> None:
        self._last_activity = time.monotonic()
        try:
            if not self._dispatch(data):
                self._fail(self._close_reason or "bad frame")
        except Exception as exc:  # noqa: BLE001 - a bug or an oddity: this connection only
            self._close_reason = self._close_reason or f"internal error: {exc!r}"
            self._rlog.error(
                "internal", "%s: connection #%d with %s failed: %s", self.name, self.id, self.peer,
                printable(repr(exc)),
            )
            log.debug("%s: connection #%d failure", self.name, self.id, exc_info=True)
            self._fail(self._close_reason)

    def eof_received(self) -> bool:
        self._close_reason = self._close_reason or "peer closed"
        self._close(self._close_reason)
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            self._close_reason = self._close_reason or f"read failed: {exc!r}"
        self._close(self._close_reason or "closed")
        if self._idle_handle is not None:
            self._idle_handle.cancel()
            self._idle_handle = None
        self._wbuf = []
        self._transport = None
        if self._done.done():
            return
        self._done.set_result(None)
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            try:
                cb(self)
            except Exception as exc2:  # noqa: BLE001 - one listener's bug must not skip the others
                self._rlog.error("close-callback", "%s: close callback of %s failed: %s", self.name,
                                 self.peer, printable(repr(exc2)))
                log.debug("close callback failure", exc_info=True)

    # ------------------------------------------------------------------ serving

    def _dispatch(self, data: bytes) -> bool:
        """Feed the session: the requests of one read get their task(s), answered requests are
        woken. False: close."""
        reqs: list[RemotingCommand] | None = None
        for ev in self._session.receive_data(data):
            t = type(ev)
            if t is Request or t is Oneway:
                if reqs is None:
                    reqs = [ev.cmd]  # type: ignore[union-attr]
                else:
                    reqs.append(ev.cmd)  # type: ignore[union-attr]
            elif t is Response:
                _wake(ev.pending.token)  # type: ignore[union-attr]
            elif not self._on_protocol_error(ev):  # type: ignore[arg-type]
                if reqs is not None:
                    self._start_all(reqs, 0)
                return False
        if reqs is not None:
            self._start_all(reqs, 0)
        return True

    def _start_all(self, cmds: list[RemotingCommand], start: int) -> None:
        """One task for ``cmds[start:]``, or one per request while this peer's requests suspend."""
        n = len(cmds)
        if self._split:
            for i in range(start, n):
                self._start(cmds, i, i + 1)
        else:
            self._start(cmds, start, n)

    def _start(self, cmds: list[RemotingCommand], start: int, stop: int) -> None:
        seq = self._seq = self._seq + 1
        self._tasks[seq] = self._loop.create_task(self._serve_many(cmds, start, stop, seq))

    async def _serve_many(self, cmds: list[RemotingCommand], start: int, stop: int, seq: int) -> None:
        """Serve ``cmds[start:stop]`` in order in this one task: a task per request costs ~2 µs and
        most requests (an ASYNC_FLUSH send) never suspend. One that does keeps this task to the end,
        so its cancel scopes stay in the task that entered them, and the rest go on without it.

        Requests that suspend (a SYNC_FLUSH send waits for its group commit) want the old shape,
        every request of a read started in the same loop turn, so that all of them have appended
        before the flush round is decided: once one suspends, the rest of the read and the reads
        after it get a task per request, until a request completes without suspending.

        A read of heavy requests (a pipeline of 500-message batches) must not hold the loop for
        long: past ``TURN_BUDGET`` seconds the rest continues in a new task, behind the turn's
        other callbacks (other peers, the reput, the send flow control's clock)."""
        try:
            serve = self._serve
            t0 = time.monotonic()
            for i in range(start, stop):
                if self._closed:
                    return
                coro = serve(cmds[i])
                try:
                    yielded = coro.send(None)
                except StopIteration:
                    self._split = False
                    if i + 1 < stop and time.monotonic() - t0 > TURN_BUDGET:
                        self._start(cmds, i + 1, stop)
                        return
                    continue
                self._split = True
                if i + 1 < stop:
                    self._start_all(cmds, i + 1)
                await _Resume(coro, yielded)
                return
            if start == 0 and stop == len(cmds) and self._flush_scheduled:
                self._flush()  # every answer of this read is ready: out before the turn's other callbacks
        finally:
            self._tasks.pop(seq, None)

    def _on_protocol_error(self, ev: ProtocolError) -> bool:
        action = self._triage(ev)
        if action == "wake":
            _wake(ev.pending.token)  # type: ignore[union-attr]
        elif action == "answer":
            head, body = self._session.send_response(ev.response)  # type: ignore[arg-type]
            self._queue(head, body)
        return action != "close"

    async def _serve(self, cmd: RemotingCommand) -> None:
        """One request: its answer is queued for the next flush; whatever fails stays here."""
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
            if type(resp) is HeldAnswer:  # leaves when its bytes are durable: no task waits for that
                resp.mark.add_waiter(resp.at, _Release(self, resp), resp.timeout, self._loop)
                return
            head, body = self._session.send_response(resp)
            self._queue(head, body)
            if self._paused:
                await self._wait_drained()
        except (RemotingClosedError, asyncio.CancelledError):
            pass  # the connection went away: nobody is left to answer
        except Exception as exc:  # noqa: BLE001 - e.g. a response that cannot be encoded
            self._rlog.error(
                "serve-failed", "%s: serving request code %d from %s failed: %s", self.name, cmd.code,
                self.peer, printable(repr(exc)),
            )
            log.debug("request failure", exc_info=True)

    def _expire(self) -> None:
        for pending in self._session.expire(time.monotonic()):
            _wake(pending.token)

    def _expire_at(self, deadline: float) -> None:
        """A request's timer: uvloop may fire up to a millisecond early (it rounds to ms), so an
        early call re-arms itself rather than leave the request waiting for no other wake-up."""
        now = time.monotonic()
        if now < deadline:
            self._loop.call_later(deadline - now + 0.001, self._expire_at, deadline)
            return
        self._expire()

    def _idle_check(self) -> None:
        self._idle_handle = None
        if self._closed:
            return
        idle = self._idle_timeout
        remaining = self._last_activity + idle - time.monotonic()
        if remaining > 0:
            self._idle_handle = self._loop.call_later(remaining, self._idle_check)
            return
        self._rlog.info("idle", "%s: closing connection #%d with %s idle for %gs", self.name, self.id,
                        self.peer, idle)
        self._fail(f"idle for {idle:g}s")

    # ------------------------------------------------------------------ closing

    def _fail(self, reason: str) -> None:
        """Close because of ``reason``: queued answers still go out, nothing more is read."""
        self._close(reason)
        if self._transport is not None:
            self._transport.close()

    def _close(self, reason: str) -> None:
        """Mark closed, cancel request tasks, wake every waiter (synchronous, idempotent)."""
        if not self._closed:
            self._closed = True
            self._close_reason = self._close_reason or reason
        if self._tasks:
            for task in list(self._tasks.values()):
                task.cancel()
        for pending in self._session.close():
            _wake(pending.token)
        drained, self._drained = self._drained, None
        _wake(drained)

