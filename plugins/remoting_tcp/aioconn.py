"""The asyncio transport of a connection, on ``asyncio.Protocol``: the per-byte, per-request path kept lean.

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
no task is parked per durable send. Once every request of a read has been served the connection
calls the watermark's ``settle``: the flush policy may then cover the whole read with one
``fdatasync`` right away, and the read's answers leave in one write.
Frames are written in call order. Flow control: above the transport's high-water mark
reading pauses (a peer that does not read its answers stops being served) and writers
wait until it drains.

Serving, protocol errors, closing and the supervision rules live in
:mod:`rmq.plugins.remoting_tcp.core`, shared with the anyio ``TcpConnection``. Used by
:class:`~rmq.plugins.remoting_tcp.server.TcpRemotingServer` and the plaintext client when
they run on asyncio (uvloop included); other backends and TLS clients take ``TcpConnection``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any, cast

from rmq.plugins.remoting_tcp.core import WRITE_HIGH_WATER, ConnectionCore, address, no_delay
from rmq.protocol.command import HeldAnswer, RemotingClosedError, RemotingCommand
from rmq.protocol.frame import FrameDecoder
from rmq.protocol.names import printable
from rmq.protocol.session import WAITING

if TYPE_CHECKING:
    from rmq.kernel import RequestHandler

# Longest run of one read's requests served back to back before the rest yields to the loop: a
# 500-message batch takes a few ms, and a peer pipelining dozens would otherwise stall every
# other peer for a sizeable part of waitTimeMillsInSendQueue (200 ms), tripping flow control.
TURN_BUDGET = 0.005
_NEVER = float("inf")


def _wake(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


_WRITE_THROUGH = 16 * 1024  # body bytes from which a request is written at once, never gathered


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


class _OneShot:
    """Future-like wake-up object (``done``/``set_result``, what ``_wake`` and a watermark call) that acts,
    once, in place of resuming a task: ``_fire``."""

    __slots__ = ("fired",)

    def done(self) -> bool:
        return self.fired

    def set_result(self, _: object) -> None:
        if self.fired:
            return
        self.fired = True
        self._fire()

    def _fire(self) -> None:
        raise NotImplementedError


class _Callback(_OneShot):
    """A request's wake-up object that runs ``on_done(response, error)`` where a task would be resumed: a
    caller that only needs the answer handed on (an async send) then costs no task, nor its loop turns."""

    __slots__ = ("conn", "cmd", "timeout", "on_done", "pending")

    def __init__(self, conn: AsyncioConnection, cmd: RemotingCommand, timeout: float, on_done: Any) -> None:
        self.conn = conn
        self.cmd = cmd
        self.timeout = timeout
        self.on_done = on_done
        self.pending: Any = None
        self.fired = False

    def _fire(self) -> None:
        try:
            resp = self.conn._outcome(self.pending, self.cmd, self.timeout)
        except Exception as exc:  # noqa: BLE001 - the request's error is the callback's to handle
            self._call(None, exc)
        else:
            self._call(resp, None)

    def _call(self, resp: RemotingCommand | None, exc: BaseException | None) -> None:
        try:
            self.on_done(resp, exc)
        except Exception as err:  # noqa: BLE001 - runs inside a read or a timer: never let it fail
            conn = self.conn
            conn._rlog.error("request-callback", "%s: a request callback for %s failed: %s", conn.name, conn.peer,
                             printable(repr(err)))


class _Release(_OneShot):
    """Future-like waiter on a watermark for answers held until their bytes are durable: queues them
    when woken (by the advance that reaches ``at``, or by its timeout: then they leave late, see
    ``_send``). Subclasses say what leaves."""

    __slots__ = ("conn", "mark", "at")

    def __init__(self, conn: AsyncioConnection, mark: Any, at: int) -> None:
        self.conn = conn
        self.mark = mark
        self.at = at
        self.fired = False

    def _fire(self) -> None:
        conn = self.conn
        if conn._closed:
            return
        try:
            self._send(conn, self.mark.value < self.at)
        except Exception as exc:  # noqa: BLE001 - called from a flush round: never let it fail
            conn._rlog.error("held-answer", "%s: answering %s failed: %s", conn.name, conn.peer,
                             printable(repr(exc)))

    def _send(self, conn: AsyncioConnection, late: bool) -> None:
        raise NotImplementedError


class _ReleaseAnswer(_Release):
    """A ``HeldAnswer``: it leaves with its ``late_code`` when late."""

    __slots__ = ("resp",)

    def __init__(self, conn: AsyncioConnection, resp: HeldAnswer) -> None:
        super().__init__(conn, resp.mark, resp.at)
        self.resp = resp

    def _send(self, conn: AsyncioConnection, late: bool) -> None:
        resp = self.resp
        if late:
            resp.code = resp.late_code
        head, body = conn._session.send_response(resp)
        conn._queue(head, body)


class _ReleaseRead(_Release):
    """The answers of one read the compiled send path served under SYNC_FLUSH: their bytes leave as one
    piece, each answer re-encoded with ``late_code`` when late (stored all the same, as a HeldAnswer's)."""

    __slots__ = ("answers", "late_code")

    def __init__(self, conn: AsyncioConnection, answers: bytes, mark: Any, at: int, late_code: int) -> None:
        super().__init__(conn, mark, at)
        self.answers = answers
        self.late_code = late_code

    def _send(self, conn: AsyncioConnection, late: bool) -> None:
        answers = self.answers
        if late:
            parts = []
            for cmd in FrameDecoder().feed(answers):
                cmd.code = self.late_code
                head, body = conn._session.send_response(cmd)
                parts.append(head + body)
            answers = b"".join(parts)
        conn._queue(answers, b"")


class AsyncioConnection(ConnectionCore, asyncio.Protocol):
    """A peer connection on an asyncio protocol; satisfies ``rmq.kernel.hookspecs.remoting.Connection``."""

    holds_answers = True  # a handler may return a HeldAnswer (see _respond)
    _wake_token = staticmethod(_wake)

    def __init__(self, handler: RequestHandler | None, **options: Any) -> None:
        """``options``: the keywords of :class:`~rmq.plugins.remoting_tcp.core.ConnectionCore`."""
        super().__init__(handler, **options)
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._flush_scheduled = False
        self._wrote = False  # a request was written through since the last read (see _write_now)
        self._paused = False
        self._tasks: dict[int, asyncio.Task[None]] = {}  # request tasks, cancelled on close
        # tasks created whose requests have not begun: a request runs to its first suspension when its task
        # starts (a send has stored by then), so only these could be overtaken by the compiled send path
        self._unstarted = 0
        self._seq = 0
        self._split = False  # the last request served suspended: a task per request (see _serve_many)
        self._held: Any = None  # the watermark a held answer of the requests being served waits on
        self._idle_handle: asyncio.TimerHandle | None = None
        self._expiry: asyncio.TimerHandle | None = None  # the one timer of this connection's request deadlines
        self._expiry_at = _NEVER  # the deadline it is armed for
        self._done = self._loop.create_future()
        self.write_through = False  # the client side: a turn's first request written at once (see _write_now)
        # the compiled sends and pulls of a read (a handler's, see plugins/broker/fastpull.py FastReads): None not
        # given (yet), False never
        self.fast_send: Any = None

    # ------------------------------------------------------------------ public API

    async def send_request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:  # noqa: ASYNC109
        self._check_open()
        woken: asyncio.Future[None] = self._loop.create_future()
        pending = self._request_out(cmd, timeout, woken)
        try:
            await woken
        finally:
            if pending.state is WAITING:
                self._session.discard(pending)  # cancelled or failed: a late response is dropped
        return self._outcome(pending, cmd, timeout)

    def _request_out(self, cmd: RemotingCommand, timeout: float, token: Any) -> Any:
        """Register ``cmd`` with the session (``token`` woken by its outcome) and write it; its pending entry."""
        pending, head, body = self._session.send_request(cmd, timeout, time.monotonic(), token)
        if type(token) is _Callback:
            token.pending = pending  # before the write: a failed one closes the connection, which fires it
        if pending.deadline < self._expiry_at:  # the connection's one timer, armed for the earliest deadline
            self._arm_expiry(pending.deadline, max(timeout, 0.0))
        try:
            if self.write_through:
                self._write_now(head, body)
            else:
                self._queue(head, body)
        except BaseException:
            if pending.state is WAITING:
                self._session.discard(pending)  # failed: a late response is dropped
            raise
        return pending

    def request_callback(self, cmd: RemotingCommand, timeout: float, on_done: Any) -> None:
        """``send_request`` without a task: ``on_done(response, None)`` or ``on_done(None, error)`` runs exactly
        once, from the read that brings the answer, the expiry timer or the close; never from this call."""
        token = _Callback(self, cmd, timeout, on_done)
        if self._closed:
            token.fired = True
            self._loop.call_soon(token._call, None, RemotingClosedError(f"connection to {self.peer} is closed"))
            return
        try:
            self._request_out(cmd, timeout, token)
        except Exception as exc:  # noqa: BLE001 - a failed write closed the connection, which may have woken it
            if not token.fired:
                token.fired = True
                self._loop.call_soon(token._call, None, exc)

    async def aclose(self) -> None:
        self._abandon("closed locally")
        if self._transport is not None:
            self._transport.close()  # what is queued still goes out; connection_lost finishes the rest

    def abort(self) -> None:
        """Close at once, dropping unsent bytes and cancelling the requests still running (server shutdown)."""
        self._abandon("closed locally")
        if self._transport is not None:
            self._transport.abort()

    async def wait_closed(self) -> None:
        """Return once the transport is gone and close callbacks ran."""
        await asyncio.shield(self._done)

    async def served(self) -> None:
        """Return once every request read has been served: after the peer closed, what it sent
        before closing still runs (see :mod:`~rmq.plugins.remoting_tcp.core`)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks.values()))

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

    def _put(self, head: bytes, body: bytes) -> bool:
        self._queue(head, body)
        return self._paused

    def _respond(self, resp: RemotingCommand) -> bool:
        if type(resp) is HeldAnswer:  # leaves when its bytes are durable: no task waits for that
            resp.mark.add_waiter(resp.at, _ReleaseAnswer(self, resp), resp.timeout, self._loop)
            self._held = resp.mark
            return False
        head, body = self._session.send_response(resp)
        self._queue(head, body)
        return self._paused

    def _answer_refused(self, resp: RemotingCommand) -> None:
        head, body = self._session.send_response(resp)
        self._queue(head, body)

    def _write_now(self, head: bytes, body: bytes) -> None:
        """A client's request: the first since the last read leaves at once (no added latency for a
        lone request, nor a callback: requests spread over time keep the broker and the client working
        side by side), later ones join the loop turn's one write (one syscall for a burst of sends
        rather than one each). A large frame (a batch) leaves at once: gathering 32 of them made the broker
        and the client take turns (bench/broker.py --batch 32: 92k vs 147k msg/s written through)."""
        if self._flush_scheduled or self._wrote:  # a frame already left since the last read: join the turn's write
            if len(body) < _WRITE_THROUGH:
                self._queue(head, body)
                return
            self._flush()  # a large frame gains nothing by waiting: what is queued leaves first, then it
        transport = self._transport
        if transport is None or transport.is_closing():
            raise RemotingClosedError(f"connection to {self.peer} is closed")
        try:
            transport.write(head + body if body else head)
        except Exception as exc:  # noqa: BLE001 - the transport failed: this connection only
            self._fail(f"write failed: {exc!r}")
            raise RemotingClosedError(f"write to {self.peer} failed: {exc!r}") from None
        self._last_activity = time.monotonic()
        self._wrote = True

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

    async def _wait_writable(self) -> None:
        """Wait until the transport drained below its high-water mark."""
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
        self.remote_addr = address(lambda: transport.get_extra_info("peername"))
        self.local_addr = address(lambda: transport.get_extra_info("sockname"))
        no_delay(lambda: transport.get_extra_info("socket"))
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        if transport.get_extra_info("sslcontext") is not None or transport.get_extra_info("ssl_object") is not None:
            self.fast_send = False  # TLS: not for the compiled send path
        if self._closed:  # aclosed before the transport existed
            transport.close()
        elif self._idle_timeout and self._idle_timeout > 0:
            self._idle_handle = self._loop.call_later(self._idle_timeout, self._idle_check)

    def data_received(self, data: bytes) -> None:
        self._last_activity = time.monotonic()
        self._wrote = False
        try:
            if self.fast_send and not self._unstarted and not self._closed:
                data = self._serve_fast(data)  # type: ignore[assignment]
                if not data:
                    return
            if not self._dispatch(data):
                self._fail(self._close_reason or "bad frame")
        except Exception as exc:  # noqa: BLE001 - a bug or an oddity: this connection only
            self._internal_error(exc)
            self._fail(self._close_reason or "internal error")

    def _serve_fast(self, data: bytes) -> bytes | bytearray:
        """The read's leading common-case sends and pulls served by ``fast_send`` (their answers queued in one
        piece); the rest, for the session. Only while every request of earlier reads has begun
        (a held pull may wait on): a send the Python path has not stored yet must not be overtaken."""
        session = self._session
        src = session.take_buffered(data)
        if src is None:
            return data
        try:
            pos, answers, hold = self.fast_send(src, session.max_frame_size)
        except Exception as exc:  # noqa: BLE001 - a bug: this connection goes on without the compiled path
            self.fast_send = False
            self._rlog.error("fast-send", "%s: the compiled send path failed for %s (off for this connection): %s",
                             self.name, self.peer, printable(repr(exc)))
            return src
        if answers is not None:
            if hold is None:
                self._queue(answers, b"")
            else:  # SYNC_FLUSH: (watermark, offset, timeout, late code), as a HeldAnswer's
                mark, at, timeout, late_code = hold
                mark.add_waiter(at, _ReleaseRead(self, answers, mark, at, late_code), timeout, self._loop)
                self._held = mark
            if pos == len(src):
                self._settle()  # the whole read is served: one flush may cover it now
                if self._flush_scheduled:
                    self._flush()  # every answer of this read is ready: out before the turn's other callbacks
        return src[pos:] if pos else src

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
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        self._wbuf = []
        self._transport = None
        if not self._done.done():
            self._done.set_result(None)
        self._finish()

    # ------------------------------------------------------------------ serving

    def _start_requests(self, cmds: list[RemotingCommand], start: int = 0) -> None:
        """One task for ``cmds[start:]``, or one per request while this peer's requests suspend."""
        n = len(cmds)
        if self._split:
            for i in range(start, n):
                self._start(cmds, i, i + 1)
        else:
            self._start(cmds, start, n)

    def _start(self, cmds: list[RemotingCommand], start: int, stop: int) -> None:
        seq = self._seq = self._seq + 1
        self._unstarted += 1
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
        self._unstarted -= 1
        try:
            serve = self._serve
            t0 = time.monotonic()
            for i in range(start, stop):
                if self._abandoned:  # closed locally; a peer's close still lets its requests run
                    return
                coro = serve(cmds[i])
                try:
                    yielded = coro.send(None)
                except StopIteration:
                    self._split = False
                    if i + 1 < stop and time.monotonic() - t0 > TURN_BUDGET:
                        self._settle()
                        self._start(cmds, i + 1, stop)
                        return
                    continue
                self._settle()
                self._split = True
                if i + 1 < stop:
                    self._start_requests(cmds, i + 1)
                await _Resume(coro, yielded)
                return
            self._settle()
            if start == 0 and stop == len(cmds) and self._flush_scheduled:
                self._flush()  # every answer of this read is ready: out before the turn's other callbacks
        finally:
            self._tasks.pop(seq, None)

    def _settle(self) -> None:
        """The requests served so far hold answers: tell their watermark's owner (a SYNC_FLUSH policy)
        that this batch is complete, so one flush may cover all of it now rather than one per request
        or one at the end of the loop turn. Answers it makes durable are queued before this returns."""
        mark = self._held
        if mark is not None:
            self._held = None
            settle = mark.settle
            if settle is not None:
                settle()

    def _arm_expiry(self, deadline: float, delay: float) -> None:
        """(Re-)arm the connection's one expiry timer: a timer per request cost a ``TimerHandle``, a heap push
        and a cancel on every send; the session already keeps the deadlines in a heap."""
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry_at = deadline
        self._expiry = self._loop.call_later(delay, self._expire_due)

    def _expire_due(self) -> None:
        """The earliest deadline came: fail what is due, re-arm for the next live one. uvloop may fire up to
        a millisecond early (it rounds to ms): the deadline fired for, still pending, gets a millisecond more
        rather than be left waiting for no other wake-up."""
        fired_for = self._expiry_at
        self._expiry = None
        self._expiry_at = _NEVER
        now = time.monotonic()
        session = self._session
        for pending in session.expire(now):
            _wake(pending.token)
        nxt = session.next_deadline  # after expire(): a live request's (stale entries above it are gone)
        if nxt is not None and not self._closed:
            self._arm_expiry(nxt, nxt - now + (0.001 if nxt <= fired_for else 0.0))

    def _idle_check(self) -> None:
        self._idle_handle = None
        if self._closed:
            return
        remaining = self._last_activity + self._idle_timeout - time.monotonic()
        if remaining > 0:
            self._idle_handle = self._loop.call_later(remaining, self._idle_check)
            return
        self._fail(self._idle_expired())

    # ------------------------------------------------------------------ closing

    def _fail(self, reason: str) -> None:
        """Close because of ``reason``: queued answers still go out, nothing more is read; the
        requests read so far are still served."""
        self._close(reason)
        if self._transport is not None:
            self._transport.close()

    def _cancel_tasks(self) -> None:
        if self._tasks:
            for task in list(self._tasks.values()):
                task.cancel()
