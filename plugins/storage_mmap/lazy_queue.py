"""Lazily mapped file queues: a store may hold far more queues than it may keep open (issue #26).

Every consume queue is a :class:`~rmq.plugins.storage_mmap.file_queue.MappedFileQueue`, and
each mapped file holds a descriptor and a mapping. Tens of thousands of queues cannot all be
mapped, so a :class:`LazyFileQueue` maps its files when it is first read or written
(``files``) and can be *parked*: unmapped, its files' marks (written, flushed, reserved) kept
so its bounds are answered without mapping it. The owning table decides which queues to
park (a clock over ``table.mapped``, bounded by :func:`mapped_bound`); a queue only tells it
when it maps or unmaps itself. A flush thread never maps a queue: a parked queue's unflushed
files are forced through a plain descriptor.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import TYPE_CHECKING

from rmq.plugins.storage_mmap.file_queue import MappedFileQueue, flush_due
from rmq.plugins.storage_mmap.mapped_file import MappedFile

if TYPE_CHECKING:
    from rmq.plugins.storage_mmap.queue_table import ConsumeQueueTable

_FILES = MappedFileQueue.files  # the slot under LazyFileQueue's lazy ``files`` property
Parked = tuple[int, Path, int, int, int, bool]  # start, path, wrote, flushed, reserved, first_in_queue


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


class LazyFileQueue(MappedFileQueue):
    """A ``MappedFileQueue`` whose files are mapped on first use and can be parked again.

    ``parked`` holds the files' marks while unmapped (None while mapped); ``used`` is the
    clock's bit: read or written since the table last looked. ``table`` (optional) keeps
    ``mapped``, the mapped queues in the clock's order.
    """

    __slots__ = ("table", "parked", "used")

    def __init__(self, directory: Path, file_size: int, table: ConsumeQueueTable | None = None) -> None:
        super().__init__(directory, file_size)
        self.table = table
        self.parked: list[Parked] | None = None  # the files while unmapped (``files`` maps them again)
        self.used = False

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
                mf = MappedFile.open(path, self.file_size, reserve=0).readahead(False)
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
                if flush_due(f.wrote, f.flushed, f.size, least_pages):
                    w = f.wrote
                    try:
                        f.sync()
                    except OSError:  # closed (parked, deleted) meanwhile: the parked state flushes it
                        continue
                    f.flushed = w
            return
        for i, (start, path, wrote, flushed, reserved, first) in enumerate(list(parked)):
            if flush_due(wrote, flushed, self.file_size, least_pages):
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
