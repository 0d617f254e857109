"""The reput's direct path (issue #30): hand-offs straight into the consume queues and the index.

When the only dispatchers that need per-record objects are the store's own (consume queues, key
index) and the compiled store module serves, a reput turn hands its run of hand-off tuples to
``_faststore.reput_put``, which writes the consume-queue units and the index entries itself: no
``DispatchRequest`` per record, no per-record Python. The attached dispatchers that say so with a true
``lazy_requests`` attribute (the long-poll notifier reads requests only while a pull waits, the
replication notifier never) get a :class:`LazyRequests` batch that builds the very requests the
regular path would have, on first use. Any other attached dispatcher (a third party's, through the
kernel hook) keeps the regular path: it gets the request lists as always.

What the compiled call does not take (a new queue, a file roll of a consume queue or of the index, a
delayed message, a lone surrogate, a queue file's next reserve chunk, anything outside the common case)
stays in the hand-off list, and the regular path dispatches that record alone (on the same turn when it
is the first, else on the next), its ``ConsumeQueue.put`` and ``IndexFile.put_many`` being the reference. A failure of the call (a parked queue that cannot be mapped) also leaves the turn to the
regular path, whose retries and duplicate guards (a replay of what landed is skipped) then hold.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from rmq.plugins.storage_mmap.index import IndexDispatcher
from rmq.plugins.storage_mmap.queue_table import ConsumeQueueDispatcher

if TYPE_CHECKING:
    from rmq.plugins.storage_mmap.reput import ReputService

log = logging.getLogger("rmq.store")


class LazyRequests(Sequence[Any]):
    """A batch of DispatchRequests built on first use from the hand-offs it was given."""

    __slots__ = ("_build", "_take", "_offset", "_reqs")

    def __init__(self, build: Callable[[list[Any], int], tuple[list[Any], int]], take: list[Any], offset: int) -> None:
        self._build, self._take, self._offset = build, take, offset
        self._reqs: list[Any] | None = None

    def _list(self) -> list[Any]:
        if self._reqs is None:
            self._reqs = self._build(self._take, self._offset)[0]
        return self._reqs

    def __len__(self) -> int:
        return len(self._take)

    def __getitem__(self, i: Any) -> Any:
        return self._list()[i]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._list())


class DirectReput:
    """One reput's direct path; :meth:`run` is called per turn with the hand-offs it may take."""

    def __init__(self, reput: ReputService) -> None:
        self.reput = reput

    def usable(self) -> bool:
        """The compiled module serves every store dispatcher, and every attached one accepts lazy batches."""
        reput = self.reput
        fast = reput.fast
        if fast is None:
            return False
        store = reput.store
        builtin = reput.builtin
        if not builtin or type(builtin[0]) is not ConsumeQueueDispatcher or builtin[0].fast is not fast:
            return False
        if store.index is None:
            if len(builtin) != 1:
                return False
        elif len(builtin) != 2 or type(builtin[1]) is not IndexDispatcher or store.index.fast is not fast:
            return False
        return all(getattr(d, "lazy_requests", False) for d in reput.dispatchers[len(builtin):])

    def run(self, take: list[Any], offset: int) -> int:
        """Dispatch the leading records of ``take`` (starting at ``offset``); how many it took (0: none)."""
        reput = self.reput
        store = reput.store
        svc = store.index
        ix: list[Any] | None = None
        f: Any = None
        if svc is not None:
            if not svc.files or svc.files[-1].full:
                return 0  # the index file rolls: the regular path
            f = svc.files[-1]
            ix = [f.mm, f.slots, f.max_entries, f.entries_at, f.mf.reserved, f.count, f.begin_ts, f.begin_phy,
                  f.slot_count, f.end_phy, f.end_ts, svc.guard]
        table = store.cqs
        try:
            n, last_ts = reput.fast.reput_put(take, offset, table.queues, 0, ix)
        except Exception as e:  # the regular path retries, and says what fails
            log.debug("reput: direct path failed at %d (%r); regular path", offset, e)
            n = last_ts = 0
        finally:
            if ix is not None:
                f.count, f.begin_ts, f.begin_phy, f.slot_count, f.end_phy, f.end_ts, svc.guard = ix[5:]  # type: ignore[union-attr]
        if not n:
            return 0
        if last_ts:
            table.logics_ts = last_ts
        attached = reput.dispatchers[len(reput.builtin):]
        if attached:
            batch = LazyRequests(reput._handoff_requests, take[:n], offset)
            for d in attached:
                try:
                    d.dispatch(batch)
                except Exception:
                    log.exception("dispatcher %r failed on %d records; they are skipped for it", d, n)
        if store._dispatch_error:
            store._dispatch_error = ""
            store._update_writable()
        if len(table.mapped) > table.max_mapped:
            table.trim()
        return n
