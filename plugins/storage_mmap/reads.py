"""Reads of the mmap store: pulls, offsets by time, store times, lookups by offset and by key
(what both stores share of these is ``rmq.protocol.storeread``; this is the mmap half).

Nothing here writes or awaits: every read slices the mappings directly (a pull response is
the stored bytes), so a read costs page faults at most and never blocks the loop on I/O.
Missing, expired or corrupt data reads as RocketMQ's statuses, never as an exception.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from rmq.kernel import GetResult, GetStatus
from rmq.plugins.storage_mmap.codec import RECORD_OVERHEAD, record_properties, store_timestamp_at
from rmq.plugins.storage_mmap.consume_queue import INT_MAX, UNIT, UNIT_SIZE
from rmq.protocol import storepath
from rmq.protocol.record import PHYSICAL_OFFSET
from rmq.protocol.storeread import StoreReads, pull_scan_units

if TYPE_CHECKING:
    from rmq.kernel import MessageFilter
    from rmq.plugins.storage_mmap.commitlog import CommitLog
    from rmq.plugins.storage_mmap.consume_queue import ConsumeQueue
    from rmq.plugins.storage_mmap.index import IndexService
    from rmq.plugins.storage_mmap.queue_table import ConsumeQueueTable
    from rmq.roles import BrokerConfig

_MIN = -(1 << 63)
_PHYS = struct.Struct(">q")


class StoreReader(StoreReads):
    """The mmap store's read primitives and its own reads (store times, offsets by time) over its
    commitlog, consume queues and index; the rest of the read contract is ``StoreReads``'."""

    config: BrokerConfig
    commitlog: CommitLog
    cqs: ConsumeQueueTable
    index: IndexService | None
    fast_scan: Any = storepath.FAST.scan if storepath.FAST is not None else None  # None: the pure loop
    fast_join: Any = storepath.FAST.pull_join if storepath.FAST is not None else None  # None: the pure loop
    n_joined = 0  # pulls get_joined served through fast_join

    def _queue_bounds(self, topic: str, queue_id: int) -> tuple[ConsumeQueue, int, int] | None:
        cq = self.cqs.get(topic, queue_id)
        return None if cq is None else (cq, cq.min_offset, cq.max_offset)

    def _pull(self, cq: ConsumeQueue, offset: int, max_count: int, message_filter: MessageFilter | None,
              max_bytes: int, mn: int, mx: int) -> GetResult:
        """Then the mapped queues are trimmed (none is in use now)."""
        try:
            return self._scan(cq, offset, max_count, message_filter, max_bytes, mn, mx)
        finally:
            self._trim()

    def _trim(self) -> None:
        cqs = self.cqs
        if len(cqs.mapped) > cqs.max_mapped:
            cqs.trim()

    def get_joined(self, topic: str, queue_id: int, offset: int, max_count: int,
                   message_filter: MessageFilter | None, codes: frozenset[int] | None,
                   max_bytes: int) -> tuple[GetResult, bytes, int, int]:
        """``get_messages`` with the records found in one body: (the result without its messages, the body,
        how many records, the last one's PHYSICAL_OFFSET or -1).
        ``codes`` are ``message_filter``'s TAG hash codes (None: it matches everything), which the compiled
        walk (``pull_join``) matches without a Python object per message; the pure loop serves where that
        walk is absent or declines."""
        bounds = self._bounded(topic, queue_id, offset)
        if isinstance(bounds, GetResult):
            return bounds, b"", 0, -1
        cq, offset, mn, mx = bounds
        fast = self.fast_join
        try:
            scope = self._units(cq, offset, max_count)
            got = None if fast is None or isinstance(scope, int) else fast(*scope, offset, max_count, max_bytes, codes)
        finally:
            self._trim()
        if isinstance(scope, int):
            return GetResult(GetStatus.OFFSET_FOUND_NULL, scope, mn, mx), b"", 0, -1
        if got is None:
            res = self._pull(cq, offset, max_count, message_filter, max_bytes, mn, mx)
            msgs, res.messages = res.messages, []
            self._found(len(msgs))
            return res, b"".join(msgs), len(msgs), _PHYS.unpack_from(msgs[-1], PHYSICAL_OFFSET)[0] if msgs else -1
        i, body, n, total, removing, last = got
        self.n_joined += 1
        self._found(n)
        status = GetStatus.FOUND if n else GetStatus.MESSAGE_WAS_REMOVING if removing else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, offset + i, mn, mx, total_size=total), body, n, last

    def _units(self, cq: ConsumeQueue, offset: int, max_count: int) -> int | tuple[Any, list[Any], int, int]:
        """The consume-queue units a pull from ``offset`` may scan and the commitlog's segments (files, the
        first one's index, segment size); for an offset in no mapped queue file, where to go on from."""
        sl = cq.slice(offset)
        if sl is None:
            return cq.roll_next_file(offset)
        cqf, pos, wpos = sl
        files = self.commitlog.files
        fsize = self.commitlog.file_size
        units = cqf.mm[pos : min(wpos, pos + pull_scan_units(max_count) * UNIT_SIZE)]
        return units, files, files[0].start // fsize if files else 0, fsize

    def _scan(self, cq: ConsumeQueue, offset: int, max_count: int, message_filter: MessageFilter | None,
              max_bytes: int, mn: int, mx: int) -> GetResult:
        scope = self._units(cq, offset, max_count)
        if isinstance(scope, int):
            return GetResult(GetStatus.OFFSET_FOUND_NULL, scope, mn, mx)
        units, files, first_idx, fsize = scope
        status = GetStatus.NO_MATCHED_MESSAGE
        messages: list[bytes] = []
        qoffs: list[int] = []
        total = 0
        i = 0
        skip_below = _MIN
        nfiles = len(files)
        match_tags = message_filter.match_tags_code if message_filter is not None else None
        need_props = message_filter is not None and message_filter.needs_properties
        fast = self.fast_scan
        if fast is not None and not need_props:  # the compiled loop (the same outcome), unless it declines
            got = fast(units, files, first_idx, fsize, offset, max_count, max_bytes, match_tags)
            if got is not None:
                i, messages, qoffs, total, removing = got
                status = GetStatus.FOUND if messages else GetStatus.MESSAGE_WAS_REMOVING if removing else status
                return GetResult(status, offset + i, mn, mx, messages, qoffs, total)
        for phys, size, tags in UNIT.iter_unpack(units):
            i += 1
            if phys < skip_below:
                continue
            if messages and (len(messages) >= max_count or total + size > max_bytes):
                i -= 1
                break
            if match_tags is not None and not match_tags(tags):
                continue
            fi = phys // fsize - first_idx
            f = files[fi] if 0 <= fi < nfiles else None
            p = phys - f.start if f is not None else 0
            if f is None or p + size > f.wrote:
                if size == INT_MAX and phys == 0:  # a hole's filler unit: its record is gone, step over it
                    continue
                if not messages:
                    status = GetStatus.MESSAGE_WAS_REMOVING
                skip_below = (phys // fsize + 1) * fsize
                continue
            rec = f.mm[p : p + size]
            if need_props and not message_filter.match_properties(record_properties(rec, 0)[1]):  # type: ignore[union-attr]
                continue
            messages.append(rec)
            qoffs.append(offset + i - 1)
            total += size
            skip_below = _MIN
        else:
            i = len(units) // UNIT_SIZE
        if messages:
            status = GetStatus.FOUND
        return GetResult(status, offset + i, mn, mx, messages, qoffs, total)

    def _store_time_of(self, phys: int, size: int) -> int:
        f = self.commitlog.file_for(phys)
        if f is None:
            return -1
        p = phys - f.start
        if p < 0 or p + size > f.wrote or size < RECORD_OVERHEAD:
            return -1
        return store_timestamp_at(f.mm, p)

    def get_store_time(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.cqs.get(topic, queue_id)
        if cq is None:
            return -1
        u = cq.unit(offset)
        self.cqs.trim()
        if u is None:
            return -1
        return self._store_time_of(u[0], u[1])

    def get_offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """Binary search of store times (§2.3). The file is chosen by the store time of its last unit
        (what RocketMQ approximates with the file's mtime)."""
        try:
            return self._offset_by_time(topic, queue_id, timestamp)
        finally:
            self.cqs.trim()

    def _offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        cq = self.cqs.get(topic, queue_id)
        if cq is None or not cq.files:
            return 0
        phys_min = self.commitlog.min_offset
        f = cq.files[-1]
        for cand in cq.files:
            if cand.wrote < UNIT_SIZE:
                continue
            lp, ls, _ = UNIT.unpack_from(cand.mm, cand.wrote - UNIT_SIZE)
            if self._store_time_of(lp, ls) >= timestamp:
                f = cand
                break
        low = cq.min_logic - f.start if cq.min_logic > f.start else 0
        high = f.wrote - UNIT_SIZE
        target = left = right = -1
        left_v = right_v = -1
        mm = f.mm
        while high >= low:
            mid = (low + high) // (2 * UNIT_SIZE) * UNIT_SIZE
            phys, size, _ = UNIT.unpack_from(mm, mid)
            if phys < phys_min or size == INT_MAX:  # expired, or a hole's filler
                low = mid + UNIT_SIZE
                left = mid
                continue
            t = self._store_time_of(phys, size)
            if t < 0:
                return 0
            if t == timestamp:
                target = mid
                break
            if t > timestamp:
                high = mid - UNIT_SIZE
                right, right_v = mid, t
            else:
                low = mid + UNIT_SIZE
                left, left_v = mid, t
        if target == -1 and left_v == -1 and f is not cq.files[0]:
            # everything in this file is later: the previous file's last unit may be nearer
            prev = cq.files[cq.files.index(f) - 1]
            if prev.wrote >= UNIT_SIZE and prev.start + prev.wrote > cq.min_logic:
                lp, ls, _ = UNIT.unpack_from(prev.mm, prev.wrote - UNIT_SIZE)
                t = self._store_time_of(lp, ls)
                if t >= 0 and (right_v == -1 or timestamp - t <= right_v - timestamp):
                    return (prev.start + prev.wrote) // UNIT_SIZE - 1
        if target != -1:
            pos = target
        elif left_v == -1:
            pos = right
        elif right_v == -1:
            pos = left
        else:
            pos = right if timestamp - left_v > right_v - timestamp else left
        if pos < 0:
            return cq.min_offset
        return max(cq.min_offset, (f.start + pos) // UNIT_SIZE)

    def _span(self, commit_log_offset: int) -> tuple[Any, int, int] | None:
        cl = self.commitlog
        f = cl.file_for(commit_log_offset)
        if f is None or (cl.holes and cl.holes.find(commit_log_offset) >= 0):
            return None
        return f.mm, commit_log_offset - f.start, f.wrote

    def _key_candidates(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Index times are seconds from the index file's begin: the window is widened here and the
        records are checked exactly by ``StoreReads.query_by_key``."""
        if self.index is None:
            return []
        return self.index.query(f"{topic}#{key}", max(4 * max_num, 64), begin - 1000, end)
