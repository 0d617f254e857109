"""The timer's durable state: an append-only timer log of fixed units, and a checkpoint.

Layout (our own; the facts it must keep are RocketMQ's, reference §1.3/§1.6): files
``timerlog/<20-digit start position>`` of ``fileSize`` bytes (a multiple of the unit), each
unit 32 bytes big-endian ``slot ms:8 | commitlog offset:8 | size:4 | magic:4 | staging queue
offset:8`` with magic 1 (a message) or 4 (a delete marker). Units are appended in staging
order, so recovery can cut the log where the checkpoint's staging offset ends and replay
the staging queue from there. ``config/timercheck`` holds RocketMQ's seven longs
(lastReadTimeMs, lastTimerLogFlushPos, lastTimerQueueOffset, masterTimerQueueOffset,
dataVersion stateVersion/timestamp/counter), written whole through a temporary file.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("rmq.broker.timer")

UNIT = struct.Struct(">qqiiq")
UNIT_SIZE = UNIT.size  # 32
MAGIC_NORMAL = 1
MAGIC_DELETE = 4
_MAGICS = (MAGIC_NORMAL, MAGIC_DELETE)
CHECKPOINT = struct.Struct(">7q")


class TimerLogError(Exception):
    """The timer log cannot be read or written (named file, what is wrong)."""


class TimerLog:
    def __init__(self, directory: Path, file_size: int) -> None:
        self.dir = directory
        self.file_size = max(UNIT_SIZE, file_size - file_size % UNIT_SIZE)
        self.end = 0  # global position after the last unit
        self.synced = 0
        self._fd: int | None = None
        self._fd_start = -1
        self._dirty_fds: list[int] = []

    def files(self) -> list[tuple[int, Path]]:
        out = []
        for p in self.dir.glob("*"):
            if p.is_file() and len(p.name) == 20 and p.name.isdigit():
                out.append((int(p.name), p))
        return sorted(out)

    def scan(self) -> Iterator[tuple[int, tuple[int, int, int, int, int]]]:
        """Every valid unit with its position, in order; the first invalid unit ends the log there
        (``truncate`` it). Files before a gap are still read (cleanup may delete middle files)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        for start, path in self.files():
            if start % self.file_size:
                raise TimerLogError(f"{path}: name is not a multiple of the timer log file size {self.file_size}")
            data = path.read_bytes()
            for i in range(0, len(data) - UNIT_SIZE + 1, UNIT_SIZE):
                unit = UNIT.unpack_from(data, i)
                if unit[3] not in _MAGICS or unit[2] <= 0 or unit[1] < 0:
                    self.end = start + i
                    return
                yield start + i, unit
            self.end = start + len(data) - len(data) % UNIT_SIZE
            if len(data) < self.file_size:
                return

    def truncate(self, pos: int) -> None:
        """Cut the log at ``pos`` (a torn tail, or units the staging replay will write again)."""
        for start, path in self.files():
            if start >= pos and start != pos - pos % self.file_size:
                path.unlink()
            elif start <= pos < start + self.file_size:
                with open(path, "r+b") as f:
                    f.truncate(pos - start)
                    os.fsync(f.fileno())
        self.end = pos
        self.synced = pos

    def append(self, units: bytes) -> None:
        """Append whole units (buffered by the OS until ``sync``)."""
        view = memoryview(units)
        while view:
            room = self.file_size - self.end % self.file_size
            chunk = view[:room]
            fd = self._open_for(self.end)
            os.pwrite(fd, chunk, self.end % self.file_size)
            self.end += len(chunk)
            view = view[len(chunk):]

    def _open_for(self, pos: int) -> int:
        start = pos - pos % self.file_size
        if self._fd is None or self._fd_start != start:
            if self._fd is not None:
                self._dirty_fds.append(self._fd)
            self.dir.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.dir / f"{start:020d}", os.O_RDWR | os.O_CREAT, 0o644)
            self._fd_start = start
        return self._fd

    def sync(self) -> int:
        """Make every appended unit durable; the synced end position."""
        for fd in self._dirty_fds:
            os.fsync(fd)
            os.close(fd)
        self._dirty_fds.clear()
        if self._fd is not None:
            os.fsync(self._fd)
        self.synced = self.end
        return self.synced

    def delete_files(self, starts: list[int]) -> None:
        for start in starts:
            if start == self._fd_start:
                continue
            try:
                (self.dir / f"{start:020d}").unlink()
            except FileNotFoundError:
                pass

    def close(self) -> None:
        self.sync()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class TimerCheckpoint:
    """``config/timercheck``: what recovery may trust (reference §1.3's fields)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.read_time = 0
        self.flush_pos = 0
        self.queue_offset = 0
        self.master_queue_offset = 0
        self.state_version = 0
        self.timestamp = 0
        self.counter = 0

    def load(self) -> bool:
        """False when there is none yet; a damaged file is an error naming it."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        if len(data) not in (32, CHECKPOINT.size):
            raise TimerLogError(f"{self.path}: {len(data)} bytes, a timer checkpoint has 32 or {CHECKPOINT.size}")
        vals = struct.unpack(f">{len(data) // 8}q", data) + (0, 0, 0)
        (self.read_time, self.flush_pos, self.queue_offset, self.master_queue_offset,
         self.state_version, self.timestamp, self.counter) = vals[:7]
        if min(vals[:4]) < 0:
            raise TimerLogError(f"{self.path}: negative offsets {vals[:4]}")
        return True

    def encode(self) -> bytes:
        return CHECKPOINT.pack(self.read_time, self.flush_pos, self.queue_offset, self.master_queue_offset,
                               self.state_version, self.timestamp, self.counter)

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, self.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
