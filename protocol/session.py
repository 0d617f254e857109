"""The protocol state of one remoting connection, sans-IO (h11's shape): bytes in, events out.

A :class:`Session` owns what both ends of a RocketMQ connection must track: frame
decoding, opaque allocation, the table of requests awaiting a response and their
deadlines. It never touches a socket, a clock or an event loop: the caller feeds it
the bytes it read (:meth:`Session.receive_data`), writes the bytes it returns
(``send_*``), and passes ``now`` in. A caller's wake-up object (a future, an event)
rides along as the pending entry's ``token``. The tcp plugin is the I/O shell around it;
tests drive it with plain bytes.

Events, in arrival order, from :meth:`Session.receive_data`:

* :class:`Request` — a request expecting a response;
* :class:`Oneway` — a request expecting none;
* :class:`Response` — a response, matched by opaque to the :class:`Pending` it answers
  (already removed from the table; ``pending.state`` is ``ANSWERED``);
* :class:`ProtocolError` — ``recoverable``: one frame was bad or unexpected (an unknown
  opaque, a header that failed after its opaque was read) and the connection goes on;
  ``response`` then holds the SYSTEM_ERROR answer to send, ``pending`` the request it
  fails. Not recoverable: the byte stream cannot be trusted any more (close the
  connection); the session stays in that state and yields nothing more.
"""

from __future__ import annotations

import heapq
from typing import Any, Final

from rmq.protocol.command import (
    DEFAULT_MAX_FRAME_SIZE,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    FrameError,
    RemotingClosedError,
    RemotingCommand,
    UndecodableCommand,
)
from rmq.protocol.dispatch import error_response
from rmq.protocol.frame import FrameDecoder, encode_parts

__all__ = [
    "ANSWERED",
    "CLOSED",
    "EXPIRED",
    "UNDECODABLE",
    "WAITING",
    "Event",
    "Oneway",
    "Pending",
    "ProtocolError",
    "Request",
    "Response",
    "Session",
]

OPAQUE_MASK: Final = 0x7FFFFFFF  # opaques stay non-negative Java ints and wrap

# Pending.state: how a request ended (plain strings: compared by identity on the hot path)
WAITING: Final = "waiting"
ANSWERED: Final = "answered"
UNDECODABLE: Final = "undecodable"  # a response arrived but its header could not be decoded
EXPIRED: Final = "expired"
CLOSED: Final = "closed"


class Pending:
    """A request awaiting its response; ``token`` is the caller's own wake-up object."""

    __slots__ = ("opaque", "code", "deadline", "timeout", "token", "state", "response")

    def __init__(self, opaque: int, code: int, deadline: float, timeout: float, token: Any) -> None:
        self.opaque = opaque
        self.code = code
        self.deadline = deadline
        self.timeout = timeout
        self.token = token
        self.state: str = WAITING
        self.response: RemotingCommand | None = None  # the answer (an UndecodableCommand when UNDECODABLE)

    def __repr__(self) -> str:
        return f"<Pending opaque={self.opaque} code={self.code} {self.state}>"


class _Incoming:
    """A command the peer sent us; the subclass says whether it wants an answer (dispatch is on the
    exact type, ``type(ev) is Request``, so neither subclasses the other)."""

    __slots__ = ("cmd",)

    def __init__(self, cmd: RemotingCommand) -> None:
        self.cmd = cmd

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.cmd!r})"


class Request(_Incoming):
    """A request the peer expects an answer to."""

    __slots__ = ()


class Oneway(_Incoming):
    """A request the peer expects no answer to."""

    __slots__ = ()


class Response:
    """The answer to one of our requests, with its pending entry (already out of the table)."""

    __slots__ = ("cmd", "pending")

    def __init__(self, cmd: RemotingCommand, pending: Pending) -> None:
        self.cmd = cmd
        self.pending = pending

    def __repr__(self) -> str:
        return f"Response({self.cmd!r}, {self.pending!r})"


class ProtocolError:
    """Something the peer sent that is not a well-formed, expected command.

    ``kind`` classifies it in a word (the decoder's ``FrameError.kind``, or ``unknown-opaque``)
    so a transport can rate-limit its log lines per kind; ``reason`` is peer-influenced text
    (pass it through ``printable`` before logging).
    """

    __slots__ = ("reason", "recoverable", "kind", "cmd", "pending", "response")

    def __init__(
        self,
        reason: str,
        recoverable: bool,
        kind: str,
        *,
        cmd: RemotingCommand | None = None,
        pending: Pending | None = None,
        response: RemotingCommand | None = None,
    ) -> None:
        self.reason = reason
        self.recoverable = recoverable
        self.kind = kind
        self.cmd = cmd  # the offending command, when its frame was whole
        self.pending = pending  # our request this frame fails (an undecodable response)
        self.response = response  # the answer to send (an undecodable request)

    def __repr__(self) -> str:
        state = "recoverable" if self.recoverable else "fatal"
        return f"ProtocolError({self.kind}, {state}: {self.reason!r})"


Event = Request | Oneway | Response | ProtocolError


class Session:
    """One connection's protocol state; either end (a server may send requests too).

    Not thread-safe; one owner calls it. Every method is O(1) amortised except
    :meth:`expire` (O(log n) per expired or stale entry) and :meth:`close`.
    """

    __slots__ = ("_decoder", "_pending", "_deadlines", "_next_opaque", "_done", "closed", "error")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, *, first_opaque: int = 0) -> None:
        # recover=True: a whole frame whose header failed after its opaque was read is answered, not fatal
        self._decoder = FrameDecoder(max_frame_size, recover=True)
        self._pending: dict[int, Pending] = {}
        # (deadline, opaque) min-heap; entries of answered requests stay until they surface (lazy
        # deletion: cheaper than removing each one) and are compacted when the heap outgrows the table.
        self._deadlines: list[tuple[float, int]] = []
        self._next_opaque = first_opaque & OPAQUE_MASK
        self.closed = False
        self.error: ProtocolError | None = None  # the fatal error, once one happened
        self._done = False  # closed or failed: nothing more is decoded

    # ------------------------------------------------------------------ state

    @property
    def pending(self) -> int:
        """Requests awaiting a response."""
        return len(self._pending)

    @property
    def buffered(self) -> int:
        """Bytes held of a frame not yet complete."""
        return self._decoder.buffered

    @property
    def next_deadline(self) -> float | None:
        """When :meth:`expire` may next have work (possibly early: a stale entry), None if never."""
        return self._deadlines[0][0] if self._deadlines else None

    @property
    def max_frame_size(self) -> int:
        return self._decoder.max_frame_size

    def take_buffered(self, data: bytes | bytearray | memoryview) -> bytes | bytearray | None:
        """What a partial frame held so far plus ``data``, no longer held (see ``FrameDecoder.take``);
        None once the session is done (closed, or a fatal error): then nothing more is decoded."""
        return None if self._done else self._decoder.take(data)

    def get(self, opaque: int) -> Pending | None:
        return self._pending.get(opaque)

    # ------------------------------------------------------------------ receiving

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[Event]:
        """Decode what arrived into events; never raises for anything a peer can send."""
        if self._done:
            return []
        try:
            events: list[Any] = self._decoder.feed(data)
        except FrameError as exc:
            self.error = err = ProtocolError(str(exc), False, exc.kind)
            self._done = True
            return [err]
        # The decoder's list becomes the event list, entry by entry: no second list per read.
        for i in range(len(events)):
            cmd = events[i]
            flag = cmd.flag
            if flag & RESPONSE_FLAG:
                p = self._pending.pop(cmd.opaque, None) if type(cmd) is not UndecodableCommand else None
                if p is not None:
                    p.state = ANSWERED
                    p.response = cmd
                    events[i] = Response(cmd, p)
                elif type(cmd) is UndecodableCommand:
                    events[i] = self._undecodable(cmd)
                else:
                    events[i] = ProtocolError(
                        f"response opaque {cmd.opaque} (code {cmd.code}) matches no pending request",
                        True, "unknown-opaque", cmd=cmd,
                    )
            elif type(cmd) is UndecodableCommand:
                events[i] = self._undecodable(cmd)
            elif flag & ONEWAY_FLAG:
                events[i] = Oneway(cmd)
            else:
                events[i] = Request(cmd)
        return events

    def _undecodable(self, cmd: UndecodableCommand) -> ProtocolError:
        reason = cmd.remark or "undecodable header"
        kind = cmd.error.kind
        if cmd.flag & RESPONSE_FLAG:
            p = self._pending.pop(cmd.opaque, None)
            if p is not None:
                p.state = UNDECODABLE
                p.response = cmd
            return ProtocolError(reason, True, kind, cmd=cmd, pending=p)
        if cmd.flag & ONEWAY_FLAG:
            return ProtocolError(reason, True, kind, cmd=cmd)
        return ProtocolError(reason, True, kind, cmd=cmd, response=error_response(cmd, cmd.error))

    # ------------------------------------------------------------------ sending

    def send_request(
        self, cmd: RemotingCommand, timeout: float, now: float, token: Any = None
    ) -> tuple[Pending, bytes, bytes]:
        """Give ``cmd`` the next opaque, await its response until ``now + timeout``.

        Returns the pending entry and the frame as (head, body), for a writer that batches
        frames without joining each one first. Raises RemotingClosedError once closed, and
        ValueError (nothing registered) when ``cmd`` cannot be encoded.
        """
        if self.closed:
            raise RemotingClosedError("the session is closed")
        opaque = self._next_opaque
        self._next_opaque = (opaque + 1) & OPAQUE_MASK
        cmd.opaque = opaque
        cmd.flag &= ~(RESPONSE_FLAG | ONEWAY_FLAG)
        head, body = encode_parts(cmd)
        deadline = now + timeout
        p = Pending(opaque, cmd.code, deadline, timeout, token)
        pending = self._pending
        pending[opaque] = p
        heap = self._deadlines
        heapq.heappush(heap, (deadline, opaque))
        if len(heap) > 2 * len(pending) + 1024:
            heap[:] = [(w.deadline, op) for op, w in pending.items()]
            heapq.heapify(heap)
        return p, head, body

    def send_oneway(self, cmd: RemotingCommand) -> tuple[bytes, bytes]:
        """``cmd`` marked oneway with the next opaque, as (head, body)."""
        if self.closed:
            raise RemotingClosedError("the session is closed")
        opaque = self._next_opaque
        self._next_opaque = (opaque + 1) & OPAQUE_MASK
        cmd.opaque = opaque
        cmd.flag = (cmd.flag | ONEWAY_FLAG) & ~RESPONSE_FLAG
        return encode_parts(cmd)

    def send_response(self, cmd: RemotingCommand, request: RemotingCommand | None = None) -> tuple[bytes, bytes]:
        """``cmd`` marked as a response (to ``request``'s opaque when given), as (head, body)."""
        if request is not None:
            cmd.opaque = request.opaque
        cmd.flag |= RESPONSE_FLAG
        return encode_parts(cmd)

    # ------------------------------------------------------------------ giving up

    def discard(self, pending: Pending) -> None:
        """The caller stopped waiting (cancelled): forget it; a late response becomes unknown-opaque."""
        if self._pending.get(pending.opaque) is pending:
            del self._pending[pending.opaque]

    def expire(self, now: float) -> list[Pending]:
        """Remove and return the requests whose deadline is at or before ``now`` (state EXPIRED)."""
        heap = self._deadlines
        pending = self._pending
        out: list[Pending] = []
        while heap:
            deadline, opaque = heap[0]
            p = pending.get(opaque)
            if p is None or p.deadline != deadline:
                heapq.heappop(heap)  # answered, or the opaque was reused after wrapping
            elif deadline <= now:
                heapq.heappop(heap)
                del pending[opaque]
                p.state = EXPIRED
                out.append(p)
            else:
                break
        return out

    def close(self) -> list[Pending]:
        """End the session: every request still waiting fails (state CLOSED) and is returned."""
        self.closed = self._done = True
        failed = list(self._pending.values())
        self._pending.clear()
        self._deadlines.clear()
        for p in failed:
            p.state = CLOSED
        return failed
