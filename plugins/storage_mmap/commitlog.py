"""The commitlog: contiguous fixed-size segments, one writer, end-of-file blank rule (reference §1.3, §4).

This module owns the segment list, rolling, reading by physical offset, flushing
and the recovery scan. Record building lives in ``codec``; the store's put path
reserves space here and copies the packed bytes in with one slice assignment.

Recovery differs from RocketMQ's in one way: a record that fails validation in the
middle of the data costs only that record. The scan resynchronises on the next
record whose magic, lengths, CRC and PHYSICALOFFSET all check out, records the
skipped range in :class:`Holes` (logged with file, offset and size), and keeps
going; only bytes after the last valid record are cut. Nothing in a hole is ever
dispatched or served.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from rmq.plugins.storage_mmap.codec import BLANK, BLANK_LEN
from rmq.plugins.storage_mmap.file_queue import MappedFileQueue
from rmq.plugins.storage_mmap.mapped_file import (
    OS_PAGE,
    DiskFullError,
    MappedFile,
    Preallocator,
    StoreError,
    offset_name,
)
from rmq.plugins.storage_mmap.scan import check_record, resync, scan_segment
from rmq.protocol.common import MAGIC_BLANK

log = logging.getLogger("rmq.store")

PROGRESS_MIN_BYTES = 256 * 1024 * 1024  # recoveries scanning less than this do not log progress
HOLES_LOGGED = 10  # holes reported one line each; the rest in the summary line


class Holes:
    """Commitlog ranges ``[start, end)`` that recovery found corrupt, sorted and disjoint."""

    __slots__ = ("_starts", "_ends")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def __bool__(self) -> bool:
        return bool(self._starts)

    def __len__(self) -> int:
        return len(self._starts)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(list(zip(self._starts, self._ends, strict=True)))

    @property
    def total(self) -> int:
        return sum(e - s for s, e in self)

    def add(self, start: int, end: int) -> None:
        if end <= start:
            return
        i = bisect.bisect_left(self._ends, start)  # first hole that may touch [start, end)
        j = i
        while j < len(self._starts) and self._starts[j] <= end:
            start = min(start, self._starts[j])
            end = max(end, self._ends[j])
            j += 1
        self._starts[i:j] = [start]
        self._ends[i:j] = [end]

    def find(self, pos: int) -> int:
        """End of the hole holding ``pos``, or -1."""
        i = bisect.bisect_right(self._starts, pos) - 1
        return self._ends[i] if i >= 0 and pos < self._ends[i] else -1

    def next_start(self, pos: int) -> int:
        """Start of the first hole at or after ``pos``, or -1."""
        i = bisect.bisect_left(self._starts, pos)
        return self._starts[i] if i < len(self._starts) else -1

    def bytes_between(self, start: int, end: int) -> int:
        return sum(max(0, min(e, end) - max(s, start)) for s, e in self)

    def drop_below(self, offset: int) -> None:
        while self._starts and self._ends[0] <= offset:
            del self._starts[0], self._ends[0]

    def drop_above(self, offset: int) -> None:
        """Forget holes at or past ``offset`` and clip one that spans it (the log was cut there)."""
        while self._starts and self._starts[-1] >= offset:
            del self._starts[-1], self._ends[-1]
        if self._ends and self._ends[-1] > offset:
            self._ends[-1] = offset


@attrs.define
class ScanResult:
    """What the commitlog recovery scan found (``seen`` as :func:`scan.scan_segment` fills it)."""

    end: int
    replay_from: int
    scan_start: int
    seen: dict[tuple[bytes, int], list[int]]


class CommitLog(MappedFileQueue):
    """The segment stream (a :class:`MappedFileQueue`) plus rolling, flushing and recovery."""

    def __init__(
        self, directory: Path, file_size: int, preallocate: bool = True, fallocate: bool = True
    ) -> None:
        super().__init__(directory, file_size)
        self._prealloc = Preallocator(fallocate)
        self._ahead = preallocate
        self._fallocate = fallocate
        self._flush_lock = threading.Lock()
        self.flushed_where = 0
        self.last_flushed_ts = 0  # store time of the last record known flushed (checkpoint physic)
        # (write offset, store ts of the record ending there): one tuple so a flush thread reads both at once
        self.tail: tuple[int, int] = (0, 0)
        self.holes = Holes()
        self._roll_failed = False  # a roll found no room for the next segment: prepare_writable makes it

    # ------------------------------------------------------------------ files

    def load(self) -> None:
        """Map every segment; each must be named by a multiple of the size and follow the previous one.

        A segment shorter than the configured size (truncated) is resized to it and logged: its
        lost bytes read as zeros, which recovery treats like any other damage. A longer segment or
        a name out of sequence is a ``StoreError`` (refuse to start, nothing touched): the store was
        written with another mappedFileSizeCommitLog, as RocketMQ refuses such a store.
        """
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # a full disk: no segments yet, the first put reports it
            log.warning("%s: cannot create the commitlog directory (%s)", self.dir, e)
        problem, _rest = self.load_segments(
            reserve=0 if self._fallocate else None, fix_size=True, size_name="mappedFileSizeCommitLog"
        )
        if problem:
            raise StoreError(problem)

    # the put path reads these per record: the base class's properties themselves, no extra call
    min_offset = MappedFileQueue.start_offset
    max_offset = MappedFileQueue.end_offset

    def _path(self, start: int) -> Path:
        return self.dir / offset_name(start)

    def _new_file(self, start: int) -> MappedFile:
        """Segment ``start``, created with all its blocks reserved; ``DiskFullError`` if they cannot be."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # creating the file below reports the problem
        mf = self._prealloc.take(self._path(start), self.file_size)
        mf.readahead(False)  # every segment this log writes (see MappedFile.readahead)
        try:
            mf.reserve(mf.size)  # a no-op for a file created here; an adopted one may lack blocks
        except DiskFullError:
            self._prealloc.adopt(mf)
            raise
        if self._ahead:
            self._prealloc.request(self._path(start + self.file_size), self.file_size)
        return mf

    def current(self) -> MappedFile:
        """The segment being written (created at offset 0 for an empty store)."""
        files = self.files
        if files and not files[-1].full:
            return files[-1]
        start = files[-1].end if files else 0
        mf = self._new_file(start)
        files.append(mf)
        return mf

    def reserve(self, length: int) -> MappedFile:
        """The segment that will take ``length`` bytes at its write position, rolling if needed.

        Rolling writes the blank record ``[remaining, MAGIC_BLANK]`` so that a record never
        crosses a segment and no record ends in a segment's last 7 bytes. The next segment
        is created first: when the disk cannot hold it, ``DiskFullError`` leaves everything
        as it was.
        """
        f = self.current()
        remaining = f.size - f.wrote
        if length + BLANK_LEN > remaining:
            if length + BLANK_LEN > f.size:
                raise ValueError(f"record of {length} bytes cannot fit a {f.size}-byte segment")
            try:
                nxt = self._new_file(f.end)
            except DiskFullError:
                self._roll_failed = True
                raise
            self._roll_failed = False
            BLANK.pack_into(f.mm, f.wrote, remaining, MAGIC_BLANK)
            f.wrote = f.size
            f.readahead(True)
            self.tail = (f.end, self.tail[1])
            self.files.append(nxt)
            f = nxt
        return f

    def prepare_writable(self) -> None:
        """Make the next put possible without touching the disk (blocking: worker thread).

        Reserves the rest of the segment being written, or creates the one that comes
        next. ``DiskFullError`` while the disk cannot hold it.
        """
        files = self.files
        if files and not files[-1].full and not self._roll_failed:
            files[-1].reserve(files[-1].size)
            return
        start = files[-1].end if files else 0
        self._prealloc.request(self._path(start), self.file_size).result()
        self._roll_failed = False

    def read(self, offset: int, size: int) -> bytes | None:
        """``size`` bytes at ``offset`` if they lie inside one readable segment."""
        f = self.file_for(offset)
        if f is None:
            return None
        pos = offset - f.start
        if pos < 0 or pos + size > f.wrote:
            return None
        return f.mm[pos : pos + size]

    # ------------------------------------------------------------------ flush

    def flush(self, least_pages: int = 0) -> int:
        """Force written bytes to disk; blocking (worker thread). Returns the flushed offset.

        With ``least_pages`` > 0 a segment is only forced when that many 4 KiB pages are
        dirty (or it is full); 0 forces whatever is written.
        """
        with self._flush_lock:
            target, ts = self.tail
            where = self.flushed_where
            if target <= where:
                return where
            while where < target:
                f = self.file_for(where)
                if f is None:
                    break
                upto = min(target, f.end) - f.start
                if upto < f.size and least_pages > 0 and (upto // 4096 - f.flushed // 4096) < least_pages:
                    break
                f.sync()
                f.flushed = max(f.flushed, upto)
                where = f.start + upto
            if where > self.flushed_where:
                self.flushed_where = where
                if where >= target:
                    self.last_flushed_ts = ts
            return self.flushed_where

    # ------------------------------------------------------------------ recovery

    def recover(
        self,
        normal: bool,
        check_crc: bool,
        min_timestamp: int,
        stale_span: int,
        scan_all: bool = False,
        on_cut: Callable[[str], None] | None = None,
    ) -> ScanResult:
        """Find the valid data, record the corrupt ranges inside it, cut what follows it.

        Normal: scan from the third-last segment. Abnormal: from the newest segment whose
        first record was stored at or before ``min_timestamp`` (checkpoint); ``replay_from``
        is then the first record stored after it, where dispatch must be replayed (for a
        normal recovery it is ``end``). ``scan_all`` scans every segment. ``stale_span`` is
        the longest record or batch: a run of zeros that long proves nothing valid follows.
        """
        self.holes = Holes()
        files = self.files
        if not files:
            self.flushed_where = 0
            self.tail = (0, 0)
            return ScanResult(0, 0, 0, {})
        if scan_all:
            idx = 0
        elif normal:
            idx = max(0, len(files) - 3)
        else:
            idx = 0
            for i in range(len(files) - 1, -1, -1):
                size, ts = check_record(files[i].mm, 0, files[i].size, False, files[i].start)
                if size > 0 and ts != 0 and ts <= min_timestamp:
                    idx = i
                    break
        scan_start = files[idx].start
        seen: dict[tuple[bytes, int], list[int]] = {}
        total_bytes = (len(files) - idx) * self.file_size
        report = total_bytes >= PROGRESS_MIN_BYTES
        next_report = time.monotonic() + 1.0
        expect = scan_start  # where the next record should start if nothing were damaged
        last_ts = 0
        replay_from = -1
        dirty = False
        found: list[tuple[int, int, Any]] = []
        for i in range(idx, len(files)):
            f = files[i]
            mm = f.mm
            pos = 0
            while True:
                stop, state, ts, first_after = scan_segment(
                    mm, pos, f.size, f.start, check_crc, seen, min_timestamp
                )
                if stop > pos or state == 1:
                    if f.start + pos != expect:  # valid data resumes after a damaged range
                        found.append((expect, f.start + pos, (self.file_for(expect) or f).path))
                    dirty = False
                    expect = f.end if state == 1 else f.start + stop
                    if stop > pos:
                        last_ts = ts
                    if replay_from < 0 and first_after >= 0:
                        replay_from = first_after
                if state == 1:
                    break
                cand = resync(mm, stop, f.size, f.start, check_crc, stale_span)
                if cand < 0:
                    if f.start + stop == expect:
                        dirty = bytes(mm[stop : stop + 8]).count(0) != min(8, f.size - stop)
                    break
                pos = cand
            if report and time.monotonic() >= next_report:
                next_report = time.monotonic() + 1.0
                done = f.end - scan_start
                log.info(
                    "recovering commitlog: %d%% (%d of %d MiB scanned)",
                    100 * done // total_bytes,
                    done >> 20,
                    total_bytes >> 20,
                )
        end = expect
        for n, (start, stop, path) in enumerate(found):
            self.holes.add(start, stop)
            if n < HOLES_LOGGED:
                log.error(
                    "commitlog: corrupt data at offset %d (%s): skipped %d bytes to the next valid record at %d",
                    start,
                    path,
                    stop - start,
                    stop,
                )
        if found:
            log.error(
                "commitlog recovery skipped %d corrupt range(s), %d bytes in all; every later valid record is kept",
                len(found),
                self.holes.total,
            )
        if report:
            log.info("recovering commitlog: 100%% (%d MiB scanned), end offset %d", total_bytes >> 20, end)
        if normal or replay_from < 0 or replay_from > end:
            replay_from = end
        self._truncate(end, dirty, stale_span, on_cut)
        self.flushed_where = end
        self.tail = (end, last_ts)
        return ScanResult(end, replay_from, scan_start, seen)

    def _truncate(self, end: int, dirty: bool, span: int, on_cut: Callable[[str], None] | None) -> None:
        """Drop everything after ``end``: later segments are deleted, the rest of the last is zeroed.

        Zeroing the stale tail (only the part that is not zero already) means a record
        written later at ``end`` can never be followed by an old, valid-looking one.
        """
        files = self.files
        f = self.file_for(end)
        if f is None and files and end == files[-1].end:
            f = files[-1]
        cut = 0
        keep: list[MappedFile] = []
        for m in files:
            if m is f or m.start < end:
                keep.append(m)
                continue
            stale = _stale_extent(m, 0, span, zero=False)
            if stale == 0 and f is not None and m.start == f.end:
                self._prealloc.adopt(m)  # the pre-created next segment: keep it (and its blocks) for the roll
            else:
                cut += stale
                m.destroy()
        self.files = keep
        for m in keep:
            m.wrote = m.flushed = m.size
        if f is not None:
            pos = end - f.start
            f.wrote = f.flushed = pos
            if pos < f.size:
                f.readahead(False)  # the tail is written again (see MappedFile.readahead)
            cut += _stale_extent(f, pos, span, zero=True)
        if cut > 0 and dirty and on_cut is not None:
            where = f.path if f is not None else self.dir
            on_cut(f"commitlog recovery cut {cut} bytes after offset {end} in {where} (invalid record there)")

    def close(self) -> None:
        self._prealloc.close()
        super().close()
        self.files = []

    def delete_first(self) -> MappedFile:
        f = super().delete_first()
        self.holes.drop_below(self.min_offset)
        return f


def _stale_extent(f: MappedFile, pos: int, span: int, zero: bool) -> int:
    """Bytes of leftover data in ``f`` after ``pos`` (up to the last non-zero byte before a zero run
    of at least ``span``), zeroing them when ``zero``. Reads only the data plus ``span``."""
    mm = f.mm
    step = 1 << 16
    zeros = bytes(step)
    p = pos
    last_nonzero = pos
    while p < f.size and p - last_nonzero < span + step:
        q = min(f.size, p + step)
        chunk = mm[p:q]
        if chunk != zeros[: q - p]:
            last_nonzero = p + len(chunk.rstrip(b"\x00"))
            if zero:  # page by page: writing into a hole of a sparse file could need a block
                for a in range(0, q - p, OS_PAGE):
                    page = chunk[a : a + OS_PAGE]
                    if page != zeros[: len(page)]:
                        mm[p + a : p + a + len(page)] = zeros[: len(page)]
        p = q
    return last_nonzero - pos
