"""Fixed-size memory-mapped files named by their 20-digit start offset (reference §0, §1.3).

A ``MappedFile`` is one segment: the event loop writes through ``mm``; a flush
worker thread calls :meth:`MappedFile.sync` (``fdatasync`` releases the GIL, which
``mmap.flush`` does not on 3.11). New files are created under a temporary name,
sized, and renamed, so a crash never leaves a short file behind.

Full disks: a store never writes through a mapping into bytes the filesystem has
not reserved. A write into a hole of a sparse file needs a block at page-fault
time, and when none is left the kernel answers with SIGBUS, which ends the process
with no log line. So every range is reserved with ``posix_fallocate`` before it is
written (:meth:`MappedFile.reserve`): a commitlog segment whole at creation,
consume-queue and index files in chunks as they grow. A reservation that fails
raises :class:`DiskFullError` (an ``OSError``) where the caller can refuse the
write cleanly.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from rmq.kernel import RateLimitedLog

log = logging.getLogger("rmq.store")
_limited = RateLimitedLog(log, interval=60.0)

OS_PAGE = 4096
_ALLOCATED_MARGIN = 1 << 20
_FULL_ERRNOS = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EFBIG))
_FD_ERRNOS = frozenset((errno.EMFILE, errno.ENFILE))


class StoreError(Exception):
    """The store cannot load or continue; the message names the file and the problem."""


class DiskFullError(OSError):
    """A store file could not be created or have its disk space reserved. ``remark`` says why:
    "disk full: ..." for a space error (or another I/O error, flagged as such), "too many open
    files (EMFILE|ENFILE): ..." when the process or the system is out of file descriptors, which is
    no disk problem and must not be reported as one (raising the limit, or fewer connections and
    mapped queues, is the cure; writes resume by themselves once descriptors free up)."""

    def __init__(self, what: str, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror)
        self.what = what
        self.cause = cause
        reason = cause.strerror or str(cause)
        if cause.errno in _FD_ERRNOS:
            scope = "this process" if cause.errno == errno.EMFILE else "the whole system"
            self.remark = (
                f"too many open files ({errno.errorcode[cause.errno]}): cannot {what}: [Errno {cause.errno}] "
                f"{reason}; {scope} is out of file descriptors: raise `ulimit -n` (LimitNOFILE) or fs.file-max,"
                " or lower the number of connections and mapped queues"
            )
            return
        kind = "" if cause.errno in _FULL_ERRNOS else " (not a space error; check the store's filesystem)"
        self.remark = f"disk full: cannot {what}: [Errno {cause.errno}] {reason}{kind}"

    @property
    def out_of_descriptors(self) -> bool:
        return self.cause.errno in _FD_ERRNOS

    def __str__(self) -> str:
        return self.remark


def full_remark(e: OSError, what: str) -> str:
    """The remark of a failed reservation or file creation: "disk full: ..." or "too many open files ..."."""
    return e.remark if isinstance(e, DiskFullError) else str(DiskFullError(what, e))


def offset_name(offset: int) -> str:
    return f"{offset:020d}"


def _fallocate(fd: int, start: int, length: int, what: str) -> None:
    if length <= 0:
        return
    try:
        os.posix_fallocate(fd, start, length)
    except OSError as e:
        raise DiskFullError(what, e) from e


_MADV_POPULATE_WRITE = 23  # Linux 5.14+; Python 3.11's mmap has no name for it
_POPULATE_CHUNK = 1 << 20
_POPULATE = sys.platform == "linux" and not os.environ.get("RMQ_NO_POPULATE")  # (the A/B switch for bench/)


class MappedFile:
    """One mmapped segment. ``wrote`` is the write position; ``flushed`` the position known durable;
    ``reserved`` how many leading bytes have disk blocks (nothing past it may be written)."""

    __slots__ = (
        "path",
        "start",
        "size",
        "fd",
        "mm",
        "wrote",
        "flushed",
        "reserved",
        "first_in_queue",
        "populated",
        "_closed",
    )

    def __init__(self, path: Path, start: int, size: int, fd: int, mm: mmap.mmap, reserved: int) -> None:
        self.path = path
        self.start = start
        self.size = size
        self.fd = fd
        self.mm = mm
        self.wrote = 0
        self.flushed = 0
        self.reserved = reserved
        self.first_in_queue = False
        self.populated = 0 if _POPULATE else size  # a put past it maps the next pages (populate_ahead)
        self._closed = False

    def populate_ahead(self, wrote: int) -> None:
        """Map the next pages past ``wrote`` writable in one call: a put then finds them mapped, where each
        first write to a page of a fresh segment took a page fault of its own (a third of rmqd's CPU
        under batches, by perf)."""
        start = wrote & ~(mmap.PAGESIZE - 1)
        length = min(_POPULATE_CHUNK, self.reserved - start)  # (not past the blocks it owns: they are dirtied)
        self.populated = start + length // 2 if length == _POPULATE_CHUNK else self.reserved  # next: half-way
        if length > 0:
            try:
                self.mm.madvise(_MADV_POPULATE_WRITE, start, length)
            except (OSError, ValueError):  # an older kernel (< 5.14), a closed map: faults as before
                self.populated = self.size

    def readahead(self, on: bool) -> MappedFile:
        """Off for a file being written: a write fault then maps one page, where readahead's large folios
        made each flush write a whole folio for a 1 KiB record (measured: SYNC_FLUSH dirtied 1.65 GB/s for
        4 MB/s of messages) and filled megabytes of page cache with a sparse queue file's zeros (3 ms and
        6 MB a queue at start-up). On again for a full commitlog segment, for reads."""
        try:
            self.mm.madvise(mmap.MADV_NORMAL if on else mmap.MADV_RANDOM)
        except (AttributeError, OSError, ValueError):  # a platform without madvise; a closed map
            pass
        return self

    @classmethod
    def open(cls, path: Path, size: int, create: bool = False, reserve: int | None = None) -> MappedFile:
        """Map an existing file of exactly ``size`` bytes, or create one (atomically) when ``create``.

        ``reserve``: bytes to reserve (``posix_fallocate``) from the start of a file created here;
        None leaves it sparse and marks it wholly reserved (the unsafe ``fallocate = false`` mode).
        An existing file counts as reserved up to its allocated blocks' worth (``st_blocks``, less a
        margin), exact enough for files this store created and conservative for sparse ones.
        """
        if create and not path.exists():
            tmp = path.with_name(path.name + ".tmp")
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                if reserve is not None:
                    _fallocate(fd, 0, min(reserve, size), f"reserve {min(reserve, size)} bytes for {path}")
                os.ftruncate(fd, size)
            except BaseException:
                os.close(fd)
                tmp.unlink(missing_ok=True)
                raise
            os.close(fd)
            os.replace(tmp, path)
            reserved = size if reserve is None else min(reserve, size)
        else:
            reserved = -1
        fd = os.open(path, os.O_RDWR)
        try:
            st = os.fstat(fd)
            if st.st_size != size:
                raise StoreError(
                    f"{path}: file is {st.st_size} bytes, expected {size} (segment size in config)"
                )
            if reserved < 0:  # st_blocks may count a filesystem's own metadata blocks: keep a margin
                allocated = st.st_blocks * 512 - _ALLOCATED_MARGIN
                reserved = size if reserve is None else max(0, min(size, allocated // OS_PAGE * OS_PAGE))
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, int(path.name), size, fd, mm, reserved)

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def full(self) -> bool:
        return self.wrote >= self.size

    def reserve(self, upto: int) -> None:
        """Make sure bytes ``[0, upto)`` have disk blocks; ``DiskFullError`` when the disk cannot.

        Cheap when already reserved (one comparison); the caller writes only below ``reserved``.
        """
        upto = min(upto, self.size)
        if upto <= self.reserved:
            return
        _fallocate(
            self.fd,
            self.reserved,
            upto - self.reserved,
            f"reserve {upto - self.reserved} bytes in {self.path}",
        )
        self.reserved = upto

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
    """Segment files of a directory in offset order; leftovers of interrupted creation are removed.

    A symlink is never taken for a segment: the store creates none, and mapping one
    read-write would write wherever it points.
    """
    if not directory.is_dir():
        return []
    out = []
    for p in directory.iterdir():
        if p.name.endswith(".tmp"):
            p.unlink(missing_ok=True)
            continue
        if p.is_symlink():
            _limited.warning("symlink-segment", "%s: a symlink where a store file belongs; ignored", p)
            continue
        if p.is_file() and p.name.isdigit():
            out.append(p)
    out.sort(key=lambda p: int(p.name))
    return out


class Preallocator:
    """Creates commitlog segments on a background thread so neither a roll nor a retry waits on disk.

    ``request`` starts a creation; ``take`` returns its result (or creates synchronously).
    A failed creation leaves no file behind and surfaces as ``DiskFullError`` from ``take``.
    """

    def __init__(self, reserve: bool) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rmq-alloc")
        self._pending: dict[Path, Future[MappedFile]] = {}
        self._lock = threading.Lock()
        self._reserve = reserve

    def request(self, path: Path, size: int) -> Future[MappedFile]:
        with self._lock:
            fut = self._pending.get(path)
            if fut is None or (fut.done() and fut.exception() is not None):
                fut = self._pending[path] = self._pool.submit(self._create, path, size)
            return fut

    def _create(self, path: Path, size: int) -> MappedFile:
        try:
            mf = MappedFile.open(path, size, create=True, reserve=size if self._reserve else None)
        except DiskFullError as e:
            _limited.warning("prealloc", "pre-allocation of the next commitlog segment failed: %s", e.remark)
            raise
        return mf

    def adopt(self, mf: MappedFile) -> None:
        """Keep an existing, empty segment for when ``take`` asks for it (a roll after a restart)."""
        mf.wrote = mf.flushed = 0
        fut: Future[MappedFile] = Future()
        fut.set_result(mf)
        with self._lock:
            old = self._pending.pop(mf.path, None)
            self._pending[mf.path] = fut
        if old is not None and old.done() and old.exception() is None and old.result() is not mf:
            old.result().close()

    def take(self, path: Path, size: int, timeout: float = 5.0) -> MappedFile:
        """The pre-created file (waiting up to ``timeout``), else a synchronous creation."""
        with self._lock:
            fut = self._pending.pop(path, None)
        if fut is not None:
            try:
                return fut.result(timeout=timeout)
            except DiskFullError:
                pass  # try once more here: space may have been freed since
            except Exception as e:
                log.warning("pre-allocation of %s failed (%s); creating synchronously", path, e)
        return MappedFile.open(path, size, create=True, reserve=size if self._reserve else None)

    def discard_after(self, start: int) -> None:
        """Delete pre-created segments that would start after ``start`` (the log was cut shorter: a
        segment beyond the next one would leave a gap that recovery refuses)."""
        with self._lock:
            drop = [p for p in self._pending if p.name.isdigit() and int(p.name) > start]
            futs = [self._pending.pop(p) for p in drop]
        for fut in futs:
            try:
                fut.result(timeout=10).destroy()
            except Exception:
                pass

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
