"""Consume queues: per (topic, queue) arrays of 20-byte units pointing into the commitlog (reference §2).

Files are created lazily, named by the byte offset of their first unit, and grow
their disk reservation a chunk at a time (never a write into unreserved bytes: see
``mapped_file``). Units are written by :class:`ConsumeQueueDispatcher` from the reput
loop, one batch per loop turn; the duplicate guards make replays harmless.

Paths: a topic name comes from clients, so a queue directory is only ever built by
``confined_path`` (and removed by ``remove_confined``) after the name passes
RocketMQ's topic rule; loading skips directories that fail either.

Lazy mapping (issue #26): a store may hold tens of thousands of queues, far more than it
may keep open (a descriptor and a mapping per file). A queue's files are mapped when it is
first read or written (``files``), and :meth:`ConsumeQueueTable.trim` unmaps idle, flushed
queues (least recently used first, a clock) once more than ``max_mapped`` are mapped; a
parked queue keeps its bounds (``max_offset``, ``min_offset``, ``max_phys``), so offsets
are answered without mapping it. ``trim`` runs only where no file of a queue is in use:
between queues at start-up, after a dispatch batch, after a read, each flush round.

Holes: a unit ``(0, 2147483647, 0)`` (RocketMQ's own filler for the units before a
queue's first file) marks a queue offset whose record is gone: corrupt and skipped
by recovery. Queue offsets stay those written in the records, reads step over the
filler, and no offset is ever given to two messages.
"""

from __future__ import annotations

import logging
import mmap
import os
import resource
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rmq.kernel import ConfinementError, DispatchRequest, RateLimitedLog, confined_path, remove_confined
from rmq.plugins.storage_mmap.checkpoint import Tombstones
from rmq.plugins.storage_mmap.file_queue import MappedFileQueue, has_data
from rmq.plugins.storage_mmap.mapped_file import MappedFile, list_segments, offset_name
from rmq.plugins.storage_mmap.scan import MIN_RECORD
from rmq.protocol.names import validate_topic

if TYPE_CHECKING:
    from rmq.plugins.storage_mmap.commitlog import Holes

log = logging.getLogger("rmq.store")
_limited = RateLimitedLog(log, interval=30.0)

UNIT: Final = struct.Struct(">qiq")  # commitLogOffset, size, tagsCode
UNIT_SIZE: Final = 20
INT_MAX: Final = 0x7FFFFFFF
BLANK_UNIT: Final = UNIT.pack(0, INT_MAX, 0)
RESERVE_CHUNK: Final = 64 * 1024  # disk reserved ahead of the write position of a queue file


_FILES = MappedFileQueue.files  # the slot under ConsumeQueue's lazy ``files`` property
Parked = tuple[int, Path, int, int, int, bool]  # start, path, wrote, flushed, reserved, first_in_queue


def _no_readahead(mf: MappedFile) -> MappedFile:
    """A queue file is mostly a sparse tail: a fault's readahead would fill megabytes of page cache
    with its zeros (3 ms and 6 MB a queue at start-up, measured) for the few units read."""
    try:
        mf.mm.madvise(mmap.MADV_RANDOM)
    except (AttributeError, OSError):
        pass
    return mf


def cq_file_size(configured: int) -> int:
    """RocketMQ rounds the configured size up to a whole number of units."""
    return -(-configured // UNIT_SIZE) * UNIT_SIZE


def _is_blank(phys: int, size: int) -> bool:
    return phys == 0 and size == INT_MAX


class ConsumeQueue(MappedFileQueue):
    """One queue's unit files. Offsets in the API are queue offsets (unit numbers); the byte
    stream underneath is a :class:`MappedFileQueue`.

    ``damage`` is set by loading/recovery when the queue had to be cut short (why); the
    store then replays dispatch from the end of its last good unit to rebuild the rest.
    """

    __slots__ = ("topic", "queue_id", "min_logic", "max_phys", "table", "damage", "parked", "used")

    def __init__(
        self,
        topic: str,
        queue_id: int,
        directory: Path,
        file_size: int,
        table: ConsumeQueueTable | None = None,
    ) -> None:
        super().__init__(directory, file_size)
        self.topic = topic
        self.queue_id = queue_id
        self.min_logic = 0  # byte position of the first unit still pointing at the commitlog
        self.max_phys = 0  # end (offset + size) of the last unit's record: the duplicate guard
        self.table = table
        self.damage = ""
        self.parked: list[Parked] | None = None  # the files while unmapped (``files`` maps them again)
        self.used = False  # read or written since the last ``trim`` looked (the clock's bit)

    @property
    def name(self) -> str:
        return f"{self.topic}/{self.queue_id}"

    # ------------------------------------------------------------------ lazy mapping

    @property  # type: ignore[override]
    def files(self) -> list[MappedFile]:
        """The queue's mapped files, mapped now if the queue was parked."""
        if self.parked is not None:
            self._unpark()
        self.used = True
        return _FILES.__get__(self)  # type: ignore[no-any-return]

    @files.setter
    def files(self, value: list[MappedFile]) -> None:
        _FILES.__set__(self, value)

    @property
    def mapped(self) -> bool:
        return self.parked is None

    def _unpark(self) -> None:
        parked = self.parked
        assert parked is not None
        opened: list[MappedFile] = []
        try:
            for _start, path, wrote, flushed, reserved, first in parked:
                mf = _no_readahead(MappedFile.open(path, self.file_size, reserve=0))
                mf.wrote, mf.flushed, mf.first_in_queue = wrote, flushed, first
                mf.reserved = max(mf.reserved, reserved)
                opened.append(mf)
        except BaseException:
            for mf in opened:
                mf.close()
            raise
        _FILES.__set__(self, opened)
        self.parked = None
        if self.table is not None:
            self.table.mapped[self] = None

    def park(self) -> None:
        """Unmap the files (they stay on disk and in the page cache; ``files`` maps them again). The
        caller makes sure none of them is in use; ``flush_files`` still forces what is unflushed."""
        if self.parked is not None:
            return
        files: list[MappedFile] = _FILES.__get__(self)
        self.parked = [(f.start, f.path, f.wrote, f.flushed, f.reserved, f.first_in_queue) for f in files]
        for f in files:
            f.close()
        _FILES.__set__(self, [])
        if self.table is not None:
            self.table.mapped.pop(self, None)


    @property
    def end_offset(self) -> int:
        parked = self.parked
        if parked is not None:
            return parked[-1][0] + parked[-1][2] if parked else 0
        return MappedFileQueue.end_offset.__get__(self)  # type: ignore[attr-defined,no-any-return]

    def flush_files(self, least_pages: int) -> None:
        """As ``MappedFileQueue.flush_files``. Runs on a flush thread, which must never map a queue:
        a parked queue's unflushed files (parked before a flush reached them: their pages are in the
        page cache) are forced through a plain descriptor."""
        parked = self.parked
        if parked is None:
            for f in list(_FILES.__get__(self)):  # never ``self.files``: that would map a queue parked meanwhile
                if f.wrote > f.flushed and (least_pages <= 0 or f.wrote >= f.size
                                            or f.wrote // 4096 - f.flushed // 4096 >= least_pages):
                    w = f.wrote
                    try:
                        f.sync()
                    except OSError:  # closed (parked, deleted) meanwhile: the parked state flushes it
                        continue
                    f.flushed = w
            return
        for i, (start, path, wrote, flushed, reserved, first) in enumerate(list(parked)):
            if wrote > flushed and (least_pages <= 0 or wrote >= self.file_size
                                    or wrote // 4096 - flushed // 4096 >= least_pages):
                try:
                    fd = os.open(path, os.O_RDWR)
                except OSError:  # deleted meanwhile (retention, delete_topics)
                    continue
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
                parked[i] = (start, path, wrote, wrote, reserved, first)  # an orphan list if mapped meanwhile

    def close(self) -> None:
        if self.parked is None:
            for f in _FILES.__get__(self):
                f.close()
            if self.table is not None:
                self.table.mapped.pop(self, None)

    def destroy(self) -> None:
        if self.parked is not None:
            for p in self.parked:
                p[1].unlink(missing_ok=True)
            self.parked = None
            _FILES.__set__(self, [])
        else:
            MappedFileQueue.destroy(self)
        if self.table is not None:
            self.table.mapped.pop(self, None)

    # ------------------------------------------------------------------ files

    def load(self) -> None:
        """Find the queue's files (parked: nothing is mapped yet). One that does not fit the sequence
        (wrong size, a gap, a name that is no multiple of the file size) and every file after it
        are deleted and the queue is marked for rebuilding: consume queues are derived data, the
        commitlog has it all."""
        parked: list[Parked] = []
        prev_end: int | None = None
        paths = list_segments(self.dir)
        for n, path in enumerate(paths):
            start = int(path.name)
            problem = ""
            if start % self.file_size:
                problem = (f"name is not a multiple of mappedFileSizeConsumeQueue {self.file_size} "
                           "(was the file size changed?)")
            elif prev_end is not None and start != prev_end:
                problem = f"file {offset_name(prev_end)} is missing before it"
            else:
                try:
                    st = os.stat(path)
                except OSError as e:
                    problem = f"cannot stat it ({e})"
                else:
                    if st.st_size != self.file_size:
                        problem = f"file is {st.st_size} bytes, expected {self.file_size}"
            if problem:
                self.damage = f"{path}: {problem}"
                for later in paths[n:]:
                    later.unlink(missing_ok=True)
                break
            parked.append((start, path, self.file_size, self.file_size, 0, False))
            prev_end = start + self.file_size
        _FILES.__set__(self, [])
        self.parked = parked

    def _new_file(self, start: int) -> MappedFile:
        return _no_readahead(self.open_new(start, reserve=min(RESERVE_CHUNK, self.file_size)))

    @property
    def max_offset(self) -> int:
        return self.end_offset // UNIT_SIZE

    @property
    def min_offset(self) -> int:
        return self.min_logic // UNIT_SIZE

    # ------------------------------------------------------------------ write

    def put(self, phys: int, size: int, tags: int, cq_offset: int) -> None:
        """Append one unit at the queue offset the record carries; replays are ignored.

        ``DiskFullError`` (an OSError) when a file or its next chunk cannot be reserved;
        nothing is half-written then, and calling again with the same record is safe.
        """
        if phys + size <= self.max_phys:
            return
        files = self.files
        if not files:
            start = max(cq_offset, 0) * UNIT_SIZE
            last = self._new_file(start - start % self.file_size)
            last.first_in_queue = True
            self.min_logic = start
        else:
            last = files[-1]
            if last.wrote >= last.size:
                last = self._new_file(last.end)
        if cq_offset * UNIT_SIZE != last.start + last.wrote:
            placed = self._place(last, phys, cq_offset)
            if placed is None:
                return
            last = placed
        if last.wrote + UNIT_SIZE > last.reserved:
            last.reserve(last.wrote + RESERVE_CHUNK)
        UNIT.pack_into(last.mm, last.wrote, phys, size, tags)
        last.wrote += UNIT_SIZE
        self.max_phys = phys + size

    def _place(self, last: MappedFile, phys: int, cq_offset: int) -> MappedFile | None:
        """The file to append to when the record's queue offset is not the queue's next one
        (None: the record is queued already).

        A queue's first file may start mid-way (units below are filler). A gap that the
        commitlog's corrupt ranges since the queue's last record can explain is filled
        with filler units: those offsets belonged to skipped records. Anything else means
        the record's QUEUEOFFSET field is damaged (the CRC covers only the body), and the
        unit goes where the queue is: the queue's own order is the authority.
        """
        expected = cq_offset * UNIT_SIZE
        current = last.start + last.wrote
        if expected < current:
            unit = self.unit(cq_offset)
            if unit is not None and unit[0] == phys:
                return None
        if last.first_in_queue and last.wrote == 0 and len(self.files) == 1 and expected > current:
            self.min_logic = expected
            self._fill(last, expected)
            return self.files[-1]
        holes = self.table.holes if self.table is not None else None
        gap = (expected - current) // UNIT_SIZE
        if expected > current and holes and holes.bytes_between(self.max_phys, phys) // MIN_RECORD >= gap:
            log.warning(
                "consume queue %s: offsets %d..%d belonged to corrupt records; marked as holes",
                self.name,
                current // UNIT_SIZE,
                cq_offset - 1,
            )
            self._fill(last, expected)
            return self.files[-1]
        _limited.warning(
            "cq-misplaced",
            "consume queue %s: record at %d says queue offset %d but the queue is at %d; stored at %d",
            self.name,
            phys,
            cq_offset,
            current // UNIT_SIZE,
            current // UNIT_SIZE,
        )
        return last

    def _fill(self, last: MappedFile, upto: int) -> None:
        """Filler units from the queue's end to byte offset ``upto`` (across files if need be)."""
        while last.start + last.wrote < upto:
            if last.wrote >= last.size:
                last = self._new_file(last.end)
            n = min(upto - (last.start + last.wrote), last.size - last.wrote)
            last.reserve(last.wrote + n + RESERVE_CHUNK)
            last.mm[last.wrote : last.wrote + n] = BLANK_UNIT * (n // UNIT_SIZE)
            last.wrote += n
        if last.wrote >= last.size:
            self._new_file(last.end)

    # ------------------------------------------------------------------ read

    def slice(self, offset: int) -> tuple[MappedFile, int, int] | None:
        """(file, position of ``offset``, end of written units in that file), or None."""
        byte_offset = offset * UNIT_SIZE
        if byte_offset < self.min_logic:
            return None
        f = self.file_for(byte_offset)
        if f is None:
            return None
        pos = byte_offset - f.start
        if pos >= f.wrote:
            return None
        return f, pos, f.wrote

    def unit(self, offset: int) -> tuple[int, int, int] | None:
        s = self.slice(offset)
        if s is None:
            return None
        f, pos, _ = s
        return UNIT.unpack_from(f.mm, pos)

    def roll_next_file(self, offset: int) -> int:
        per_file = self.file_size // UNIT_SIZE
        return offset + per_file - offset % per_file

    # ------------------------------------------------------------------ recovery and retention

    def recover(self, scan_all: bool = False) -> None:
        """Find the last valid unit (offset >= 0 and size > 0) scanning the last three files (§2.5),
        or every file with ``scan_all``.

        Unlike RocketMQ, an invalid unit followed by more non-zero bytes is damage, not
        the end: the queue is cut there and marked for rebuilding from the commitlog.
        """
        files = self.files
        if not files:
            return
        idx = 0 if scan_all else max(0, len(files) - 3)
        for i in range(idx, len(files)):
            f = files[i]
            pos = 0
            for phys, size, _tags in UNIT.iter_unpack(f.mm):
                if phys < 0 or size <= 0:
                    break
                pos += UNIT_SIZE
            f.wrote = f.flushed = pos
            if pos < f.size:
                if has_data(f, pos) or any(has_data(g, 0) for g in files[i + 1 :]):
                    self._mark(f"unit {(f.start + pos) // UNIT_SIZE} is invalid and data follows it")
                self.cut(f.start + pos)
                break
        self.update_max_phys()

    def truncate_phys(self, phys_end: int) -> None:
        """Forget every unit whose record ends past commitlog offset ``phys_end`` (a replica cut its log)."""
        if self.max_phys <= phys_end:
            return
        cut_at = None
        for f in reversed(self.files):
            pos = f.wrote - UNIT_SIZE
            while pos >= 0:
                phys, size, _tags = UNIT.unpack_from(f.mm, pos)
                if not _is_blank(phys, size) and phys + size <= phys_end:
                    cut_at = f.start + pos + UNIT_SIZE
                    break
                pos -= UNIT_SIZE
            if cut_at is not None:
                break
        self.cut(cut_at if cut_at is not None else (self.files[0].start if self.files else 0))
        self.update_max_phys()

    def first_unit(self) -> tuple[int, int]:
        """(queue offset, phys) of the first real unit; (-1, -1) when there is none."""
        for f in self.files:
            for k, (phys, size, _tags) in enumerate(UNIT.iter_unpack(f.mm[0 : f.wrote])):
                if not _is_blank(phys, size):
                    return (f.start + k * UNIT_SIZE) // UNIT_SIZE, phys
        return -1, -1

    def drop_all(self, why: str) -> None:
        """Delete every file (the queue is rebuilt from the commitlog)."""
        self._mark(why)
        self.cut(self.files[0].start if self.files else 0)
        self.min_logic = 0
        self.update_max_phys()

    def _mark(self, why: str) -> None:
        if not self.damage:
            self.damage = why

    def update_max_phys(self) -> None:
        self.max_phys = 0
        for phys, size, _tags in self._units_backwards():
            if not _is_blank(phys, size):
                self.max_phys = phys + size
                break

    def _units_backwards(self) -> Iterator[tuple[int, int, int]]:
        for f in reversed(self.files):
            for pos in range(f.wrote - UNIT_SIZE, -1, -UNIT_SIZE):
                yield UNIT.unpack_from(f.mm, pos)

    def broken(self, byte_offset: int, why: str) -> None:
        """Cut the queue at a unit found wrong and mark it for rebuilding by replay."""
        self._mark(f"offset {byte_offset // UNIT_SIZE}: {why}")
        self.cut(byte_offset)
        self.update_max_phys()

    def correct_min_offset(self, phys_min: int) -> None:
        """Minimum = first unit of the first file whose record is still in the commitlog."""
        if not self.files:
            self.min_logic = 0
            return
        f = self.files[0]
        for i, (phys, size, _tags) in enumerate(UNIT.iter_unpack(f.mm[0 : f.wrote])):
            if phys >= phys_min and not _is_blank(phys, size):
                self.min_logic = max(self.min_logic, f.start + i * UNIT_SIZE)
                return
        self.min_logic = max(self.min_logic, f.start + f.wrote)

    def delete_expired(self, phys_min: int) -> int:
        """Delete leading files (never the last) whose last real unit points below ``phys_min``."""
        if self.parked is not None and len(self.parked) <= 1:
            return 0  # nothing to delete: not worth mapping it
        deleted = 0
        while len(self.files) > 1:
            f = self.files[0]
            last_phys = -1
            for pos in range(f.wrote - UNIT_SIZE, -1, -UNIT_SIZE):
                phys, size, _tags = UNIT.unpack_from(f.mm, pos)
                if not _is_blank(phys, size):
                    last_phys = phys
                    break
            if f.wrote < UNIT_SIZE or last_phys >= phys_min:
                break
            self.delete_first()
            deleted += 1
        if deleted:
            self.correct_min_offset(phys_min)
        return deleted


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


def mapped_bound(wanted: int) -> int:
    """How many queues may be mapped at once: ``wanted``, but at most an eighth of the descriptors
    this process may open (a mapped file holds two: its own and the one ``mmap`` duplicates), so
    queues alone never take more than a quarter of them."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        soft = resource.RLIM_INFINITY
    if soft == resource.RLIM_INFINITY:
        return max(1, wanted)
    return max(1, min(wanted, soft // 8))


class ConsumeQueueDispatcher:
    """Builds consume-queue units from dispatched records (NOT and COMMIT transaction types only)."""

    def __init__(self, table: ConsumeQueueTable) -> None:
        self.table = table

    def dispatch(self, requests: Sequence[DispatchRequest]) -> None:
        queues = self.table.queues
        last_ts = 0
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
        if last_ts:
            self.table.logics_ts = last_ts

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
