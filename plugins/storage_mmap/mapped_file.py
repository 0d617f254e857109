"""Fixed-size memory-mapped files named by their 20-digit start offset (reference §0, §1.3).

A ``MappedFile`` is one segment: the event loop writes through ``mm``; a flush
worker thread calls :meth:`MappedFile.sync` (``fdatasync`` releases the GIL, which
``mmap.flush`` does not on 3.11). New files are created under a temporary name,
sized, and renamed, so a crash never leaves a short file behind.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger("rmq.store")

OS_PAGE = 4096


class StoreError(Exception):
    """The store cannot load or continue; the message names the file and the problem."""


def offset_name(offset: int) -> str:
    return f"{offset:020d}"


class MappedFile:
    """One mmapped segment. ``wrote`` is the write position; ``flushed`` the position known durable."""

    __slots__ = ("path", "start", "size", "fd", "mm", "wrote", "flushed", "first_in_queue", "_closed")

    def __init__(self, path: Path, start: int, size: int, fd: int, mm: mmap.mmap) -> None:
        self.path = path
        self.start = start
        self.size = size
        self.fd = fd
        self.mm = mm
        self.wrote = 0
        self.flushed = 0
        self.first_in_queue = False
        self._closed = False

    @classmethod
    def open(cls, path: Path, size: int, create: bool = False, preallocate: bool = False) -> MappedFile:
        """Map an existing file of exactly ``size`` bytes, or create one (atomically) when ``create``."""
        if create and not path.exists():
            tmp = path.with_name(path.name + ".tmp")
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                if preallocate:
                    try:
                        os.posix_fallocate(fd, 0, size)  # no SIGBUS on a full disk mid-write
                    except OSError:
                        os.ftruncate(fd, size)
                else:
                    os.ftruncate(fd, size)
            except BaseException:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
            os.close(fd)
            os.replace(tmp, path)
        fd = os.open(path, os.O_RDWR)
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise StoreError(f"{path}: file is {actual} bytes, expected {size} (segment size in config)")
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, int(path.name), size, fd, mm)

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def full(self) -> bool:
        return self.wrote >= self.size

    def sync(self) -> None:
        """Force this file's dirty pages to disk (blocking: call off the event loop)."""
        if not self._closed:
            os.fdatasync(self.fd)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.mm.close()
        except BufferError:  # a memoryview is still exported; the mapping dies with it
            log.warning("%s: mapping still referenced at close", self.path)
        os.close(self.fd)

    def destroy(self) -> None:
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"<MappedFile {self.path.name} wrote={self.wrote} flushed={self.flushed}>"


def list_segments(directory: Path) -> list[Path]:
    """Segment files of a directory in offset order; leftovers of interrupted creation are removed."""
    if not directory.is_dir():
        return []
    out = []
    for p in directory.iterdir():
        if p.name.endswith(".tmp"):
            p.unlink(missing_ok=True)
            continue
        if p.is_file() and p.name.isdigit():
            out.append(p)
    out.sort(key=lambda p: int(p.name))
    return out


class Preallocator:
    """Creates the next commitlog segment on a background thread so the roll never waits on disk."""

    def __init__(self, preallocate_blocks: bool) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rmq-alloc")
        self._pending: dict[Path, Future[MappedFile]] = {}
        self._lock = threading.Lock()
        self._blocks = preallocate_blocks

    def request(self, path: Path, size: int) -> None:
        with self._lock:
            if path not in self._pending and not path.exists():
                self._pending[path] = self._pool.submit(self._create, path, size)

    def _create(self, path: Path, size: int) -> MappedFile:
        mf = MappedFile.open(path, size, create=True, preallocate=self._blocks)
        try:
            mf.mm.madvise(mmap.MADV_WILLNEED)  # fault zero pages in now, not on the put path
        except (AttributeError, OSError):
            pass
        return mf

    def take(self, path: Path, size: int, timeout: float = 5.0) -> MappedFile:
        """The pre-created file (waiting up to ``timeout``), else a synchronous creation."""
        with self._lock:
            fut = self._pending.pop(path, None)
        if fut is not None:
            try:
                return fut.result(timeout=timeout)
            except Exception as e:  # fall back to creating it here; report why
                log.warning("pre-allocation of %s failed (%s); creating synchronously", path, e)
        return MappedFile.open(path, size, create=True, preallocate=self._blocks)

    def close(self) -> None:
        """Stop; a pre-created but unused file stays on disk (a full-size zero file is harmless)."""
        with self._lock:
            pending = list(self._pending.values())
            self._pending.clear()
        for fut in pending:
            try:
                fut.result(timeout=10).close()
            except Exception:
                pass
        self._pool.shutdown(wait=True)
