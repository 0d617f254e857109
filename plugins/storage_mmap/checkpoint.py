"""The ``checkpoint`` file (4096 bytes, three big-endian longs) and the ``abort``/``lock`` markers (§4.1-4.2)."""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
from pathlib import Path
from typing import Final

from rmq.plugins.storage_mmap.mapped_file import StoreError

CHECKPOINT_SIZE: Final = 4096
_THREE: Final = struct.Struct(">qqq")


class Checkpoint:
    """physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp; persisted only by :meth:`flush`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                os.ftruncate(fd, CHECKPOINT_SIZE)
            elif size != CHECKPOINT_SIZE:
                raise StoreError(f"{path}: checkpoint is {size} bytes, expected {CHECKPOINT_SIZE}")
            self._mm = mmap.mmap(fd, CHECKPOINT_SIZE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.physic_ts, self.logics_ts, self.index_ts = _THREE.unpack_from(self._mm, 0)

    def min_timestamp(self) -> int:
        """min(physic, logics) - 3 s: everything stored before it is known flushed and dispatched."""
        return max(0, min(self.physic_ts, self.logics_ts) - 3000)

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self.index_ts)

    def flush(self) -> None:
        """Write and force (blocking; fine on a worker thread)."""
        _THREE.pack_into(self._mm, 0, self.physic_ts, self.logics_ts, self.index_ts)
        os.fdatasync(self._fd)

    def close(self) -> None:
        self._mm.close()
        os.close(self._fd)


class StoreLock:
    """``lock`` file with an exclusive flock: a second store on the same directory fails fast."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(
                self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB
            )  # per open file: same-process stores collide too
        except OSError:
            os.close(self._fd)
            raise StoreError(f"{path}: store directory is locked by another running store") from None
        os.ftruncate(self._fd, 0)
        os.write(self._fd, b"lock")

    def release(self) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
