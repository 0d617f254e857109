"""``Watermark``: an offset that only grows, and that tasks can await without polling.

The store's ``durable`` ("commitlog bytes below N are on this disk") and a replication
service's ``replicated`` ("... on a slave") are watermarks: a durable put awaits
``wait_for(end)``, a replication service ``subscribe``s to ship what became durable.

Cheap when nobody waits: ``advance`` is a compare, an assignment and an empty-heap
check. A waiter costs one ``anyio.Event`` (plus a cancel scope when it has a timeout)
and is woken by exactly the ``advance`` that passes its target, never by a round that
does not reach it. Event-loop only: call ``advance`` from the loop's thread (a worker
thread hands its result back first, e.g. ``anyio.to_thread.run_sync``'s return).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

import anyio

__all__ = ["Watermark"]

Listener = Callable[[int], None]


class Watermark:
    """A monotonically advancing offset. ``value`` is where it stands."""

    __slots__ = ("_value", "_waiters", "_listeners", "_seq")

    def __init__(self, value: int = 0) -> None:
        self._value = value
        self._waiters: list[tuple[int, int, anyio.Event]] = []  # heap by target
        self._listeners: list[Listener] = []
        self._seq = itertools.count()

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
            heapq.heappop(waiters)[2].set()
        for cb in self._listeners:
            cb(n)

    async def wait_for(self, n: int, timeout: float | None = None) -> bool:
        """True once the mark is at or past ``n``; False when ``timeout`` seconds pass first.

        Cancellation: a cancelled waiter is simply gone (its entry is dropped when the mark
        passes it). Returns at once, without yielding, when the mark is already there.
        """
        if self._value >= n:
            return True
        ev = anyio.Event()
        heapq.heappush(self._waiters, (n, next(self._seq), ev))
        if timeout is None:
            await ev.wait()
            return True
        with anyio.move_on_after(timeout):
            await ev.wait()
        return self._value >= n

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
        """Waiters not yet woken (timed-out ones included until the mark passes them)."""
        return len(self._waiters)

    def __repr__(self) -> str:
        return f"<Watermark {self._value} waiters={len(self._waiters)}>"
