"""The commitlog: contiguous fixed-size segments, one writer, end-of-file blank rule (reference §1.3, §4).

This module owns the segment list, rolling, reading by physical offset, flushing
and the recovery scan. Record building lives in ``codec``; the store's put path
reserves space here and copies the packed bytes in with one slice assignment.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rmq.plugins.storage_mmap.codec import BLANK, BLANK_LEN, check_record
from rmq.plugins.storage_mmap.mapped_file import (
    MappedFile,
    Preallocator,
    StoreError,
    list_segments,
    offset_name,
)
from rmq.protocol.common import MAGIC_BLANK

log = logging.getLogger("rmq.store")

PROGRESS_MIN_BYTES = 256 * 1024 * 1024  # recoveries scanning less than this do not log progress


class CommitLog:
    def __init__(
        self, directory: Path, file_size: int, preallocate: bool = True, fallocate: bool = True
    ) -> None:
        self.dir = directory
        self.file_size = file_size
        self.files: list[MappedFile] = []
        self._prealloc = Preallocator(fallocate) if preallocate else None
        self._fallocate = fallocate
        self._flush_lock = threading.Lock()
        self.flushed_where = 0
        self.last_flushed_ts = 0  # store time of the last record known flushed (checkpoint physic)
        # (write offset, store ts of the record ending there): one tuple so a flush thread reads both at once
        self.tail: tuple[int, int] = (0, 0)

    # ------------------------------------------------------------------ files

    def load(self) -> None:
        """Map every segment; each must have exactly the configured size and follow the previous one."""
        self.dir.mkdir(parents=True, exist_ok=True)
        prev_end = None
        for path in list_segments(self.dir):
            start = int(path.name)
            if start % self.file_size:
                raise StoreError(
                    f"{path}: name is not a multiple of mappedFileSizeCommitLog {self.file_size}"
                    " (was the segment size changed?)"
                )
            if prev_end is not None and start != prev_end:
                raise StoreError(f"{self.dir}: segment {offset_name(prev_end)} is missing before {path.name}")
            mf = MappedFile.open(path, self.file_size)
            mf.wrote = mf.flushed = self.file_size
            self.files.append(mf)
            prev_end = start + self.file_size

    @property
    def min_offset(self) -> int:
        files = self.files
        return files[0].start if files else 0

    @property
    def max_offset(self) -> int:
        files = self.files
        if not files:
            return 0
        last = files[-1]
        return last.start + last.wrote

    def file_for(self, offset: int) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        i = offset // self.file_size - files[0].start // self.file_size
        if 0 <= i < len(files):
            return files[i]
        return None

    def _path(self, start: int) -> Path:
        return self.dir / offset_name(start)

    def _new_file(self, start: int) -> MappedFile:
        path = self._path(start)
        if self._prealloc is not None:
            mf = self._prealloc.take(path, self.file_size)
            self._prealloc.request(self._path(start + self.file_size), self.file_size)
        else:
            mf = MappedFile.open(path, self.file_size, create=True, preallocate=self._fallocate)
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
        crosses a segment and no record ends in a segment's last 7 bytes.
        """
        f = self.current()
        remaining = f.size - f.wrote
        if length + BLANK_LEN > remaining:
            if length + BLANK_LEN > f.size:
                raise ValueError(f"record of {length} bytes cannot fit a {f.size}-byte segment")
            BLANK.pack_into(f.mm, f.wrote, remaining, MAGIC_BLANK)
            f.wrote = f.size
            self.tail = (f.end, self.tail[1])
            f = self.current()
        return f

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
        on_cut: Callable[[str], None] | None = None,
    ) -> tuple[int, int]:
        """Find the end of valid data, truncate after it, and return ``(end, replay_from)``.

        Normal: scan from the third-last segment. Abnormal: from the newest segment whose
        first record was stored at or before ``min_timestamp`` (checkpoint); ``replay_from``
        is then the first record stored after it, where dispatch must be replayed (for a
        normal recovery it is ``end``). ``stale_span`` is the longest record or batch: a run
        of zeros that long proves nothing stale follows.
        """
        files = self.files
        if not files:
            self.flushed_where = 0
            self.tail = (0, 0)
            return 0, 0
        if normal:
            idx = max(0, len(files) - 3)
        else:
            idx = 0
            for i in range(len(files) - 1, -1, -1):
                size, ts = check_record(files[i].mm, 0, files[i].size, False)
                if size > 0 and ts != 0 and ts <= min_timestamp:
                    idx = i
                    break
        replay_from = -1
        total_bytes = (len(files) - idx) * self.file_size
        report = total_bytes >= PROGRESS_MIN_BYTES
        scanned = 0
        next_report = time.monotonic() + 1.0
        end = files[idx].start
        last_ts = 0
        dirty = False
        for i in range(idx, len(files)):
            f = files[i]
            mv = memoryview(f.mm)
            try:
                pos = 0
                limit = f.size
                while True:
                    size, ts = check_record(mv, pos, limit, check_crc)
                    if size > 0:
                        if replay_from < 0 and ts > min_timestamp:
                            replay_from = f.start + pos
                        pos += size
                        last_ts = ts
                        if report and time.monotonic() >= next_report:
                            next_report += 1.0
                            log.info(
                                "recovering commitlog: %d%% (%d of %d MiB scanned)",
                                100 * (scanned + pos) // total_bytes,
                                (scanned + pos) >> 20,
                                total_bytes >> 20,
                            )
                        continue
                    if size == 0:  # blank: this segment is complete
                        end = f.end
                    else:
                        end = f.start + pos
                        dirty = bytes(mv[pos : pos + 8]).count(0) != min(8, limit - pos)
                    break
            finally:
                mv.release()
            scanned += f.size
            if end < f.end:
                break
        if report:
            log.info("recovering commitlog: 100%% (%d MiB scanned), end offset %d", scanned >> 20, end)
        if normal or replay_from < 0:
            replay_from = end
        self._truncate(end, dirty, stale_span, on_cut)
        self.flushed_where = end
        self.tail = (end, last_ts)
        return end, replay_from

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
            else:
                cut += _stale_extent(m, 0, span, zero=False)
                m.destroy()
        self.files = keep
        for m in keep:
            m.wrote = m.flushed = m.size
        if f is not None:
            pos = end - f.start
            f.wrote = f.flushed = pos
            cut += _stale_extent(f, pos, span, zero=True)
        if cut > 0 and dirty and on_cut is not None:
            where = f.path if f is not None else self.dir
            on_cut(f"commitlog recovery cut {cut} bytes after offset {end} in {where} (invalid record there)")

    def close(self) -> None:
        if self._prealloc is not None:
            self._prealloc.close()
        for f in self.files:
            f.close()
        self.files = []

    def delete_first(self) -> MappedFile:
        f = self.files.pop(0)
        f.destroy()
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
            if zero:
                mm[p:q] = zeros[: q - p]
        p = q
    return last_nonzero - pos
