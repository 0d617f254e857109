"""Consume queues: per (topic, queue) arrays of 20-byte units pointing into the commitlog (reference §2).

This module is one queue: the unit format, writing units (with the duplicate and gap
guards), reading them, and the queue's own recovery and retention. Its files are created
lazily, named by the byte offset of their first unit, and grow their disk reservation a
chunk at a time (never a write into unreserved bytes: see ``mapped_file``); they are mapped
on first use and parked again by the table (``lazy_queue``, ``queue_table``). A parked
queue keeps its bounds (``max_offset``, ``min_offset``, ``max_phys``), so offsets are
answered without mapping it. The start-up check against the commitlog is ``cq_verify``.

Holes: a unit ``(0, 2147483647, 0)`` (RocketMQ's own filler for the units before a
queue's first file) marks a queue offset whose record is gone: corrupt and skipped
by recovery. Queue offsets stay those written in the records, reads step over the
filler, and no offset is ever given to two messages.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from rmq.kernel import RateLimitedLog
from rmq.plugins.storage_mmap.file_queue import has_data
from rmq.plugins.storage_mmap.lazy_queue import _FILES, LazyFileQueue
from rmq.plugins.storage_mmap.mapped_file import MappedFile
from rmq.plugins.storage_mmap.scan import MIN_RECORD

if TYPE_CHECKING:
    from rmq.plugins.storage_mmap.queue_table import ConsumeQueueTable

log = logging.getLogger("rmq.store")
_limited = RateLimitedLog(log, interval=30.0)

UNIT: Final = struct.Struct(">qiq")  # commitLogOffset, size, tagsCode
UNIT_SIZE: Final = 20
INT_MAX: Final = 0x7FFFFFFF
BLANK_UNIT: Final = UNIT.pack(0, INT_MAX, 0)
RESERVE_CHUNK: Final = 64 * 1024  # disk reserved ahead of the write position of a queue file


def cq_file_size(configured: int) -> int:
    """RocketMQ rounds the configured size up to a whole number of units."""
    return -(-configured // UNIT_SIZE) * UNIT_SIZE


def _is_blank(phys: int, size: int) -> bool:
    return phys == 0 and size == INT_MAX


class ConsumeQueue(LazyFileQueue):
    """One queue's unit files. Offsets in the API are queue offsets (unit numbers); the byte
    stream underneath is a lazily mapped :class:`MappedFileQueue`.

    ``damage`` is set by loading/recovery when the queue had to be cut short (why); the
    store then replays dispatch from the end of its last good unit to rebuild the rest.
    """

    __slots__ = ("topic", "queue_id", "min_logic", "max_phys", "damage")

    def __init__(
        self,
        topic: str,
        queue_id: int,
        directory: Path,
        file_size: int,
        table: ConsumeQueueTable | None = None,
    ) -> None:
        super().__init__(directory, file_size, table)
        self.topic = topic
        self.queue_id = queue_id
        self.min_logic = 0  # byte position of the first unit still pointing at the commitlog
        self.max_phys = 0  # end (offset + size) of the last unit's record: the duplicate guard
        self.damage = ""

    @property
    def name(self) -> str:
        return f"{self.topic}/{self.queue_id}"

    # ------------------------------------------------------------------ files

    def load(self) -> None:
        """Find the queue's files (parked: nothing is mapped yet). One that does not fit the sequence
        (wrong size, a gap, a name that is no multiple of the file size) and every file after it
        are deleted and the queue is marked for rebuilding: consume queues are derived data, the
        commitlog has it all."""
        problem, good, bad = self.check_segments(fix_size=False, size_name="mappedFileSizeConsumeQueue")
        if problem:
            self.damage = problem
            for later in bad:
                later.unlink(missing_ok=True)
        _FILES.__set__(self, [])
        self.parked = [(int(p.name), p, self.file_size, self.file_size, 0, False) for p in good]

    def _new_file(self, start: int) -> MappedFile:
        return self.open_new(start, reserve=min(RESERVE_CHUNK, self.file_size)).readahead(False)

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
