"""The small metadata files: ``checkpoint`` (4096 bytes, big-endian longs), the ``abort``/``lock``
markers (§4.1-4.2) and the deleted-topic tombstones.

The checkpoint is written with ``pwrite`` rather than through a mapping: a write that
finds no space then fails with ENOSPC instead of killing the process with SIGBUS,
and a store on a full disk keeps its times in memory until the file can be written.
Its values only steer abnormal recovery (where replay starts), so a missing, short
or implausible checkpoint costs a longer replay, never data: it reads as zeros.

RocketMQ 5's layout: the three times, then ``masterFlushedOffset`` (24, kept as found) and
``confirmPhyOffset`` (32): in controller mode the offset below which every SyncStateSet member
held the log, clamped into the recovered log at start (a zero only holds dispatch back until
the controller names a role).
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import time
from pathlib import Path
from typing import Final

from rmq.kernel import RateLimitedLog
from rmq.plugins.storage_mmap.mapped_file import StoreError
from rmq.protocol.names import validate_topic

log = logging.getLogger("rmq.store")
_limited = RateLimitedLog(log, interval=30.0)

CHECKPOINT_SIZE: Final = 4096
_THREE: Final = struct.Struct(">qqq")
_OFFSETS: Final = struct.Struct(">qq")  # masterFlushedOffset, confirmPhyOffset (RocketMQ 5, at 24)
_FUTURE_SLACK_MS: Final = 24 * 3600 * 1000  # a checkpoint time past now + a day is not a time


class Checkpoint:
    """physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp, masterFlushedOffset, confirmPhyOffset;
    persisted only by :meth:`flush`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.physic_ts = self.logics_ts = self.index_ts = 0
        self.master_flushed = self.confirm_phy = 0
        self._fd = -1
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            data = os.pread(self._fd, CHECKPOINT_SIZE + 1, 0)
        except OSError as e:
            log.warning("%s: cannot open the checkpoint (%s); keeping it in memory", path, e)
            data = b""
        if len(data) == CHECKPOINT_SIZE:
            values = _THREE.unpack_from(data, 0)
            limit = time.time_ns() // 1_000_000 + _FUTURE_SLACK_MS
            if all(0 <= v <= limit for v in values):
                self.physic_ts, self.logics_ts, self.index_ts = values
            else:
                log.warning("%s: implausible times %s; ignored (recovery scans from the start)", path, values)
            flushed, confirm = _OFFSETS.unpack_from(data, _THREE.size)
            self.master_flushed, self.confirm_phy = max(flushed, 0), max(confirm, 0)
        elif data:
            log.warning("%s: checkpoint is %d bytes, expected %d; ignored", path, len(data), CHECKPOINT_SIZE)
        if len(data) != CHECKPOINT_SIZE:
            try:
                self.flush()
            except OSError as e:
                log.warning("%s: cannot write the checkpoint yet (%s); keeping it in memory", path, e)

    def min_timestamp(self) -> int:
        """min(physic, logics) - 3 s: everything stored before it is known flushed and dispatched."""
        return max(0, min(self.physic_ts, self.logics_ts) - 3000)

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self.index_ts)

    def flush(self) -> None:
        """Write and force (blocking; fine on a worker thread). OSError when the disk refuses."""
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        page = (_THREE.pack(self.physic_ts, self.logics_ts, self.index_ts)
                + _OFFSETS.pack(self.master_flushed, self.confirm_phy) + bytes(CHECKPOINT_SIZE - 40))
        if os.pwrite(self._fd, page, 0) != CHECKPOINT_SIZE:
            raise OSError(f"{self.path}: short write")
        if os.fstat(self._fd).st_size != CHECKPOINT_SIZE:
            os.ftruncate(self._fd, CHECKPOINT_SIZE)
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


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
        try:
            if os.pread(self._fd, 5, 0) != b"lock":  # rewriting it would need a block a full disk lacks
                os.ftruncate(self._fd, 0)
                os.pwrite(self._fd, b"lock", 0)
        except OSError as e:
            log.warning("%s: cannot write the lock file's text (%s); the lock itself holds", path, e)

    def release(self) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)


class Tombstones:
    """Deleted topics and the commitlog offset at their deletion, persisted one ``topic offset`` a line.

    Records below a topic's offset never recreate its queues (replay, start-up rebuild); an
    entry goes once retention has deleted everything below it. ``path`` None: memory only.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.deleted: dict[str, int] = {}

    def load(self) -> None:
        if self.path is None:
            return
        try:
            text = self.path.read_text("utf-8", "replace")
        except OSError:
            return
        for line in text.splitlines():
            topic, _, off = line.partition(" ")
            if validate_topic(topic) is None and off.isdigit():
                self.deleted[topic] = int(off)

    def add(self, topic: str, at_offset: int) -> None:
        self.deleted[topic] = at_offset
        self._save()

    def prune(self, phys_min: int) -> None:
        stale = [t for t, off in self.deleted.items() if off <= phys_min]
        if stale:
            for t in stale:
                del self.deleted[t]
            self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            if self.deleted:
                tmp.write_text("".join(f"{t} {off}\n" for t, off in sorted(self.deleted.items())), "utf-8")
                os.replace(tmp, self.path)
            else:
                self.path.unlink(missing_ok=True)
        except OSError as e:
            _limited.warning("tombstones", "%s: not written (%s)", self.path, e)
