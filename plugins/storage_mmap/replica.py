"""The commitlog as a replica: hand out raw bytes on a master, apply a master's bytes on a slave.

RocketMQ's HA stream carries commitlog bytes verbatim, cut at arbitrary places (32 KiB
chunks, never across a segment end). A slave must end up byte-identical, so it writes
what arrives at the same offsets and lets its own reput build queues and index.

Two rules keep a slave's log as trustworthy as a master's:

* Only whole records reach the mapping. The tail of a record cut by a chunk waits in
  memory until the rest arrives, so ``max_phy_offset`` (what the slave reports, what a
  SYNC_MASTER counts as replicated) always ends on a record boundary, and recovery after a
  crash sees the same shapes as on a master.
* Nothing is written before every record of the chunk checked out: magic, size, the
  PHYSICALOFFSET field equal to where the record lands, the body CRC, and a blank filler
  that ends exactly at its segment's end (a master with another mappedFileSizeCommitLog
  is caught here). A bad chunk raises :class:`ReplicaError` and leaves the log as it was.

:class:`ReplicaLogMixin` is the store's ``ReplicaLog`` face over :class:`Replica`, the
confirm offset and ``truncate`` (a replica's tail its new master lacks).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING
from zlib import crc32

from rmq.kernel import ReplicaError
from rmq.plugins.storage_mmap import truncate
from rmq.protocol.common import MAGIC_BLANK, MAGIC_MESSAGE
from rmq.protocol.record import HEAD2, HEADERS, MIN_RECORD, born_host_width, store_host_width

if TYPE_CHECKING:
    from pathlib import Path

    from rmq.plugins.storage_mmap.append import Appender
    from rmq.plugins.storage_mmap.checkpoint import Checkpoint
    from rmq.plugins.storage_mmap.commitlog import CommitLog
    from rmq.plugins.storage_mmap.queue_table import ConsumeQueueTable
    from rmq.plugins.storage_mmap.reput import ReputService
    from rmq.plugins.storage_mmap.store import MmapMessageStore

_OVERHEAD_MAX = 64 * 1024  # room for topic, properties and hosts above maxMessageSize


class Replica:
    """Both halves for one store; ``pending`` holds the unfinished record of a slave's stream."""

    def __init__(self, store: MmapMessageStore) -> None:
        self.store = store
        self.pending = bytearray()
        self.base = 0  # offset of pending[0] while the log has no segment yet
        self.applied_bytes = 0
        self.last_apply_ms = 0

    # ------------------------------------------------------------------ master side

    def read(self, offset: int, max_bytes: int) -> bytes | None:
        """Up to ``max_bytes`` written bytes from ``offset``, never past its segment's end.

        ``b""`` when nothing is written there yet; None when ``offset`` lies below the
        oldest segment (retention deleted it) or is not a position this log can serve.
        """
        cl = self.store.commitlog
        if offset < 0 or max_bytes <= 0:
            return None
        if offset >= cl.max_offset:
            return b""
        if offset < cl.min_offset:
            return None
        f = cl.file_for(offset)
        if f is None:
            return None
        pos = offset - f.start
        end = min(f.wrote, pos + max_bytes)
        return bytes(f.mm[pos:end]) if end > pos else b""

    # ------------------------------------------------------------------ slave side

    @property
    def next_offset(self) -> int:
        """Where the next replicated chunk must start (the log's end plus the pending tail)."""
        cl = self.store.commitlog
        return (cl.max_offset if cl.files else self.base) + len(self.pending)

    def reset(self) -> None:
        """Drop the pending tail (a new connection restarts from ``max_phy_offset``)."""
        self.pending.clear()
        self.base = 0

    def append(self, offset: int, data: bytes | memoryview) -> int:
        """Apply a chunk that starts at ``offset``; returns the new ``next_offset``.

        An empty log takes its first chunk at a segment boundary (a fresh slave starts at
        the master's last segment); otherwise ``offset`` must be exactly ``next_offset``.
        """
        store = self.store
        cl = store.commitlog
        fsize = cl.file_size
        if not cl.files and not self.pending:
            if offset < 0 or offset % fsize:
                raise ReplicaError(
                    f"an empty commitlog can start only at a segment boundary (mappedFileSizeCommitLog "
                    f"{fsize}); the master sent offset {offset}"
                )
            self.base = offset
        start = cl.max_offset if cl.files else self.base
        if offset != start + len(self.pending):
            raise ReplicaError(f"chunk at offset {offset} but this log continues at {start + len(self.pending)}")
        if not data:
            return self.next_offset
        buf = bytes(self.pending) + bytes(data) if self.pending else bytes(data)
        units = self._units(buf, start, fsize)
        done = units[-1][1] if units else 0
        if done:
            self._write(buf, start, units, fsize)
        self.pending = bytearray(buf[done:])
        if not cl.files:
            self.base = start + done
        if len(self.pending) > store.config.maxMessageSize + _OVERHEAD_MAX:
            where = start + done
            self.pending.clear()
            raise ReplicaError(f"record at offset {where} is larger than any this broker accepts")
        return self.next_offset

    def _units(self, buf: bytes, start: int, fsize: int) -> list[tuple[int, int, int]]:
        """``(begin, end, store timestamp)`` of each complete, valid unit of ``buf`` (``buf[0]`` is
        at offset ``start``); raises on the first invalid one."""
        out: list[tuple[int, int, int]] = []
        limit = self.store.config.maxMessageSize + _OVERHEAD_MAX
        p = 0
        n = len(buf)
        while p + 8 <= n:
            at = start + p
            room = fsize - at % fsize
            total, magic = HEAD2.unpack_from(buf, p)
            if magic == MAGIC_BLANK:
                if total != room:
                    raise ReplicaError(
                        f"end-of-segment filler at offset {at} spans {total} bytes but the segment has "
                        f"{room} left: is the master's mappedFileSizeCommitLog {fsize}?"
                    )
                if p + total > n:
                    break
                out.append((p, p + total, -1))
                p += total
                continue
            if magic != MAGIC_MESSAGE:
                raise ReplicaError(f"no record at offset {at}: magic {magic & 0xFFFFFFFF:#010x}")
            if total < MIN_RECORD or total > limit or total > room:
                raise ReplicaError(f"record at offset {at} has impossible size {total}")
            if p + total > n:
                break
            sys_flag = int.from_bytes(buf[p + 36 : p + 40], "big", signed=True)
            head = HEADERS[(born_host_width(sys_flag), store_host_width(sys_flag))]
            if head.size > total:
                raise ReplicaError(f"record at offset {at} is shorter than its header")
            fields = head.unpack_from(buf, p)
            phys, store_ts, body_crc, body_len = fields[6], fields[10], fields[2], fields[14]
            if phys != at:
                raise ReplicaError(
                    f"record at offset {at} says it belongs at {phys}: the master's log differs from ours"
                )
            body_start = p + head.size
            if body_len < 0 or body_start + body_len > p + total:
                raise ReplicaError(f"record at offset {at} has a body length {body_len} beyond its size")
            if crc32(buf[body_start : body_start + body_len]) & 0x7FFFFFFF != body_crc:
                raise ReplicaError(f"record at offset {at} fails its body CRC")
            out.append((p, p + total, store_ts))
            p += total
        return out

    def _write(self, buf: bytes, start: int, units: list[tuple[int, int, int]], fsize: int) -> None:
        """Copy validated units into the segments (creating them as the stream rolls)."""
        store = self.store
        cl = store.commitlog
        ts = cl.tail[1]
        i = 0
        while i < len(units):
            begin = units[i][0]
            at = start + begin
            f = cl.files[-1] if cl.files else None
            if f is None or f.full:
                f = cl._new_file(at - at % fsize)
                cl.files.append(f)
            # the run of units that lands in this segment
            j = i
            seg_end = f.end
            while j < len(units) and start + units[j][1] <= seg_end:
                if units[j][2] >= 0:
                    ts = units[j][2]
                j += 1
            if j == i:  # cannot happen after _units' room checks; refuse rather than misplace bytes
                raise ReplicaError(f"unit at offset {at} does not fit segment {f.start}")
            end = units[j - 1][1]
            pos = at - f.start
            f.mm[pos : pos + end - begin] = buf[begin:end]
            f.wrote = pos + end - begin
            cl.tail = (start + end, ts)
            self.applied_bytes += end - begin
            i = j
        self.last_apply_ms = time.time_ns() // 1_000_000
        reput = store.reput
        if reput.idle:
            reput.wake()


class ReplicaLogMixin:
    """``ReplicaLog`` for ``MmapMessageStore``: what HA and the controller's role changes call."""

    root: Path
    commitlog: CommitLog
    cqs: ConsumeQueueTable
    checkpoint: Checkpoint | None
    reput: ReputService
    appender: Appender
    replica: Replica
    _running: bool
    _closed_reason: str

    def read_commitlog(self, offset: int, max_bytes: int) -> bytes | None:
        """``ReplicaLog.read_commitlog``: raw bytes for a slave (see ``Replica.read``)."""
        return self.replica.read(offset, max_bytes)

    def append_replicated(self, offset: int, data: bytes | memoryview) -> int:
        """``ReplicaLog.append_replicated``: apply a master's bytes; returns where the next chunk starts."""
        if not self._running:
            raise ReplicaError(f"store {self.root} is not running: {self._closed_reason or 'stopped'}")
        return self.replica.append(offset, data)

    @property
    def replica_next_offset(self) -> int:
        return self.replica.next_offset

    def reset_replica(self) -> None:
        self.replica.reset()

    @property
    def confirm_offset(self) -> int:
        """``ReplicaLog.confirm_offset``: consume queues and index hold only records below it."""
        return self.reput.end()

    def set_confirm_offset(self, offset: int | None) -> None:
        """``ReplicaLog.set_confirm_offset``: hold dispatch back at ``offset`` (None: dispatch to the end)."""
        if offset is not None:
            offset = max(min(offset, self.commitlog.max_offset), 0)
            if self.checkpoint is not None:
                self.checkpoint.confirm_phy = offset
        self.reput.set_bound(offset)

    def topic_queues(self) -> dict[str, int]:
        """``ReplicaLog.topic_queues``: every topic with a consume queue here, and its highest queue id + 1."""
        out: dict[str, int] = {}
        for cq in self.cqs:
            out[cq.topic] = max(out.get(cq.topic, 0), cq.queue_id + 1)
        return out

    async def become_writable(self) -> None:
        """``ReplicaLog.become_writable``: a replica turned master continues its own log (queue offsets
        from what the replicated records put into the queues)."""
        await self.reput.wait_dispatched()
        self.appender.rebuild_queue_table()
        self.replica.reset()

    async def truncate_log(self, offset: int) -> int:
        """``ReplicaLog.truncate_log``: see ``truncate.truncate_log``."""
        return await truncate.truncate_log(self, offset)  # type: ignore[arg-type]
