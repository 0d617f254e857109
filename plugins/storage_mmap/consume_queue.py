"""Consume queues: per (topic, queue) arrays of 20-byte units pointing into the commitlog (reference §2).

Files are created lazily, named by the byte offset of their first unit. Units are
written by :class:`ConsumeQueueDispatcher` from the reput loop, one batch per loop
turn; the duplicate guards make replays after a crash harmless.
"""

from __future__ import annotations

import logging
import shutil
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

from rmq.kernel.model import DispatchRequest
from rmq.plugins.storage_mmap.mapped_file import MappedFile, StoreError, list_segments, offset_name

log = logging.getLogger("rmq.store")

UNIT: Final = struct.Struct(">qiq")  # commitLogOffset, size, tagsCode
UNIT_SIZE: Final = 20
INT_MAX: Final = 0x7FFFFFFF
BLANK_UNIT: Final = UNIT.pack(0, INT_MAX, 0)


def cq_file_size(configured: int) -> int:
    """RocketMQ rounds the configured size up to a whole number of units."""
    return -(-configured // UNIT_SIZE) * UNIT_SIZE


class ConsumeQueue:
    """One queue's unit files. Offsets in the API are queue offsets (unit numbers)."""

    __slots__ = ("topic", "queue_id", "dir", "file_size", "files", "min_logic", "max_phys")

    def __init__(self, topic: str, queue_id: int, directory: Path, file_size: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.dir = directory
        self.file_size = file_size
        self.files: list[MappedFile] = []
        self.min_logic = 0  # byte position of the first unit still pointing at the commitlog
        self.max_phys = 0  # end (offset + size) of the last unit's record: the duplicate guard

    # ------------------------------------------------------------------ files

    def load(self) -> None:
        prev_end = None
        for path in list_segments(self.dir):
            start = int(path.name)
            if start % self.file_size or (prev_end is not None and start != prev_end):
                raise StoreError(
                    f"{path}: consume queue file does not follow its predecessor"
                    f" (mappedFileSizeConsumeQueue {self.file_size} changed?)"
                )
            mf = MappedFile.open(path, self.file_size)
            mf.wrote = mf.flushed = self.file_size
            self.files.append(mf)
            prev_end = start + self.file_size

    def _new_file(self, start: int) -> MappedFile:
        self.dir.mkdir(parents=True, exist_ok=True)
        mf = MappedFile.open(self.dir / offset_name(start), self.file_size, create=True)
        self.files.append(mf)
        return mf

    def file_for(self, byte_offset: int) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        i = byte_offset // self.file_size - files[0].start // self.file_size
        if 0 <= i < len(files):
            return files[i]
        return None

    @property
    def max_offset(self) -> int:
        files = self.files
        if not files:
            return 0
        last = files[-1]
        return (last.start + last.wrote) // UNIT_SIZE

    @property
    def min_offset(self) -> int:
        return self.min_logic // UNIT_SIZE

    # ------------------------------------------------------------------ write

    def put(self, phys: int, size: int, tags: int, cq_offset: int) -> None:
        """Append one unit; replays (already covered offsets) are ignored."""
        if phys + size <= self.max_phys:
            return
        expected = cq_offset * UNIT_SIZE
        files = self.files
        if not files:
            last = self._new_file(expected - expected % self.file_size)
            last.first_in_queue = True
        else:
            last = files[-1]
            if last.wrote >= last.size:
                last = self._new_file(last.end)
        if cq_offset != 0:
            if last.first_in_queue and last.wrote == 0:
                # First file of a queue that starts mid-way: blank units below, minimum at the first real one.
                self.min_logic = expected
                fill = expected - last.start
                if fill > 0:
                    last.mm[0:fill] = BLANK_UNIT * (fill // UNIT_SIZE)
                    last.wrote = fill
            current = last.start + last.wrote
            if expected < current:
                return
            if expected != current:
                log.error(
                    "consume queue %s-%d: expected unit at %d but the queue ends at %d (order bug?)",
                    self.topic,
                    self.queue_id,
                    expected,
                    current,
                )
        UNIT.pack_into(last.mm, last.wrote, phys, size, tags)
        last.wrote += UNIT_SIZE
        self.max_phys = phys + size

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

    def recover(self) -> None:
        """Find the last valid unit (offset >= 0 and size > 0) scanning the last three files (§2.5)."""
        files = self.files
        if not files:
            return
        idx = max(0, len(files) - 3)
        max_phys = 0
        stop = len(files)
        for i in range(idx, len(files)):
            f = files[i]
            pos = 0
            for phys, size, _tags in UNIT.iter_unpack(f.mm):
                if phys < 0 or size <= 0:
                    break
                pos += UNIT_SIZE
                if not (phys == 0 and size == INT_MAX):
                    max_phys = phys + size
            f.wrote = f.flushed = pos
            if pos < f.size:
                stop = i + 1
                break
        for f in files[stop:]:
            f.destroy()
        del files[stop:]
        self.max_phys = max_phys

    def truncate_dirty(self, phys_end: int) -> None:
        """Remove trailing units whose record starts at or beyond ``phys_end`` (the recovered commitlog end)."""
        files = self.files
        while files:
            last = files[-1]
            keep = 0
            cut = False
            for phys, size, _tags in UNIT.iter_unpack(last.mm[0 : last.wrote]):
                if phys >= phys_end and not (phys == 0 and size == INT_MAX):
                    cut = True
                    break
                keep += UNIT_SIZE
            if not cut:
                break
            if keep == 0 and len(files) > 1:
                files.pop().destroy()
                continue
            last.mm[keep : last.wrote] = bytes(last.wrote - keep)
            last.wrote = min(last.wrote, keep)
            last.flushed = min(last.flushed, keep)
            break
        self.max_phys = 0
        for phys, size, _tags in self._units_backwards():
            if not (phys == 0 and size == INT_MAX):
                self.max_phys = phys + size
                break

    def _units_backwards(self) -> Iterator[tuple[int, int, int]]:
        for f in reversed(self.files):
            for pos in range(f.wrote - UNIT_SIZE, -1, -UNIT_SIZE):
                yield UNIT.unpack_from(f.mm, pos)

    def correct_min_offset(self, phys_min: int) -> None:
        """Minimum = first unit of the first file whose record is still in the commitlog."""
        if not self.files:
            self.min_logic = 0
            return
        f = self.files[0]
        for i, (phys, size, _tags) in enumerate(UNIT.iter_unpack(f.mm[0 : f.wrote])):
            if phys >= phys_min and not (phys == 0 and size == INT_MAX):
                self.min_logic = max(self.min_logic, f.start + i * UNIT_SIZE)
                return
        self.min_logic = max(self.min_logic, f.start + f.wrote)

    def delete_expired(self, phys_min: int) -> int:
        """Delete leading files (never the last) whose last unit points below ``phys_min``."""
        deleted = 0
        while len(self.files) > 1:
            f = self.files[0]
            if f.wrote < UNIT_SIZE:
                break
            phys, _size, _tags = UNIT.unpack_from(f.mm, f.wrote - UNIT_SIZE)
            if phys >= phys_min:
                break
            self.files.pop(0).destroy()
            deleted += 1
        if deleted:
            self.correct_min_offset(phys_min)
        return deleted

    def flush(self, least_pages: int) -> None:
        """Force written units to disk (worker thread)."""
        for f in list(self.files):
            if f.wrote > f.flushed and (
                least_pages <= 0 or f.wrote >= f.size or f.wrote // 4096 - f.flushed // 4096 >= least_pages
            ):
                w = f.wrote
                try:
                    f.sync()
                except OSError:  # deleted by retention or delete_topics meanwhile
                    continue
                f.flushed = w

    def close(self) -> None:
        for f in self.files:
            f.close()

    def destroy(self) -> None:
        for f in self.files:
            f.destroy()
        self.files = []
        shutil.rmtree(self.dir, ignore_errors=True)


class ConsumeQueueTable:
    """All consume queues of a store, by topic then queue id."""

    def __init__(self, root: Path, file_size: int) -> None:
        self.root = root
        self.file_size = cq_file_size(file_size)
        self.queues: dict[str, dict[int, ConsumeQueue]] = {}
        self.logics_ts = 0  # store time of the last unit written (checkpoint logicsMsgTimestamp)

    def load(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for tdir in sorted(self.root.iterdir()):
            if not tdir.is_dir():
                continue
            for qdir in sorted(tdir.iterdir()):
                if not (qdir.is_dir() and qdir.name.lstrip("-").isdigit()):
                    continue
                cq = ConsumeQueue(tdir.name, int(qdir.name), qdir, self.file_size)
                cq.load()
                self.queues.setdefault(tdir.name, {})[cq.queue_id] = cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        t = self.queues.get(topic)
        return t.get(queue_id) if t is not None else None

    def create(self, topic: str, queue_id: int) -> ConsumeQueue:
        t = self.queues.setdefault(topic, {})
        cq = t.get(queue_id)
        if cq is None:
            cq = t[queue_id] = ConsumeQueue(
                topic, queue_id, self.root / topic / str(queue_id), self.file_size
            )
        return cq

    def __iter__(self) -> Iterator[ConsumeQueue]:
        for t in list(self.queues.values()):
            yield from list(t.values())

    def max_phys(self) -> int:
        return max((cq.max_phys for cq in self), default=0)

    def delete_topic(self, topic: str) -> None:
        t = self.queues.pop(topic, None)
        if t:
            for cq in t.values():
                cq.destroy()
        shutil.rmtree(self.root / topic, ignore_errors=True)

    def close(self) -> None:
        for cq in self:
            cq.close()


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
                cq = self.table.create(r.topic, r.queue_id)
            cq.put(r.commit_log_offset, r.msg_size, r.tags_code, r.consume_queue_offset)
            last_ts = r.store_timestamp
        if last_ts:
            self.table.logics_ts = last_ts
