"""``memory``: a message store in RAM with the same contract and record bytes as ``mmap``.

Entry point ``rmq.storage: memory = rmq.plugins.memory:MemoryStoragePlugin`` (no
options). Records are appended to one ``bytearray`` with the ``mmap`` store's
record writer (``rmq.protocol.recordwriter``), so a pull body is byte-for-byte what the mmap store would send (physical
offsets aside: there are no segments, hence no end-of-file blanks). Queues are
per-queue offset lists; dispatch (queues, key index, hook dispatchers) runs inline
in the put, so a message is readable as soon as its put returns. Nothing survives
the process; retention is a no-op, and ``durable`` follows every put (RAM is this
store's disk), so nothing waits on it. ``attach`` takes dispatchers and a store host;
an attached flush policy is accepted and ignored (there is nothing to flush). Topic names are checked by the shared
``RecordWriter`` (RocketMQ's rule), so both stores refuse the same names, and what a pull
or a lookup answers is ``rmq.protocol.storeread``'s, as in the mmap store.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rmq.kernel import (
    DispatchRequest,
    GetResult,
    GetStatus,
    MessageRecord,
    NoOptions,
    PutResult,
    PutStatus,
    Watermark,
    hookimpl,
    structure_options,
)
from rmq.protocol.common import Prop, decode_properties
from rmq.protocol.names import validate_topic
from rmq.protocol.recordwriter import (
    RecordError,
    RecordWriter,
    WriterAttach,
    default_store_host,
    message_tags_code,
    record_properties,
)
from rmq.protocol.storeread import StoreReads, pull_scan_units

if TYPE_CHECKING:
    from rmq.kernel import CommitLogDispatcher, FlushPolicy, ForcedCleanHook, MessageFilter

__all__ = ["MemoryMessageStore", "MemoryStoragePlugin"]


class _Queue:
    __slots__ = ("phys", "sizes", "tags", "times")

    def __init__(self) -> None:
        self.phys: list[int] = []
        self.sizes: list[int] = []
        self.tags: list[int] = []
        self.times: list[int] = []


class MemoryMessageStore(StoreReads, WriterAttach):
    """In-memory ``MessageStore`` (tests, embedding, broker development)."""

    def __init__(self, config: Any, kernel: Any = None) -> None:
        self.config = config
        self.kernel = kernel
        self.writer = RecordWriter(config.maxMessageSize, default_store_host(config))
        self.log = bytearray()
        self.queues: dict[str, dict[int, _Queue]] = {}
        self.keys: dict[str, list[int]] = {}
        self.dispatchers: list[CommitLogDispatcher] = []
        self.durable = Watermark()
        self._delay_levels = config.delay_levels_ms()
        self._tq: dict[str, dict[int, int]] = {}
        self._buf = bytearray(64 * 1024)
        self._running = False
        self._index = bool(config.messageIndexEnable)
        self._n_put = self._n_put_failed = 0
        self.queue_guard: Callable[[str, int], str | None] | None = None  # see MmapMessageStore.queue_guard

    def _attach_started(self) -> bool:
        return self._running

    def _attach_parts(self, dispatchers: Sequence[CommitLogDispatcher] | None, flush_policy: FlushPolicy | None,
                      on_forced_clean: ForcedCleanHook | None) -> None:
        """``flush_policy`` and ``on_forced_clean`` are ignored: nothing here reaches a disk or expires."""
        if dispatchers is not None:
            self.dispatchers = list(dispatchers)

    @property
    def max_phy_offset(self) -> int:
        return len(self.log)

    @property
    def min_phy_offset(self) -> int:
        return 0

    async def __aenter__(self) -> MemoryMessageStore:
        self._running = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._running = False

    async def wait_dispatched(self, offset: int | None = None) -> None:
        """Dispatch is inline: always caught up."""

    # ------------------------------------------------------------------ put

    def _append(self, batch: Sequence[MessageRecord], measured: list[Any], total: int) -> PutResult:
        first = batch[0]
        phys = len(self.log)
        n = len(batch)
        tx = first.sys_flag & 0xC
        if tx == 4 or tx == 12:
            qoff = 0
        else:
            known = self._tq.get(first.topic, {}).get(first.queue_id)
            if known is None and self.queue_guard is not None:  # as the mmap store: the owner may refuse
                refused = self.queue_guard(first.topic, first.queue_id)
                if refused is not None:
                    return self._refuse(PutStatus.MESSAGE_ILLEGAL, refused)
            qoff = known or 0
            self._tq.setdefault(first.topic, {})[first.queue_id] = qoff + n
        ts = first.store_timestamp or time.time_ns() // 1_000_000
        if total > len(self._buf):
            self._buf = bytearray(max(total, 2 * len(self._buf)))
        buf = self._buf
        p = 0
        offsets = []
        for i in range(n):
            offsets.append(phys + p)
            p = self.writer.pack(buf, p, batch[i], measured[i], qoff + i if tx in (0, 8) else 0, phys + p, ts)
        with memoryview(buf) as mv:
            self.log += mv[:total]
        reqs = []
        for i, m in enumerate(batch):
            props = decode_properties(m.properties) if m.properties else {}
            reqs.append(
                DispatchRequest(
                    m.topic,
                    m.queue_id,
                    offsets[i],
                    measured[i][3],
                    message_tags_code(m.topic, props, ts, self._delay_levels),
                    ts,
                    qoff + i if tx in (0, 8) else 0,
                    measured[i][2],
                    m.prepared_tx_offset,
                    props.get(Prop.KEYS),
                    props.get(Prop.UNIQ_KEY),
                    props,
                )
            )
        self._dispatch(reqs)
        self._n_put += n
        self.durable.advance(len(self.log))
        return PutResult(PutStatus.PUT_OK, phys, total, qoff, n, ts, offsets if n > 1 else ())

    def _dispatch(self, reqs: list[DispatchRequest]) -> None:
        for r in reqs:
            tx = r.sys_flag & 0xC
            if tx == 0 or tx == 8:
                q = self.queues.setdefault(r.topic, {}).get(r.queue_id)
                if q is None:
                    q = self.queues[r.topic][r.queue_id] = _Queue()
                q.phys.append(r.commit_log_offset)
                q.sizes.append(r.msg_size)
                q.tags.append(r.tags_code)
                q.times.append(r.store_timestamp)
            if self._index and tx != 12:
                keys = [r.uniq_key] if r.uniq_key else []
                if r.keys:
                    keys.extend(k for k in r.keys.split(" ") if k)
                for k in keys:
                    self.keys.setdefault(f"{r.topic}#{k}", []).append(r.commit_log_offset)
        for d in self.dispatchers:
            d.dispatch(reqs)

    def _refuse(self, status: PutStatus, remark: str) -> PutResult:
        self._n_put_failed += 1
        return PutResult(status, remark=remark)

    async def put_message(self, msg: MessageRecord) -> PutResult:
        if not self._running:
            return self._refuse(PutStatus.SERVICE_NOT_AVAILABLE, "store not running")
        try:
            meas = self.writer.measure(msg)
        except RecordError as e:
            return self._refuse(e.status, e.remark)
        return self._append([msg], [meas], meas[3])

    async def put_messages(self, batch: Sequence[MessageRecord]) -> PutResult:
        if not self._running:
            return self._refuse(PutStatus.SERVICE_NOT_AVAILABLE, "store not running")
        if not batch:
            return self._refuse(PutStatus.MESSAGE_ILLEGAL, "empty batch")
        first = batch[0]
        measured = []
        total = 0
        for m in batch:
            if m.topic != first.topic or m.queue_id != first.queue_id:
                return self._refuse(PutStatus.MESSAGE_ILLEGAL, "a batch must target one topic and queue")
            if m.sys_flag & 0xC:
                return self._refuse(PutStatus.MESSAGE_ILLEGAL, "transaction messages cannot be batched")
            if decode_properties(m.properties).get(Prop.DELAY, "0") not in ("", "0"):
                return self._refuse(PutStatus.MESSAGE_ILLEGAL, "delayed messages cannot be batched")
            try:
                meas = self.writer.measure(m)
            except RecordError as e:
                return self._refuse(PutStatus.MESSAGE_ILLEGAL, f"batch member rejected: {e.remark}")
            measured.append(meas)
            total += meas[3]
        return self._append(batch, measured, total)

    # ------------------------------------------------------------------ reads

    def _record(self, phys: int, size: int) -> bytes:
        with memoryview(self.log) as mv:
            return mv[phys : phys + size].tobytes()

    def _queue_bounds(self, topic: str, queue_id: int) -> tuple[_Queue, int, int] | None:
        q = self.queues.get(topic, {}).get(queue_id)
        return None if q is None else (q, 0, len(q.phys))

    def _pull(self, q: _Queue, offset: int, max_count: int, message_filter: MessageFilter | None,
              max_bytes: int, mn: int, mx: int) -> GetResult:
        stop = min(mx, offset + pull_scan_units(max_count))
        messages: list[bytes] = []
        qoffs: list[int] = []
        total = 0
        i = offset
        while i < stop:
            size = q.sizes[i]
            if messages and (len(messages) >= max_count or total + size > max_bytes):
                break
            i += 1
            if message_filter is not None and not message_filter.match_tags_code(q.tags[i - 1]):
                continue
            rec = self._record(q.phys[i - 1], size)
            if message_filter is not None and message_filter.needs_properties:
                if not message_filter.match_properties(record_properties(rec, 0)[1]):
                    continue
            messages.append(rec)
            qoffs.append(i - 1)
            total += size
        status = GetStatus.FOUND if messages else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, i, 0, mx, messages, qoffs, total)

    def _span(self, commit_log_offset: int) -> tuple[bytearray, int, int]:
        return self.log, commit_log_offset, len(self.log)

    def _key_candidates(self, topic: str, key: str, max_num: int, begin: int, end: int) -> Iterable[int]:
        return reversed(self.keys.get(f"{topic}#{key}", ()))

    def get_offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        q = self.queues.get(topic, {}).get(queue_id)
        if q is None or not q.times:
            return 0
        times = q.times
        i = bisect.bisect_left(times, timestamp)
        if i < len(times) and times[i] == timestamp:
            return i
        if i == 0:
            return 0
        if i == len(times):
            return len(times) - 1
        return i if times[i] - timestamp < timestamp - times[i - 1] else i - 1

    def get_store_time(self, topic: str, queue_id: int, offset: int) -> int:
        q = self.queues.get(topic, {}).get(queue_id)
        if q is None or not 0 <= offset < len(q.times):
            return -1
        return q.times[offset]

    def delete_topics(self, topics: Sequence[str]) -> None:
        """As the mmap store: names that are not valid topics are ignored (puts refuse them too)."""
        for t in topics:
            if validate_topic(t) is None:
                self.queues.pop(t, None)
                self._tq.pop(t, None)

    async def clean_expired_files(self, force: bool = False) -> int:
        return 0

    def stats(self) -> dict[str, Any]:
        return {
            "store": "memory",
            "puts": self._n_put,
            "put_failures": self._n_put_failed,
            "gets": self.n_get,
            "max_phy_offset": len(self.log),
            "min_phy_offset": 0,
            "consume_queues": sum(len(t) for t in self.queues.values()),
            "writable": self._running,
        }


class MemoryStoragePlugin:
    """Builds a :class:`MemoryMessageStore`."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        structure_options(NoOptions, options)

    @hookimpl(trylast=True)
    def rmq_storage_make_store(self, kernel: Any, config: Any) -> MemoryMessageStore:
        return MemoryMessageStore(config, kernel=kernel)
