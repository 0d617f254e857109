"""The consume queues of a store: found on disk, created for new (topic, queue) pairs, deleted
with their topic, kept within the mapped-files bound, and fed units by the dispatcher.

Paths: a topic name comes from clients, so a queue directory is only ever built by
``confined_path`` (and removed by ``remove_confined``) after the name passes RocketMQ's
topic rule; loading skips directories that fail either.

Lazy mapping (see ``lazy_queue``): :meth:`ConsumeQueueTable.trim` unmaps idle, flushed queues
(least recently used first, a clock) once more than ``max_mapped`` are mapped. ``trim`` runs
only where no file of a queue is in use: between queues at start-up, after a dispatch batch,
after a read, each flush round.

Units are written by :class:`ConsumeQueueDispatcher` from the reput loop, one batch per loop
turn; the queues' duplicate guards make replays harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmq.kernel import ConfinementError, DispatchRequest, RateLimitedLog, confined_path, remove_confined
from rmq.plugins.storage_mmap.checkpoint import Tombstones
from rmq.plugins.storage_mmap.consume_queue import ConsumeQueue, cq_file_size
from rmq.plugins.storage_mmap.lazy_queue import mapped_bound
from rmq.protocol import storepath
from rmq.protocol.names import validate_topic

if TYPE_CHECKING:
    from rmq.plugins.storage_mmap.commitlog import Holes

log = logging.getLogger("rmq.store")
_limited = RateLimitedLog(log, interval=30.0)


class ConsumeQueueTable:
    """All consume queues of a store, by topic then queue id.

    ``deleted`` remembers, per deleted topic, the commitlog offset at deletion
    (persisted in ``tombstones``): records below it never recreate the topic's queues,
    neither by a replay nor by the start-up rebuild of missing queues.
    """

    def __init__(
        self, root: Path, file_size: int, tombstones: Path | None = None, max_mapped: int = 4096
    ) -> None:
        self.root = root
        self.file_size = cq_file_size(file_size)
        self.queues: dict[str, dict[int, ConsumeQueue]] = {}
        self.mapped: dict[ConsumeQueue, None] = {}  # mapped queues, in the clock's order
        self.max_mapped = mapped_bound(max_mapped)
        self.logics_ts = 0  # store time of the last unit written (checkpoint logicsMsgTimestamp)
        self.holes: Holes | None = None
        self.tombstones = Tombstones(tombstones)
        self.deleted = self.tombstones.deleted  # the same dict, kept up to date by ``tombstones``

    def load(self) -> None:
        """Map every queue; skip (with a warning) directories that are not valid topics or that
        resolve outside the store, and symlinked queue directories."""
        self.tombstones.load()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            log.warning("%s: cannot create the consume-queue directory (%s)", self.root, e)
            return
        for tdir in sorted(self.root.iterdir()):
            if not tdir.is_dir():
                continue
            bad = validate_topic(tdir.name)
            if bad is not None or tdir.is_symlink():
                log.warning("%s: skipped (%s)", tdir, bad or "a symlink; the store creates none")
                continue
            for qdir in sorted(tdir.iterdir()):
                if not (qdir.is_dir() and qdir.name.lstrip("-").isdigit()):
                    continue
                try:
                    path = confined_path(self.root, tdir.name, qdir.name)
                except ConfinementError as e:
                    log.warning("%s: skipped (%s)", qdir, e)
                    continue
                if qdir.is_symlink():
                    log.warning("%s: skipped (a symlink; the store creates none)", qdir)
                    continue
                cq = ConsumeQueue(tdir.name, int(qdir.name), path, self.file_size, self)
                cq.load()  # parked: found, not mapped
                self.queues.setdefault(tdir.name, {})[cq.queue_id] = cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        t = self.queues.get(topic)
        return t.get(queue_id) if t is not None else None

    def create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, made (in memory; files come with the first unit) after checking the name.

        ``ConfinementError`` for a name that is not a valid topic or would leave the store.
        """
        t = self.queues.get(topic)
        cq = t.get(queue_id) if t is not None else None
        if cq is None:
            bad = validate_topic(topic)
            if bad is not None:
                raise ConfinementError(bad)
            path = confined_path(self.root, topic, str(queue_id))
            cq = ConsumeQueue(topic, queue_id, path, self.file_size, self)
            self.queues.setdefault(topic, {})[queue_id] = cq
            self.mapped[cq] = None
        return cq

    def trim(self) -> int:
        """Park idle queues while more than ``max_mapped`` are mapped: oldest first, a queue used
        since the last look gets a second chance (unflushed units are flushed later from the
        parked state). Call only where no queue's file is in use. Returns how many were parked."""
        over = len(self.mapped) - self.max_mapped
        if over <= 0:
            return 0
        target = over + self.max_mapped // 8  # a margin: not a trim at every call once at the bound
        parked = 0
        mapped = self.mapped
        for cq in list(mapped):
            if parked >= target:
                break
            if cq.used:
                cq.used = False
                del mapped[cq]
                mapped[cq] = None
                continue
            cq.park()
            parked += 1
        return parked

    def __iter__(self) -> Iterator[ConsumeQueue]:
        for t in list(self.queues.values()):
            yield from list(t.values())

    def max_phys(self) -> int:
        return max((cq.max_phys for cq in self), default=0)

    def delete_topic(self, topic: str, at_offset: int = -1) -> bool:
        """Forget a topic's queues and remove its directory (confined); False for a name that is
        not a valid topic (nothing is touched). ``at_offset`` >= 0 records a tombstone."""
        if validate_topic(topic) is not None:
            return False
        t = self.queues.pop(topic, None)
        if t:
            for cq in t.values():
                cq.destroy()
        try:
            remove_confined(self.root, topic)
        except (ConfinementError, OSError) as e:
            log.warning("delete topic %s: directory not removed (%s)", topic, e)
        if at_offset >= 0:
            self.tombstones.add(topic, at_offset)
        return True

    def prune_tombstones(self, phys_min: int) -> None:
        self.tombstones.prune(phys_min)

    def close(self) -> None:
        for cq in list(self.mapped):
            cq.close()
        self.mapped.clear()


class ConsumeQueueDispatcher:
    """Builds consume-queue units from dispatched records (NOT and COMMIT transaction types only).

    ``fast`` (the compiled store module, None on the pure path) writes the common run of units; each
    request it leaves (a new queue, a file roll, a gap, anything outside the common case) goes through
    the pure loop, which stays the reference: ``ConsumeQueue.put`` decides it."""

    def __init__(self, table: ConsumeQueueTable) -> None:
        self.table = table
        self.fast: Any = storepath.FAST

    def dispatch(self, requests: Sequence[DispatchRequest]) -> None:
        fast = self.fast
        if fast is None or type(requests) is not list:
            last_ts: Any = self._put(requests, 0)
        else:
            i, n, last_ts, queues = 0, len(requests), 0, self.table.queues
            while i < n:
                i, last_ts = fast.cq_put(requests, i, queues, last_ts)
                if i < n:
                    last_ts = self._put(requests[i : i + 1], last_ts)
                    i += 1
        if last_ts:
            self.table.logics_ts = last_ts

    def _put(self, requests: Sequence[DispatchRequest], last_ts: Any) -> Any:
        """The pure loop: each request's unit into its queue; the store timestamp of the last one put."""
        queues = self.table.queues
        for r in requests:
            tx = r.sys_flag & 0xC
            if tx == 4 or tx == 12:  # prepared / rollback
                continue
            t = queues.get(r.topic)
            cq = t.get(r.queue_id) if t is not None else None
            if cq is None:
                cq = self._create(r)
                if cq is None:
                    continue
            cq.put(r.commit_log_offset, r.msg_size, r.tags_code, r.consume_queue_offset)
            last_ts = r.store_timestamp
        return last_ts

    def _create(self, r: DispatchRequest) -> Any:
        """A new queue for ``r``, or None when the record must not make one (deleted topic, bad name)."""
        table = self.table
        gone = table.deleted.get(r.topic)
        if gone is not None and r.commit_log_offset < gone:
            return None
        try:
            return table.create(r.topic, r.queue_id)
        except ConfinementError as e:
            _limited.warning("cq-name", "record at %d not queued: %s", r.commit_log_offset, e)
            return None
