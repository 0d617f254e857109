"""The put path of the mmap store: one append routine for single puts and batches.

Synchronous code run inside the store's coroutines (one event loop = one writer):
validate and measure, reserve commitlog space (rolling with a blank record), take the
queue offsets, pack every record into one reusable buffer with the precompiled header
structs (``pack_into``, slice assignments, no per-message dicts), copy it into the
mapping with one slice assignment, then hand the values just packed to the reput loop
(tuples in :class:`~rmq.plugins.storage_mmap.reput.Handoff`'s layout) so it need not parse them back.

A single put is a batch of one: :meth:`Appender.append` measures it itself (the common
case inline), ``put_batch`` checks RocketMQ's batch rules and measures first, and both
end in the same packing loop. A field outside its Java type is refused before any
byte is written or any queue offset is lost.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rmq.kernel import MessageRecord, PutResult, PutStatus
from rmq.plugins.storage_mmap.codec import RECORD_OVERHEAD, RecordError, parse_for_dispatch
from rmq.protocol.common import MAGIC_MESSAGE
from rmq.protocol.storepath import crc32

if TYPE_CHECKING:
    from rmq.plugins.storage_mmap.store import MmapMessageStore

_PROPS_LEN = struct.Struct(">h").pack
_OK = PutStatus.PUT_OK  # an enum member lookup costs ~70 ns: once per module, not per put
Measured = tuple[bytes, bytes, int, int, Any]  # RecordWriter.measure: prefix, props, sysflag, size, header


class Appender:
    """Owns the write buffer and the next queue offset of every (topic, queue)."""

    def __init__(self, store: MmapMessageStore) -> None:
        self.store = store
        self.commitlog = store.commitlog
        self.writer = store.writer
        self.reput = store.reput
        self.handoff = store.reput.handoff
        self.tq: dict[str, dict[int, int]] = {}  # topic -> queue id -> next queue offset
        self._buf = bytearray(256 * 1024)
        self._view = memoryview(self._buf)
        self._topics = self.writer._topics
        self._max_body = store.config.maxMessageSize
        self._max_batch = store.config.maxMessageSize + 64 * 1024 + 128 * 1024
        self.n_put = self.n_failed = 0

    def rebuild_queue_table(self) -> None:
        """Next queue offsets from the consume queues (after recovery), and, in controller mode, from
        the records the confirm offset still holds back from them (they own their queue offsets)."""
        tq: dict[str, dict[int, int]] = {}
        for cq in self.store.cqs:
            tq.setdefault(cq.topic, {})[cq.queue_id] = cq.max_offset
        if self.store.reput.bound is not None:
            self._undispatched(tq)
        self.tq = tq

    def _undispatched(self, tq: dict[str, dict[int, int]]) -> None:
        store = self.store
        cl = store.commitlog
        levels = store.config.delay_levels_ms()
        offset = max(store.reput.offset, cl.min_offset)
        while offset < cl.max_offset:
            f = cl.file_for(offset)
            if f is None:
                return
            reqs: list[Any] = []
            pos, state = parse_for_dispatch(f.mm, offset - f.start, f.wrote, f.start, reqs, 4096, levels)
            for r in reqs:
                q = tq.setdefault(r.topic, {})
                if r.consume_queue_offset >= q.get(r.queue_id, 0):
                    q[r.queue_id] = r.consume_queue_offset + 1
            if state == 1:
                offset = f.end
            elif state == 0 and reqs:
                offset = f.start + pos
            else:  # a corrupt range (skip it when recovery found it) or the end
                offset = cl.holes.find(f.start + pos) if state == -1 else -1
                if offset < 0:
                    return

    # ------------------------------------------------------------------ measure

    def put_batch(self, batch: Sequence[MessageRecord]) -> PutResult:
        """RocketMQ's batch rules (one topic and queue, no transaction or delay), then one append."""
        if not batch:
            return self.illegal("empty batch")
        first = batch[0]
        topic = first.topic
        qid = first.queue_id
        writer = self.writer
        measured: list[Measured] = []
        total = 0
        tp = self._topics.get(topic)
        head8 = writer.head8
        fixed = head8.size + 2 + (len(tp) if tp is not None else 0)
        sv6 = writer._store_v6
        max_body = self._max_body
        add = measured.append
        for m in batch:
            if m.topic != topic or m.queue_id != qid:
                return self.illegal("a batch must target one topic and queue")
            sf = m.sys_flag
            if sf & 0xC:
                return self.illegal("transaction messages cannot be batched")
            props = m.properties
            if "DELAY\x01" in props and props.split("DELAY\x01", 1)[1].split("\x02", 1)[0] not in ("", "0"):
                return self.illegal("delayed messages cannot be batched")
            pb = props.encode() if props else b""
            if tp is not None and len(m.born_host) == 8 and len(m.body) <= max_body and len(pb) <= 32767:
                size = fixed + len(m.body) + len(pb)
                add((tp, pb, (sf & ~0x30) | sv6, size, head8))
            else:
                try:
                    meas = writer.measure(m)
                except RecordError as e:
                    return self.illegal(f"batch member rejected: {e.remark}")
                add(meas)
                size = meas[3]
            total += size
        return self._append_batch(batch, measured, total)

    def _append_batch(self, batch: Sequence[MessageRecord], measured: Any, total: int) -> PutResult:
        if total > self._max_batch + RECORD_OVERHEAD * len(batch):
            return self.illegal(f"batch of {total} bytes exceeds maxMessageSize {self.store.config.maxMessageSize}")
        return self.append(batch, measured, total)

    # ------------------------------------------------------------------ append

    def _stored(self, f: Any, wrote: int, n: int, ts: int) -> None:
        """Bookkeeping after ``n`` records were packed into segment ``f`` up to ``wrote``: its write position,
        the commitlog's tail, the put count, the reput woken (shared by ``append`` and ``serve_sends``)."""
        f.wrote = wrote
        if wrote > f.populated:
            f.populate_ahead(wrote)
        self.commitlog.tail = (f.start + wrote, ts)
        self.n_put += n
        self.reput.put_done()

    def append(
        self, batch: Sequence[MessageRecord], measured: Sequence[Measured] | None = None, total: int = 0
    ) -> PutResult:
        """Append records of one (topic, queue): ``total`` bytes, one copy into the mapping.

        ``measured`` None: a single put (``batch`` holds one message), measured here, its
        common case (IPv4 producer, known topic) inline: no extra call on the hottest path.
        A prepared/rollback transaction record (only ever alone) takes no queue offset.
        """
        if measured is None:
            msg = batch[0]
            body = msg.body
            props = msg.properties
            pb = props.encode() if props else b""
            tp = self._topics.get(msg.topic)
            if tp is not None and len(msg.born_host) == 8 and len(body) <= self._max_body and len(pb) <= 32767:
                head = self.writer.head8
                total = head.size + len(body) + len(tp) + 2 + len(pb)
                measured = ((tp, pb, (msg.sys_flag & ~0x30) | self.writer._store_v6, total, head),)
            else:
                try:
                    meas = self.writer.measure(msg)
                except RecordError as e:
                    self.n_failed += 1
                    return PutResult(e.status, remark=e.remark)
                measured = (meas,)
                total = meas[3]
        cl = self.commitlog
        files = cl.files
        f = files[-1] if files else None
        if f is None or total + 8 > f.size - f.wrote:
            try:
                f = cl.reserve(total)
            except ValueError as e:
                return self.illegal(str(e))
            except OSError as e:
                return self.store._alloc_failed(e)
        pos = f.wrote
        phys = f.start + pos
        first = batch[0]
        topic = first.topic
        qid = first.queue_id
        n = len(batch)
        if first.sys_flag & 0xC in (4, 12):  # prepared / rollback: no queue offset
            qoff = step = 0
            tq = None
        else:
            tq = self.tq.get(topic)
            qoff = tq.get(qid) if tq is not None else None
            if qoff is None:  # a queue this store does not have yet: its owner may refuse it
                guard = self.store.queue_guard
                refused = guard(topic, qid) if guard is not None else None
                if refused is not None:
                    return self.illegal(refused)
                tq = self.tq.setdefault(topic, {})
                qoff = 0
            tq[qid] = qoff + n  # type: ignore[index]
            step = 1
        ts = first.store_timestamp or time.time_ns() // 1_000_000
        handed = len(self.handoff)
        failed = self._write(f.mm, pos, total, batch, measured, phys, topic, qid, qoff, step, ts)
        if failed is not None:  # a field outside its Java type: nothing was written
            if tq is not None:
                tq[qid] = qoff  # give the queue offsets back: no hole
            self.n_failed += 1
            what = "a record field" if n == 1 else "a batch member's field"
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=f"{what} is out of range: {failed}")
        if n == 1:
            self._stored(f, pos + total, n, ts)
            return PutResult(_OK, phys, total, qoff, 1, ts)
        offsets = [h[0] for h in self.handoff[handed:]]  # before _stored: it may dispatch them
        self._stored(f, pos + total, n, ts)
        return PutResult(_OK, phys, total, qoff, n, ts, offsets)

    def _write(self, mm: Any, pos: int, total: int, batch: Sequence[MessageRecord], measured: Any, phys: int,
               topic: str, qid: int, qoff: int, step: int, ts: int) -> struct.error | None:
        """Pack the records into the write buffer, hand them off, copy them into ``mm[pos:pos + total]``;
        the error (nothing written, nothing handed off) when a field is outside its Java type."""
        if total > len(self._buf):
            self._grow(total)
        buf = self._buf
        handoff = self.handoff
        handed = len(handoff)
        store_host = self.writer._store_host
        plen = _PROPS_LEN
        q = qoff
        p = 0
        i = 0
        n = len(batch)
        try:
            while i < n:  # a while loop: for a batch of one, zip() or range() would cost more than packing
                m = batch[i]
                tp, pb, sf, size, head = measured[i]
                i += 1
                body = m.body
                at = phys + p
                head.pack_into(
                    buf,
                    p,
                    size,
                    MAGIC_MESSAGE,
                    crc32(body) & 0x7FFFFFFF,
                    qid,
                    m.flag,
                    q,
                    at,
                    sf,
                    m.born_timestamp,
                    m.born_host,
                    ts,
                    store_host,
                    m.reconsume_times,
                    m.prepared_tx_offset,
                    len(body),
                )
                handoff.append((at, size, topic, qid, q, sf, ts, m.prepared_tx_offset, m.properties))  # Handoff layout
                s = p + head.size
                e = s + len(body)
                buf[s:e] = body
                s = e + len(tp)
                buf[e:s] = tp
                p += size
                buf[s:p] = plen(len(pb)) + pb
                q += step
        except struct.error as exc:
            del handoff[handed:]
            return exc
        mm[pos : pos + total] = self._view[:total]  # the one copy into the mapping
        return None

    def _grow(self, size: int) -> None:
        self._view.release()
        self._buf = bytearray(max(size, 2 * len(self._buf)))
        self._view = memoryview(self._buf)

    def illegal(self, remark: str) -> PutResult:
        self.n_failed += 1
        return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=remark)


class _Compiled:
    """``measured`` of a put the compiled path measured: its topic prefix (the C code reads the rest)."""

    __slots__ = ("tp",)

    def __init__(self, tp: bytes) -> None:
        self.tp = tp


class CompiledAppender(Appender):
    """The appender with the common case measured and packed by ``rmq.protocol._faststore``, which writes
    the records straight into the mapping (no staging buffer, no per-field Python calls). A put it does
    not take whole (an unknown topic, an IPv6 producer, a field outside its type, a batch the rules
    refuse) is the pure path's, so results match by construction; test_faststore_diff compares them."""

    def __init__(self, store: MmapMessageStore, fast: Any) -> None:
        super().__init__(store)
        self._measure = fast.measure
        self._pack = fast.pack
        self._serve = fast.send_serve
        self.n_served = 0  # messages the compiled send path stored (serve_sends)

    def append(
        self, batch: Sequence[MessageRecord], measured: Sequence[Measured] | None = None, total: int = 0
    ) -> PutResult:
        if measured is None:
            tp = self._topics.get(batch[0].topic)
            if tp is not None:
                size = self._measure(batch, tp, self.writer.head8.size, self._max_body, False)
                if size >= 0:
                    return super().append(batch, _Compiled(tp), size)  # type: ignore[arg-type]
        return super().append(batch, measured, total)

    def put_batch(self, batch: Sequence[MessageRecord]) -> PutResult:
        if batch:
            tp = self._topics.get(batch[0].topic)
            if tp is not None:
                total = self._measure(batch, tp, self.writer.head8.size, self._max_body, True)
                if total >= 0:
                    return self._append_batch(batch, _Compiled(tp), total)
        return super().put_batch(batch)

    def _write(self, mm: Any, pos: int, total: int, batch: Sequence[MessageRecord], measured: Any, phys: int,
               topic: str, qid: int, qoff: int, step: int, ts: int) -> struct.error | None:
        if measured.__class__ is not _Compiled:
            return super()._write(mm, pos, total, batch, measured, phys, topic, qid, qoff, step, ts)
        w = self.writer
        self._pack(mm, pos, total, batch, measured.tp, w._store_host, w._store_v6, phys, qid, qoff, step, ts,
                   self.handoff, topic)
        return None


    def serve_sends(self, src: Any, pos: int, max_frame: int, table: Any, forbidden: Any, born: bytes, max_body: int,
                    answer: tuple[bytes, bytes, bytes, bytes, int], held: bool) -> tuple[int, bytes | None, list[Any]]:
        """The store half of the compiled send path (``_faststore.send_serve``): the leading common-case sends
        of ``src[pos:]`` packed into the segment being written, as ``append`` would, each answered; where it
        stopped, the answers, and [topic, messages, bytes] per run. It stops at the segment's end (the pure
        path rolls) and once the reput is ``backlog`` behind (the pure path yields to it); ``held``: at a send
        whose answer would not wait for the flush (SYNC_FLUSH with WAIT=false)."""
        cl = self.commitlog
        files = cl.files
        if not files:
            return pos, None, []
        f = files[-1]
        w = self.writer
        cluster, id_prefix, region, trace, version = answer
        ts = time.time_ns() // 1_000_000
        handed = len(self.handoff)
        end, wrote, answers, counts = self._serve(
            src, pos, max_frame, table, self._topics, self.tq, forbidden, f.mm, f.wrote, f.size, f.start,
            self.reput.offset + self.store._backlog, born, w._store_host, w._store_v6, ts, self.handoff,
            min(max_body, self._max_body), cluster, id_prefix, region, trace, version, held)
        n = len(self.handoff) - handed
        if n:
            self._stored(f, wrote, n, ts)
            self.n_served += n
        return end, answers, counts



def make_appender(store: MmapMessageStore, pure: bool | None = None) -> Appender:
    """The appender that serves: compiled unless ``pure`` (None: as ``RMQ_PURE`` and the install decided)."""
    from rmq.protocol import storepath

    fast = None if pure else storepath.FAST if pure is None else storepath.compiled_store()
    return Appender(store) if fast is None else CompiledAppender(store, fast)
