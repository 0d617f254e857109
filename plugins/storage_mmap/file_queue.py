"""``MappedFileQueue``: a directory of fixed-size mapped files that together hold one byte stream.

The commitlog and every consume queue are such a stream (RocketMQ's MappedFileQueue):
segments named by the 20-digit byte offset of their first byte, each exactly
``file_size`` long, each starting where the previous one ends. This class owns what
both do alike: loading and checking the sequence, finding the segment of an offset,
creating the next one, cutting the stream at an offset, deleting the oldest segment,
flushing, closing. What differs stays with them: the commitlog creates segments
through its pre-allocator and recovers records; a consume queue reserves disk a chunk
at a time and recovers units. Index files are not a stream and do not use it.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from rmq.plugins.storage_mmap.mapped_file import OS_PAGE, MappedFile, list_segments, offset_name

log = logging.getLogger("rmq.store")


class MappedFileQueue:
    """``files`` in offset order; ``file_size`` bytes each; ``dir`` holds them."""

    __slots__ = ("dir", "file_size", "files")

    def __init__(self, directory: Path, file_size: int) -> None:
        self.dir = directory
        self.file_size = file_size
        self.files: list[MappedFile] = []

    # ------------------------------------------------------------------ load

    def load_segments(self, *, reserve: int | None, fix_size: bool, size_name: str) -> tuple[str, list[Path]]:
        """Map the directory's segments in order, each marked written and flushed to its end.

        Stops at the first segment that does not fit the sequence (see :meth:`check_segments`)
        and returns ``("<path>: <why>", [that segment, every later one])``; ``("", [])`` when all fit.
        """
        problem, good, bad = self.check_segments(fix_size=fix_size, size_name=size_name)
        for path in good:
            mf = MappedFile.open(path, self.file_size, reserve=reserve)
            mf.wrote = mf.flushed = self.file_size
            self.files.append(mf)
        return problem, bad

    def check_segments(self, *, fix_size: bool, size_name: str) -> tuple[str, list[Path], list[Path]]:
        """``(why, segments that fit, the first one that does not and every later one)`` of the
        directory, mapping nothing. A segment does not fit for a name that is no multiple of
        ``file_size``, a gap before it, a length over ``file_size``, or a shorter length unless
        ``fix_size`` resizes it (logged); ``size_name`` is the config key named in the reason (``why``
        is "" when all fit). A longer segment is never cut and nothing is resized unless every segment
        fits: both mean the store was written with another size (a RocketMQ store's 1 GiB segments
        under a smaller setting), and cutting or padding its files would lose or change its data."""
        prev_end: int | None = None
        paths = list_segments(self.dir)
        short: list[tuple[Path, int]] = []
        for n, path in enumerate(paths):
            start = int(path.name)
            problem = ""
            if start % self.file_size:
                problem = f"name is not a multiple of {size_name} {self.file_size} (was the file size changed?)"
            elif prev_end is not None and start != prev_end:
                problem = f"file {offset_name(prev_end)} is missing before it"
            else:
                try:
                    actual = path.stat().st_size
                except OSError as e:
                    actual, problem = self.file_size, f"cannot stat it ({e})"
                if actual > self.file_size:
                    problem = (f"file is {actual} bytes, more than {size_name} {self.file_size}: set {size_name} "
                               f"to the size the store was written with")
                elif actual != self.file_size and fix_size:
                    short.append((path, actual))
                elif actual != self.file_size:
                    problem = f"file is {actual} bytes, expected {self.file_size}"
            if problem:  # the segments that fit end before the first one left short
                fit = paths.index(short[0][0]) if short else n
                return f"{path}: {problem}", paths[:fit], paths[n:]
            prev_end = start + self.file_size
        for path, actual in short:
            log.warning("%s: segment is %d bytes, expected %d; resized (missing bytes read as zeros)",
                        path, actual, self.file_size)
            os.truncate(path, self.file_size)
        return "", paths, []

    # ------------------------------------------------------------------ offsets

    @property
    def start_offset(self) -> int:
        """Byte offset of the first mapped byte (0 when empty)."""
        files = self.files
        return files[0].start if files else 0

    @property
    def end_offset(self) -> int:
        """Byte offset just past the last written byte (0 when empty)."""
        files = self.files
        if not files:
            return 0
        last = files[-1]
        return last.start + last.wrote

    def file_for(self, offset: int) -> MappedFile | None:
        """The segment holding byte ``offset``, or None (arithmetic: segments are contiguous)."""
        files = self.files
        if not files:
            return None
        i = offset // self.file_size - files[0].start // self.file_size
        if 0 <= i < len(files):
            return files[i]
        return None

    # ------------------------------------------------------------------ grow, cut, delete

    def open_new(self, start: int, reserve: int | None) -> MappedFile:
        """Create segment ``start`` (``reserve`` bytes of disk reserved, see ``MappedFile.open``) and
        append it; ``DiskFullError`` leaves the queue as it was."""
        self.dir.mkdir(parents=True, exist_ok=True)
        mf = MappedFile.open(self.dir / offset_name(start), self.file_size, create=True, reserve=reserve)
        self.files.append(mf)
        return mf

    def cut(self, offset: int) -> None:
        """Remove every byte from ``offset`` on: later segments deleted, the rest of that one zeroed."""
        files = self.files
        while files and files[-1].start >= offset:
            files.pop().destroy()
        if files:
            f = files[-1]
            pos = offset - f.start
            zero_from(f, pos)
            f.wrote = pos
            f.readahead(False)  # written again from here (see MappedFile.readahead)
            f.flushed = min(f.flushed, pos)

    def delete_first(self) -> MappedFile:
        """Unmap and delete the oldest segment (retention)."""
        f = self.files.pop(0)
        f.destroy()
        return f

    # ------------------------------------------------------------------ flush, close

    def flush_files(self, least_pages: int) -> None:
        """Force written bytes of every segment to disk (blocking: a worker thread). With
        ``least_pages`` > 0 a segment waits until that many 4 KiB pages are dirty or it is full."""
        for f in list(self.files):
            if flush_due(f.wrote, f.flushed, f.size, least_pages):
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


def flush_due(wrote: int, flushed: int, size: int, least_pages: int) -> bool:
    """Whether a segment with these marks is flushed now: anything unflushed when ``least_pages`` <= 0,
    else once that many 4 KiB pages are dirty or the segment is full."""
    return wrote > flushed and (least_pages <= 0 or wrote >= size or wrote // 4096 - flushed // 4096 >= least_pages)


def data_extents(f: MappedFile, pos: int) -> Iterator[tuple[int, int]]:
    """``[a, b)`` ranges of ``f`` from ``pos`` on that may hold data (``SEEK_DATA``/``SEEK_HOLE``;
    the whole rest where the filesystem cannot say). Reading a sparse file's holes through the
    mapping fills memory with zero pages: a whole file's worth per queue at start-up, 22 GB for
    the 10,000 queues of issue #26, so what scans for data or zeroes a tail reads only these."""
    a = pos
    while a < f.size:
        try:
            a = os.lseek(f.fd, a, os.SEEK_DATA)
            b = min(f.size, os.lseek(f.fd, a, os.SEEK_HOLE))
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data from ``a`` on
                return
            b = f.size
        if a >= f.size:
            return
        yield a, b
        a = max(b, a + 1)


def has_data(f: MappedFile, pos: int) -> bool:
    """True when ``f`` holds a non-zero byte at or after ``pos``."""
    step = 1 << 16
    zeros = bytes(step)
    for a, b in data_extents(f, pos):
        for c in range(a, b, step):
            chunk = f.mm[c : min(b, c + step)]
            if chunk != zeros[: len(chunk)]:
                return True
    return False


def zero_from(f: MappedFile, pos: int) -> None:
    """Zero the non-zero pages of ``f`` from ``pos`` (never writing into a page that is all zeros,
    which may be a hole of a sparse file: writing there could need a block the disk lacks)."""
    if pos >= f.size:
        return
    first = min(f.size, -(-pos // OS_PAGE) * OS_PAGE)
    if f.mm[pos:first].count(0) != first - pos:
        f.mm[pos:first] = bytes(first - pos)
    zeros = bytes(OS_PAGE)
    for a, b in data_extents(f, first):
        for c in range(a - a % OS_PAGE, b, OS_PAGE):
            page = f.mm[c : min(f.size, c + OS_PAGE)]
            if page != zeros[: len(page)]:
                f.mm[c : c + len(page)] = zeros[: len(page)]
