"""Long polling (reference §9.6): held pulls per (topic, queue), woken by the store's dispatch.

A pull that finds nothing and carries the SUSPEND flag parks a waiter here. The
``ArrivalNotifier`` is a ``CommitLogDispatcher`` contributed through
``rmq_dispatch_make_dispatchers``: for each stored record it wakes the waiters of
that queue whose offset is now readable and whose filter may match. A periodic
check (every 5 s, or shortPollingTimeMills without long polling) wakes waiters a
notification missed, and those whose consumer's connection closed (a request read is served
even when its peer has gone, so a pull held for up to an hour must not outlive its consumer
by more than a check); each waiter also has its own deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from rmq.kernel import Connection, DispatchRequest, MessageFilter


class _Waiter:
    __slots__ = ("offset", "filter", "conn", "event")

    def __init__(self, offset: int, mfilter: MessageFilter | None, conn: Connection | None) -> None:
        self.offset = offset
        self.filter = mfilter
        self.conn = conn
        self.event = anyio.Event()


class PullHoldService:
    """Parks pulls until data arrives for their queue or they time out."""

    def __init__(self) -> None:
        self.waiters: dict[tuple[str, int], list[_Waiter]] = {}

    @property
    def held(self) -> int:
        return sum(len(ws) for ws in self.waiters.values())

    async def hold(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        mfilter: MessageFilter | None,
        timeout: float,
        current_max: Callable[[], int],
        conn: Connection | None = None,
    ) -> bool:
        """Wait until the queue grows past ``offset`` (a message that may match) or ``timeout``,
        or until the periodic check finds ``conn`` (the consumer's) closed.

        Returns True when woken (by data, or for a closed connection), False on timeout.
        ``current_max`` is re-read after parking, so a message stored between the failed read
        and the park is never missed.
        """
        key = (topic, queue_id)
        w = _Waiter(offset, mfilter, conn)
        waiters = self.waiters.get(key)
        if waiters is None:
            waiters = self.waiters[key] = []
        waiters.append(w)
        try:
            if current_max() > offset:
                return True
            with anyio.move_on_after(timeout):
                await w.event.wait()
            return w.event.is_set()
        finally:
            waiters.remove(w)
            if not waiters and self.waiters.get(key) is waiters:
                del self.waiters[key]

    def notify(self, topic: str, queue_id: int, max_offset: int, tags_code: int | None,
               properties: dict[str, str] | None) -> None:
        """Wake waiters of (topic, queue) that can now read and whose filter may match."""
        waiters = self.waiters.get((topic, queue_id))
        if not waiters:
            return
        for w in waiters:
            if max_offset <= w.offset or w.event.is_set():
                continue
            f = w.filter
            if f is not None and tags_code is not None:
                if not f.match_tags_code(tags_code):
                    continue
                if f.needs_properties and properties and not f.match_properties(properties):
                    continue
            w.event.set()

    def check_all(self, get_max_offset: Callable[[str, int], int]) -> int:
        """The periodic re-check: wake every waiter whose queue grew (filters re-checked by the pull)
        or whose connection closed."""
        woken = 0
        for (topic, qid), waiters in list(self.waiters.items()):
            newest = get_max_offset(topic, qid)
            for w in waiters:
                if (newest > w.offset or (w.conn is not None and w.conn.closed)) and not w.event.is_set():
                    w.event.set()
                    woken += 1
        return woken

    def wake_all(self) -> None:
        for waiters in self.waiters.values():
            for w in waiters:
                w.event.set()


class ArrivalNotifier:
    """The long-poll ``CommitLogDispatcher``: cheap when nobody waits (one dict truthiness test).

    ``lazy_requests``: it reads a batch only while a pull waits, so the store may hand it batches that
    build their requests on first use (the mmap store's direct reput path)."""

    lazy_requests = True

    def __init__(self, hold: PullHoldService) -> None:
        self.hold = hold

    def dispatch(self, requests: Sequence[DispatchRequest]) -> None:
        waiting = self.hold.waiters
        if not waiting:
            return
        notify = self.hold.notify
        for r in requests:
            if (r.topic, r.queue_id) in waiting:
                notify(r.topic, r.queue_id, r.consume_queue_offset + 1, r.tags_code, r.properties)
