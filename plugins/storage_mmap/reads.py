"""Reads of the mmap store: pulls, offsets by time, store times, lookups by offset and by key.

Nothing here writes or awaits: every read slices the mappings directly (a pull response is
the stored bytes), so a read costs page faults at most and never blocks the loop on I/O.
Missing, expired or corrupt data reads as RocketMQ's statuses, never as an exception.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq.kernel import GetResult, GetStatus
from rmq.plugins.storage_mmap.codec import RECORD_OVERHEAD, RecordError, record_properties, store_timestamp_at
from rmq.plugins.storage_mmap.consume_queue import INT_MAX, UNIT, UNIT_SIZE
from rmq.protocol.common import MAGIC_MESSAGE, Prop
from rmq.protocol.record import HEAD2

if TYPE_CHECKING:
    from rmq.kernel import MessageFilter
    from rmq.plugins.storage_mmap.commitlog import CommitLog
    from rmq.plugins.storage_mmap.consume_queue import ConsumeQueueTable
    from rmq.plugins.storage_mmap.index import IndexService
    from rmq.roles import BrokerConfig

_MIN = -(1 << 63)


class StoreReader:
    """The read half of ``MessageStore`` over a store's commitlog, consume queues and index."""

    def __init__(
        self, config: BrokerConfig, commitlog: CommitLog, cqs: ConsumeQueueTable, index: IndexService | None
    ) -> None:
        self.config = config
        self.commitlog = commitlog
        self.cqs = cqs
        self.index = index
        self.n_get = self.n_found = self.n_hit = 0


    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        message_filter: MessageFilter | None = None,
        max_bytes: int = 256 * 1024,
    ) -> GetResult:
        """See ``MessageStore.get_messages``; then the mapped queues are trimmed (none is in use)."""
        result = self._get_messages(topic, queue_id, offset, max_count, message_filter, max_bytes)
        cqs = self.cqs
        if len(cqs.mapped) > cqs.max_mapped:
            cqs.trim()
        return result

    def _get_messages(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        message_filter: MessageFilter | None,
        max_bytes: int,
    ) -> GetResult:
        self.n_get += 1
        cq = self.cqs.get(topic, queue_id)
        if cq is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        mn = cq.min_offset
        mx = cq.max_offset
        if mx == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, mn, mx)
        if offset < mn:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, mn, mn, mx)
        if offset == mx:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, mn, mx)
        if offset > mx:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, mn if mn == 0 else mx, mn, mx)
        sl = cq.slice(offset)
        if sl is None:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, cq.roll_next_file(offset), mn, mx)
        cqf, pos, wpos = sl
        scan = max(16000, max_count * UNIT_SIZE)
        scan = -(-scan // UNIT_SIZE) * UNIT_SIZE
        units = cqf.mm[pos : min(wpos, pos + scan)]
        status = GetStatus.NO_MATCHED_MESSAGE
        messages: list[bytes] = []
        qoffs: list[int] = []
        total = 0
        i = 0
        skip_below = _MIN
        cl = self.commitlog
        files = cl.files
        fsize = cl.file_size
        first_idx = files[0].start // fsize if files else 0
        nfiles = len(files)
        match_tags = message_filter.match_tags_code if message_filter is not None else None
        need_props = message_filter is not None and message_filter.needs_properties
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
            self.n_found += len(messages)
            self.n_hit += 1
        return GetResult(status, offset + i, mn, mx, messages, qoffs, total)

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.cqs.get(topic, queue_id)
        return cq.max_offset if cq is not None else 0

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.cqs.get(topic, queue_id)
        return cq.min_offset if cq is not None else 0

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

    def get_earliest_store_time(self, topic: str, queue_id: int) -> int:
        cq = self.cqs.get(topic, queue_id)
        if cq is None:
            return -1
        return self.get_store_time(topic, queue_id, cq.min_offset)

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

    def look_message_by_offset(self, commit_log_offset: int) -> bytes | None:
        cl = self.commitlog
        f = cl.file_for(commit_log_offset)
        if f is None or (cl.holes and cl.holes.find(commit_log_offset) >= 0):
            return None
        p = commit_log_offset - f.start
        if p < 0 or p + RECORD_OVERHEAD > f.wrote:
            return None
        size, magic = HEAD2.unpack_from(f.mm, p)
        if magic != MAGIC_MESSAGE or size < RECORD_OVERHEAD or p + size > f.wrote:
            return None
        return f.mm[p : p + size]

    def query_by_key(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[bytes]:
        """Index lookup, then each candidate re-checked against its record's topic, keys and store time."""
        if self.index is None or max_num <= 0:
            return []
        max_num = min(max_num, self.config.maxMsgsNumBatch)
        # index times are truncated to seconds from the file's begin: widen, then filter exactly
        cands = self.index.query(f"{topic}#{key}", max(4 * max_num, 64), begin - 1000, end)
        out: list[bytes] = []
        for phys in cands:
            rec = self.look_message_by_offset(phys)
            if rec is None:
                continue
            try:
                rtopic, props = record_properties(rec, 0)
            except RecordError:
                continue
            if rtopic != topic or not begin <= store_timestamp_at(rec, 0) <= end:
                continue
            if props.get(Prop.UNIQ_KEY) == key or key in props.get(Prop.KEYS, "").split(" "):
                out.append(rec)
                if len(out) >= max_num:
                    break
        return out
