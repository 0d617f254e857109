"""``Watermark``: an offset that only grows, and that tasks can await without polling.

The store's ``durable`` ("commitlog bytes below N are on this disk") and a replication
service's ``replicated`` ("... on a slave") are watermarks: a durable put awaits
``wait_for(end)``, a replication service ``subscribe``s to ship what became durable.

Cheap when nobody waits: ``advance`` is a compare, an assignment and an empty-heap
check. A waiter is woken by exactly the ``advance`` that passes its target, never by a
round that does not reach it. On asyncio a waiter is one bare future, and timeouts share
one loop timer per watermark (armed for the earliest deadline): a cancel scope per
waiter would cost more than the rest of a synchronous put, and dozens of puts wait on
each group commit. Other anyio backends take the portable path (an event and a cancel
scope per waiter). ``add_waiter`` takes any future-like object instead of a coroutine: a
connection holds a SYNC_FLUSH answer on ``durable`` that way, with no task parked per send.
Whoever advances the mark may set ``settle``, a callable a waiter's owner calls once it has
registered all it will register for now (a connection, after the requests of one socket read):
the durable mark's flush policy then runs the round covering them at once.
Event-loop only: call ``advance`` from the loop's thread.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Callable
from typing import Any

import anyio

__all__ = ["Watermark"]

Listener = Callable[[int], None]


def _wake(w: Any) -> None:
    if isinstance(w, anyio.Event):
        w.set()
    elif not w.done():  # a cancelled waiter's future is done already
        w.set_result(None)


class Watermark:
    """A monotonically advancing offset. ``value`` is where it stands."""

    __slots__ = ("_value", "_waiters", "_listeners", "_seq", "_timer", "_timer_at", "settle")

    def __init__(self, value: int = 0) -> None:
        self._value = value
        self._waiters: list[tuple[int, int, Any, float]] = []  # heap: (target, seq, future|event, deadline)
        self._listeners: list[Listener] = []
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self.settle: Callable[[], None] | None = None  # see the module docstring

    @property
    def value(self) -> int:
        return self._value

    def advance(self, n: int) -> None:
        """Move to ``n`` if that is further (a smaller ``n`` is ignored: the mark never goes back);
        wake the waiters it passes and tell every listener, in subscription order."""
        if n <= self._value:
            return
        self._value = n
        waiters = self._waiters
        while waiters and waiters[0][0] <= n:
            _wake(heapq.heappop(waiters)[2])
        for cb in self._listeners:
            cb(n)

    async def wait_for(self, n: int, timeout: float | None = None) -> bool:
        """True once the mark is at or past ``n``; False when ``timeout`` seconds pass first.

        Returns at once, without yielding, when the mark is already there. Cancellation:
        a cancelled waiter is simply gone (its entry is dropped when the mark passes it).
        """
        if self._value >= n:
            return True
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend: the portable way
            return await self._wait_portable(n, timeout)
        fut = loop.create_future()
        self.add_waiter(n, fut, timeout, loop)
        await fut
        return self._value >= n

    def add_waiter(self, n: int, fut: Any, timeout: float | None, loop: asyncio.AbstractEventLoop) -> None:
        """Wake ``fut`` (an asyncio future, or any object with ``done()`` and ``set_result(None)``)
        once the mark reaches ``n`` or ``timeout`` seconds pass; the waiter then reads ``value``.
        A waiter without a coroutine: a connection holds a SYNC_FLUSH answer until its bytes
        are durable without parking a task per request."""
        deadline = math.inf if timeout is None else loop.time() + timeout
        heapq.heappush(self._waiters, (n, next(self._seq), fut, deadline))
        if deadline < self._timer_at:
            self._arm(loop, deadline)

    async def _wait_portable(self, n: int, timeout: float | None) -> bool:
        ev = anyio.Event()
        heapq.heappush(self._waiters, (n, next(self._seq), ev, math.inf))
        with anyio.move_on_after(timeout):
            await ev.wait()
        return self._value >= n

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(at, self._expire, loop)
        self._timer_at = at

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """The earliest deadline passed: wake every waiter past its own (they return False), drop
        cancelled ones, re-arm for the next deadline."""
        self._timer, self._timer_at = None, math.inf
        now = loop.time()
        keep = []
        nxt = math.inf
        for entry in self._waiters:
            w, deadline = entry[2], entry[3]
            if deadline <= now:
                _wake(w)
            elif isinstance(w, anyio.Event) or not w.done():
                keep.append(entry)
                nxt = min(nxt, deadline)
        heapq.heapify(keep)
        self._waiters = keep
        if nxt < math.inf:
            self._arm(loop, nxt)

    def subscribe(self, cb: Listener) -> Callable[[], None]:
        """Call ``cb(value)`` after every advance (on the loop; it must not block or raise).
        Returns the function that unsubscribes it."""
        self._listeners.append(cb)

        def unsubscribe() -> None:
            if cb in self._listeners:
                self._listeners.remove(cb)

        return unsubscribe

    @property
    def waiters(self) -> int:
        """Waiters not yet woken (cancelled ones included until the mark passes them)."""
        return len(self._waiters)

    def __repr__(self) -> str:
        return f"<Watermark {self._value} waiters={len(self._waiters)}>"
