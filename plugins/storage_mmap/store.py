"""``MmapMessageStore``: RocketMQ 4.9's on-disk store (commitlog, consume queues, index, checkpoint).

Start-up (``async with store``) follows reference §4.3: load, recover consume queues,
recover the commitlog (normal, or from the checkpoint after a crash), truncate what
lies beyond its end, then replay dispatch and block until the queues have caught up.

The put path is synchronous code inside a coroutine (one event loop = one writer):
validate, reserve space (rolling with a blank record), pack into a reusable buffer,
one slice assignment into the mmap, wake the reput loop, and only then await the
flush policy when it is synchronous. The reput loop turns new commitlog bytes into
``DispatchRequest`` batches for every dispatcher (consume queues, index, broker
notifier, third parties) once per loop turn.

Records appended by this process are handed to the reput loop as small tuples (the
values the put just packed), so it does not re-parse bytes it has just written;
anything else (recovery replay, a hand-off out of step) is parsed from the mapping.
A test checks that both paths produce identical requests.
"""

from __future__ import annotations

import bisect
import logging
import operator
import os
import struct
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any
from zlib import crc32

import anyio
import anyio.lowlevel
import attrs

from rmq.kernel.model import DispatchRequest, GetResult, GetStatus, MessageRecord, PutResult, PutStatus
from rmq.plugins.storage_mmap.checkpoint import Checkpoint, StoreLock
from rmq.plugins.storage_mmap.codec import (
    RECORD_OVERHEAD,
    SCHEDULE_TOPIC,
    RecordError,
    RecordWriter,
    message_tags_code,
    parse_for_dispatch,
    record_properties,
    store_timestamp_at,
)
from rmq.plugins.storage_mmap.commitlog import CommitLog
from rmq.plugins.storage_mmap.consume_queue import UNIT, UNIT_SIZE, ConsumeQueueDispatcher, ConsumeQueueTable
from rmq.plugins.storage_mmap.index import IndexDispatcher, IndexFile, IndexService
from rmq.protocol.common import MAGIC_BLANK, MAGIC_MESSAGE, Prop, decode_properties, tags_code
from rmq.protocol.message import host_bytes

if TYPE_CHECKING:
    from rmq.kernel.config import BrokerConfig
    from rmq.kernel.hookspecs.dispatch import CommitLogDispatcher
    from rmq.kernel.hookspecs.filtering import MessageFilter
    from rmq.kernel.hookspecs.flush import FlushPolicy

log = logging.getLogger("rmq.store")

_HEAD2 = struct.Struct(">ii")
_PROPS_LEN = struct.Struct(">h").pack
_first = operator.itemgetter(0)
_MIN = -(1 << 63)
DiskProbe = Callable[[], float]


@attrs.define(frozen=True)
class MmapOptions:
    """The ``[plugin.storage.mmap]`` table."""

    preallocate: bool = True  # create the next commitlog segment on a background thread
    fallocate: bool = True  # reserve disk blocks for new segments (no SIGBUS when the disk fills)
    dispatch_batch: int = 4096  # most records handed to dispatchers in one call
    backlog_bytes: int = 32 * 1024 * 1024  # a put yields to the reput loop when dispatch lags this much

    def __attrs_post_init__(self) -> None:
        if self.dispatch_batch < 1:
            raise ValueError("dispatch_batch must be >= 1")
        if self.backlog_bytes < 1:
            raise ValueError("backlog_bytes must be >= 1")


def default_store_host(config: BrokerConfig) -> bytes:
    return host_bytes(config.brokerIP1 or "127.0.0.1", config.listenPort)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class MmapMessageStore:
    """See the module docstring. Public extras beyond ``MessageStore``: ``store_host`` (settable),
    ``disk_usage_probe`` (settable), ``wait_dispatched()``, ``check_disk()`` and the ``Flushable``
    members (``flushed_offset``, ``flush()``)."""

    def __init__(
        self,
        config: BrokerConfig,
        kernel: Any = None,
        options: MmapOptions | None = None,
        disk_usage_probe: DiskProbe | None = None,
    ) -> None:
        self.config = config
        self.kernel = kernel
        self.options = options or MmapOptions()
        self.root = config.store_root()
        self.commitlog = CommitLog(
            config.commitlog_dir(),
            config.mappedFileSizeCommitLog,
            preallocate=self.options.preallocate,
            fallocate=self.options.fallocate,
        )
        self.cqs = ConsumeQueueTable(self.root / "consumequeue", config.mappedFileSizeConsumeQueue)
        self.index: IndexService | None = None
        if config.messageIndexEnable:
            self.index = IndexService(
                self.root / "index", config.maxHashSlotNum, config.maxIndexNum, on_full=self._index_full
            )
        self.writer = RecordWriter(config.maxMessageSize, default_store_host(config))
        self.disk_usage_probe: DiskProbe = disk_usage_probe or self._default_disk_probe
        self.checkpoint: Checkpoint | None = None
        self.dispatchers: list[CommitLogDispatcher] = []
        self.builtin_dispatchers: list[CommitLogDispatcher] = [ConsumeQueueDispatcher(self.cqs)]
        if self.index is not None:
            self.builtin_dispatchers.append(IndexDispatcher(self.index))
        self.policy: FlushPolicy | None = None
        self._delay_levels = config.delay_levels_ms()
        self._tq: dict[str, dict[int, int]] = {}  # topic -> queue id -> next queue offset
        self._buf = bytearray(256 * 1024)
        self._view = memoryview(self._buf)
        self._reput_offset = 0
        self._wake: Any = None  # anyio.Event, created on start (it needs a running loop)
        self._progress: Any = None
        self._sync = False
        self._reput_idle = False
        # (phys, size, topic, queue, queue offset, sysflag, store ts, prepared offset, properties) of each
        # record appended since the reput loop last ran: it builds requests from these instead of
        # re-parsing the bytes it just wrote (recovery and any mismatch use the parser).
        self._handoff: list[tuple[Any, ...]] = []
        self._topics = self.writer._topics
        self._max_body = config.maxMessageSize
        self._backlog = self.options.backlog_bytes
        self._lock: StoreLock | None = None
        self._stack: AsyncExitStack | None = None
        self._tg: Any = None
        self._running = False  # started and not stopping
        self._writable = False  # running and no disk-full / dispatch error: the put path's one check
        self._closed_reason = "store not started"
        self._disk_full = ""
        self._dispatch_error = ""
        self._disk_ratio = -1.0
        self._index_threads: list[Any] = []
        self.recovery: dict[str, Any] = {}
        self._n_put = self._n_put_failed = self._n_get = self._n_get_found = 0
        self._start_offset = 0  # commitlog end at start: put_bytes = growth since
        self._n_handoff = self._n_parsed = 0
        self._n_deleted = {"commitlog": 0, "consumequeue": 0, "index": 0}
        self._stale_span = config.maxMessageSize + 128 * 1024

    # ------------------------------------------------------------------ public attributes

    @property
    def store_host(self) -> bytes:
        """STOREHOSTADDRESS written into records: 8-byte IPv4 or 20-byte IPv6 form (settable)."""
        return self.writer.store_host

    @store_host.setter
    def store_host(self, value: bytes) -> None:
        self.writer.store_host = value

    @property
    def max_phy_offset(self) -> int:
        return self.commitlog.max_offset

    @property
    def min_phy_offset(self) -> int:
        return self.commitlog.min_offset

    @property
    def flushed_offset(self) -> int:
        return self.commitlog.flushed_where

    @property
    def dispatched_offset(self) -> int:
        return self._reput_offset

    def flush(self, least_pages: int) -> int:
        """``Flushable.flush``: blocking, for a worker thread."""
        return self.commitlog.flush(least_pages)

    @property
    def _writable_remark(self) -> str:
        return self._closed_reason or self._disk_full or self._dispatch_error

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> MmapMessageStore:
        stack = AsyncExitStack()
        await stack.__aenter__()
        self._wake = anyio.Event()
        self._progress = anyio.Event()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._lock = StoreLock(self.root / "lock")
            stack.callback(self._lock.release)
            stack.callback(self._close_files)
            t0 = time.monotonic()
            abnormal = await anyio.to_thread.run_sync(self._load_and_recover)
            self.dispatchers = self._make_dispatchers()
            self.policy = self._make_policy()
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)
            self._tg.start_soon(self._reput_loop)
            await self.wait_dispatched()
            self._rebuild_topic_queue_table()
            self._start_offset = self.commitlog.max_offset
            self.recovery["seconds"] = round(time.monotonic() - t0, 3)
            log.info(
                "store %s started (%s recovery in %.2fs): commitlog [%d, %d), %d consume queues",
                self.root,
                "abnormal" if abnormal else "normal",
                self.recovery["seconds"],
                self.min_phy_offset,
                self.max_phy_offset,
                sum(1 for _ in self.cqs),
            )
            await stack.enter_async_context(self.policy)
            self._sync = bool(self.policy.synchronous)
            self._tg.start_soon(self._logics_flush_loop)
            self._tg.start_soon(self._retention_loop)
            self.check_disk()
            (self.root / "abort").touch()
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        self._closed_reason = ""
        self._running = True
        self._update_writable()
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is None:
            return
        self._closed_reason = "store is shutting down"
        self._running = False
        self._update_writable()
        caught_up = False
        with anyio.move_on_after(10, shield=True):
            await self.wait_dispatched()
            caught_up = True
        self._tg.cancel_scope.cancel()
        try:
            # LIFO: the policy (final flush, shielded inside), the task group, then files and lock.
            # No cancel scope may be opened around this: the task groups were entered in __aenter__.
            await stack.aclose()
        finally:
            if caught_up and not self._disk_full and not self._dispatch_error:
                (self.root / "abort").unlink(missing_ok=True)
            else:
                log.warning("store %s stopped uncleanly; next start runs abnormal recovery", self.root)

    def _close_files(self) -> None:
        """Final flush of everything, checkpoint, unmap (runs last on shutdown, or after a failed start)."""
        try:
            if self.checkpoint is not None and self.commitlog.files and self.policy is not None:
                self.commitlog.flush(0)
                for cq in self.cqs:
                    cq.flush(0)
                for th in self._index_threads:
                    th.join()
                if self.index is not None:
                    for f in self.index.files:
                        f.write_header()
                        f.mf.sync()
                self.checkpoint.physic_ts = max(self.checkpoint.physic_ts, self.commitlog.last_flushed_ts)
                self.checkpoint.logics_ts = max(self.checkpoint.logics_ts, self.cqs.logics_ts)
                self.checkpoint.flush()
        finally:
            self.commitlog.close()
            self.cqs.close()
            if self.index is not None:
                self.index.close()
            if self.checkpoint is not None:
                self.checkpoint.close()
                self.checkpoint = None

    def _load_and_recover(self) -> bool:
        """Blocking part of start-up (worker thread): §4.3 steps 1-4. Returns True after a crash."""
        cfg = self.config
        abnormal = (self.root / "abort").exists()
        self.checkpoint = Checkpoint(self.root / "checkpoint")
        self.commitlog.load()
        self.cqs.load()
        if self.index is not None:
            self.index.load(abnormal, self.checkpoint.index_ts)
        for cq in self.cqs:
            cq.recover()
        cq_max_phys = self.cqs.max_phys()
        if cfg.messageIndexEnable and cfg.messageIndexSafe:
            min_ts = self.checkpoint.min_timestamp_index()
        else:
            min_ts = self.checkpoint.min_timestamp()
        end, replay_from = self.commitlog.recover(
            normal=not abnormal,
            check_crc=cfg.checkCRCOnRecover,
            min_timestamp=min_ts,
            stale_span=self._stale_span,
            on_cut=log.warning,
        )
        if not self.commitlog.files:
            for topic in list(self.cqs.queues):
                self.cqs.delete_topic(topic)
        elif cq_max_phys >= end:
            for cq in self.cqs:
                cq.truncate_dirty(end)
        if self.index is not None:
            self.index.truncate(end)
        cl_min = self.commitlog.min_offset
        for cq in self.cqs:
            cq.correct_min_offset(cl_min)
        reput = max(self.cqs.max_phys(), cl_min)
        if abnormal:
            reput = min(reput, max(replay_from, cl_min))
        self._reput_offset = min(reput, end)
        self._rebuild_topic_queue_table()
        self.recovery = {
            "abnormal": abnormal,
            "commitlog_end": end,
            "replay_from": self._reput_offset,
            "replay_bytes": end - self._reput_offset,
        }
        return abnormal

    def _make_dispatchers(self) -> list[CommitLogDispatcher]:
        found: list[CommitLogDispatcher] = []
        if self.kernel is not None:
            for part in self.kernel.hook.rmq_dispatch_make_dispatchers(kernel=self.kernel, store=self):
                found.extend(part or ())
        missing = [d for d in self.builtin_dispatchers if d not in found]
        return missing + found

    def _make_policy(self) -> FlushPolicy:
        policy = None
        if self.kernel is not None:
            policy = self.kernel.hook.rmq_flush_make_policy(
                kernel=self.kernel, store=self, config=self.config
            )
        if policy is None:
            from rmq.plugins.flush import AsyncFlushPolicy, SyncFlushPolicy

            sync = self.config.flushDiskType.upper() == "SYNC_FLUSH"
            policy = SyncFlushPolicy(self, self.config) if sync else AsyncFlushPolicy(self, self.config)
        return policy

    def _rebuild_topic_queue_table(self) -> None:
        tq: dict[str, dict[int, int]] = {}
        for cq in self.cqs:
            tq.setdefault(cq.topic, {})[cq.queue_id] = cq.max_offset
        self._tq = tq

    # ------------------------------------------------------------------ put

    async def put_message(self, msg: MessageRecord) -> PutResult:
        if not self._writable:
            return self._refused()
        writer = self.writer
        body = msg.body
        props = msg.properties
        pb = props.encode() if props else b""
        tp = self._topics.get(msg.topic)
        if tp is not None and len(msg.born_host) == 8 and len(body) <= self._max_body and len(pb) <= 32767:
            head = writer.head8  # the common case, validated inline
            sys_flag = (msg.sys_flag & ~0x30) | writer._store_v6
            total = head.size + len(body) + len(tp) + 2 + len(pb)
        else:
            try:
                tp, pb, sys_flag, total, head = writer.measure(msg)
            except RecordError as e:
                self._n_put_failed += 1
                return PutResult(e.status, remark=e.remark)
        cl = self.commitlog
        files = cl.files
        f = files[-1] if files else None
        if f is None or total + 8 > f.size - f.wrote:
            try:
                f = cl.reserve(total)
            except ValueError as e:
                self._n_put_failed += 1
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=str(e))
            except OSError as e:
                self._n_put_failed += 1
                return PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED, remark=f"cannot create segment: {e}")
        pos = f.wrote
        phys = f.start + pos
        if msg.sys_flag & 0xC in (4, 12):  # prepared / rollback: no queue offset
            qoff = 0
        else:
            tq = self._tq.get(msg.topic)
            if tq is None:
                tq = self._tq[msg.topic] = {}
            qid = msg.queue_id
            qoff = tq.get(qid, 0)
            tq[qid] = qoff + 1
        ts = msg.store_timestamp or time.time_ns() // 1_000_000
        if total > len(self._buf):
            self._grow(total)
        buf = self._buf
        head.pack_into(
            buf,
            0,
            total,
            MAGIC_MESSAGE,
            crc32(body) & 0x7FFFFFFF,
            msg.queue_id,
            msg.flag,
            qoff,
            phys,
            sys_flag,
            msg.born_timestamp,
            msg.born_host,
            ts,
            writer._store_host,
            msg.reconsume_times,
            msg.prepared_tx_offset,
            len(body),
        )
        p = head.size
        e = p + len(body)
        buf[p:e] = body
        p = e + len(tp)
        buf[e:p] = tp
        e = p + 2 + len(pb)
        buf[p:e] = _PROPS_LEN(len(pb)) + pb
        end = pos + total
        f.mm[pos:end] = self._view[:total]  # the one copy into the mapping
        f.wrote = end
        end = phys + total
        cl.tail = (end, ts)
        self._n_put += 1
        self._handoff.append(
            (phys, total, msg.topic, msg.queue_id, qoff, sys_flag, ts, msg.prepared_tx_offset, props)
        )
        if self._reput_idle:
            self._reput_idle = False
            self._wake.set()
        result = PutResult(PutStatus.PUT_OK, phys, total, qoff, 1, ts)
        if self._sync:
            if "WAIT\x01false" not in props and not await self.policy.wait_flushed(end):  # type: ignore[union-attr]
                result.status = PutStatus.FLUSH_DISK_TIMEOUT
        elif end - self._reput_offset > self._backlog:
            await anyio.lowlevel.checkpoint()  # let the reput loop catch up with a put-only caller
        return result

    async def put_messages(self, batch: Sequence[MessageRecord]) -> PutResult:
        """All records of one (topic, queue) built into one buffer and copied with one slice assignment."""
        if not self._writable:
            return self._refused()
        if not batch:
            return self._illegal("empty batch")
        first = batch[0]
        topic = first.topic
        qid = first.queue_id
        writer = self.writer
        measured = []
        total = 0
        # Common case inlined (IPv4 producer, known topic): measure = (topic prefix, props bytes, sysflag,
        # length, header struct), exactly what RecordWriter.measure returns after validating.
        tp = self._topics.get(topic)
        head8 = writer.head8
        fixed = head8.size + 2 + (len(tp) if tp is not None else 0)
        sv6 = writer._store_v6
        max_body = self._max_body
        add = measured.append
        for m in batch:
            if m.topic != topic or m.queue_id != qid:
                return self._illegal("a batch must target one topic and queue")
            sf = m.sys_flag
            if sf & 0xC:
                return self._illegal("transaction messages cannot be batched")
            props = m.properties
            if "DELAY\x01" in props and props.split("DELAY\x01", 1)[1].split("\x02", 1)[0] not in ("", "0"):
                return self._illegal("delayed messages cannot be batched")
            pb = props.encode() if props else b""
            if tp is not None and len(m.born_host) == 8 and len(m.body) <= max_body and len(pb) <= 32767:
                size = fixed + len(m.body) + len(pb)
                add((tp, pb, (sf & ~0x30) | sv6, size, head8))
            else:
                try:
                    meas = writer.measure(m)
                except RecordError as e:
                    return self._illegal(f"batch member rejected: {e.remark}")
                add(meas)
                size = meas[3]
            total += size
        if total > self.config.maxMessageSize + 64 * 1024 + RECORD_OVERHEAD * len(batch) + 128 * 1024:
            return self._illegal(
                f"batch of {total} bytes exceeds maxMessageSize {self.config.maxMessageSize}"
            )
        cl = self.commitlog
        try:
            f = cl.reserve(total)
        except ValueError as e:
            return self._illegal(str(e))
        except OSError as e:
            self._n_put_failed += 1
            return PutResult(PutStatus.CREATE_MAPPED_FILE_FAILED, remark=f"cannot create segment: {e}")
        pos = f.wrote
        phys = f.start + pos
        tq = self._tq.get(topic)
        if tq is None:
            tq = self._tq[topic] = {}
        qoff = tq.get(qid, 0)
        n = len(batch)
        tq[qid] = qoff + n
        ts = first.store_timestamp or time.time_ns() // 1_000_000
        if total > len(self._buf):
            self._grow(total)
        buf = self._buf
        p = 0
        offsets = []
        handoff = self._handoff
        store_host = writer._store_host
        plen = _PROPS_LEN
        for i in range(n):
            m = batch[i]
            tp, pb, sf, size, head = measured[i]
            body = m.body
            offsets.append(phys + p)
            handoff.append((phys + p, size, topic, qid, qoff + i, sf, ts, m.prepared_tx_offset, m.properties))
            head.pack_into(
                buf,
                p,
                size,
                MAGIC_MESSAGE,
                crc32(body) & 0x7FFFFFFF,
                qid,
                m.flag,
                qoff + i,
                phys + p,
                sf,
                m.born_timestamp,
                m.born_host,
                ts,
                store_host,
                m.reconsume_times,
                m.prepared_tx_offset,
                len(body),
            )
            q = p + head.size
            e = q + len(body)
            buf[q:e] = body
            q = e + len(tp)
            buf[e:q] = tp
            p += size
            buf[q:p] = plen(len(pb)) + pb
        f.mm[pos : pos + total] = self._view[:total]
        f.wrote = pos + total
        end = phys + total
        cl.tail = (end, ts)
        self._n_put += n
        if self._reput_idle:
            self._reput_idle = False
            self._wake.set()
        result = PutResult(PutStatus.PUT_OK, phys, total, qoff, n, ts, offsets)
        if self._sync:
            if "WAIT\x01false" not in first.properties and not await self.policy.wait_flushed(end):  # type: ignore[union-attr]
                result.status = PutStatus.FLUSH_DISK_TIMEOUT
        elif end - self._reput_offset > self._backlog:
            await anyio.lowlevel.checkpoint()
        return result

    def _grow(self, size: int) -> None:
        self._view.release()
        self._buf = bytearray(max(size, 2 * len(self._buf)))
        self._view = memoryview(self._buf)

    def _refused(self) -> PutResult:
        self._n_put_failed += 1
        return PutResult(
            PutStatus.SERVICE_NOT_AVAILABLE, remark=self._writable_remark or "store not writable"
        )

    def _illegal(self, remark: str) -> PutResult:
        self._n_put_failed += 1
        return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=remark)

    # ------------------------------------------------------------------ dispatch (reput)

    async def wait_dispatched(self, offset: int | None = None) -> None:
        """Return once dispatch has consumed the commitlog up to ``offset`` (default: its end now)."""
        target = self.commitlog.max_offset if offset is None else offset
        while self._reput_offset < target and self._reput_offset < self.commitlog.max_offset:
            await self._progress.wait()

    async def _reput_loop(self) -> None:
        while True:
            if self._reput_offset >= self.commitlog.max_offset:
                wake = self._wake = anyio.Event()
                self._reput_idle = True  # a put sets the event only when the loop sleeps
                await wake.wait()
                continue
            await self._reput_once()
            progress, self._progress = self._progress, anyio.Event()
            progress.set()
            await anyio.lowlevel.checkpoint()

    def _handoff_requests(self, offset: int) -> tuple[list[Any], int]:
        """Requests for the handed-off records starting at ``offset`` (none if they do not start there)."""
        items = self._handoff
        fsize = self.commitlog.file_size
        if items[0][0] < offset:  # already dispatched by the parser
            k = bisect.bisect_left(items, offset, key=_first)
            del items[:k]
            if not items:
                return [], offset
        if items[0][0] != offset and not self._rolled(offset, items[0][0], fsize):
            return [], offset
        limit = self.options.dispatch_batch
        if len(items) <= limit:
            take = items
            self._handoff = []
        else:
            take = items[:limit]
            del items[:limit]
        reqs: list[Any] = []
        add = reqs.append
        decode, tags, req, levels = decode_properties, tags_code, DispatchRequest, self._delay_levels
        expected = offset
        for phys, size, topic, qid, qoff, sys_flag, ts, prepared, props in take:
            if phys != expected and not self._rolled(expected, phys, fsize):
                log.warning(
                    "reput: hand-off out of step at %d (expected %d); parsing instead", phys, expected
                )
                self._handoff = []
                break
            if props:
                d = decode(props)
                if topic == SCHEDULE_TOPIC and Prop.DELAY in d:
                    tc = message_tags_code(topic, d, ts, levels)
                else:
                    tc = tags(d.get("TAGS"))
                add(
                    req(
                        topic,
                        qid,
                        phys,
                        size,
                        tc,
                        ts,
                        qoff,
                        sys_flag,
                        prepared,
                        d.get("KEYS"),
                        d.get("UNIQ_KEY"),
                        d,
                    )
                )
            else:
                add(req(topic, qid, phys, size, 0, ts, qoff, sys_flag, prepared, None, None, {}))
            expected = phys + size
        return reqs, expected

    def _rolled(self, offset: int, nxt: int, fsize: int) -> bool:
        """True when ``offset`` holds the end-of-file blank and ``nxt`` starts the next segment."""
        if nxt % fsize or nxt != (offset // fsize + 1) * fsize:
            return False
        f = self.commitlog.file_for(offset)
        if f is None:
            return False
        pos = offset - f.start
        return pos + 8 <= f.size and _HEAD2.unpack_from(f.mm, pos)[1] == MAGIC_BLANK

    async def _reput_once(self) -> None:
        cl = self.commitlog
        offset = self._reput_offset
        if offset < cl.min_offset:
            offset = cl.min_offset
        if self._handoff:
            reqs, end = self._handoff_requests(offset)
            if reqs:
                self._n_handoff += len(reqs)
                await self._run_dispatchers(reqs)
                self._reput_offset = end
                return
        f = cl.file_for(offset)
        if f is None:  # beyond the end (cannot happen) or nothing left
            self._reput_offset = cl.max_offset
            return
        reqs: list[Any] = []
        pos, state = parse_for_dispatch(
            f.mm, offset - f.start, f.wrote, f.start, reqs, self.options.dispatch_batch, self._delay_levels
        )
        if reqs:
            self._n_parsed += len(reqs)
            await self._run_dispatchers(reqs)
        if state == 1:
            self._reput_offset = f.end
        elif state == -1:
            log.error(
                "reput: invalid record at offset %d in %s; skipping to offset %d",
                f.start + pos,
                f.path,
                f.start + f.wrote,
            )
            self._reput_offset = f.start + f.wrote if f.wrote < f.size else f.end
        else:
            self._reput_offset = f.start + pos

    async def _run_dispatchers(self, reqs: list[Any]) -> None:
        builtin = self.builtin_dispatchers
        for d in self.dispatchers:
            attempt = 0
            while True:
                try:
                    d.dispatch(reqs)
                    break
                except Exception as e:
                    if d not in builtin:
                        log.exception(
                            "dispatcher %r failed on %d records; they are skipped for it", d, len(reqs)
                        )
                        break
                    attempt += 1
                    if attempt == 30:
                        self._dispatch_error = f"consume queue/index build failing: {e}"
                        self._update_writable()
                        log.error("%s; store refuses writes until it succeeds", self._dispatch_error)
                    elif attempt < 30:
                        log.warning("dispatch into %r failed (%s); retrying", d, e)
                    await anyio.sleep(1)
        if self._dispatch_error:
            self._dispatch_error = ""
            self._update_writable()

    # ------------------------------------------------------------------ background services

    async def _logics_flush_loop(self) -> None:
        """Flush consume queues, then persist the checkpoint with the times captured before the flush."""
        interval = max(self.config.flushIntervalConsumeQueue, 1) / 1000
        while True:
            await anyio.sleep(interval)
            await self._flush_logics()

    async def _flush_logics(self) -> None:
        logics_ts = self.cqs.logics_ts
        physic_ts = self.commitlog.last_flushed_ts
        await anyio.to_thread.run_sync(self._flush_logics_sync, logics_ts, physic_ts)

    def _flush_logics_sync(self, logics_ts: int, physic_ts: int) -> None:
        for cq in self.cqs:
            cq.flush(0)
        cp = self.checkpoint
        if cp is not None:
            cp.logics_ts = max(cp.logics_ts, logics_ts)
            cp.physic_ts = max(cp.physic_ts, physic_ts)
            cp.flush()

    def _index_full(self, f: IndexFile) -> None:
        """An index file filled: force it and record its end time in the checkpoint, off the loop."""
        import threading

        def work() -> None:
            f.write_header()
            f.mf.sync()
            cp = self.checkpoint
            if cp is not None:
                cp.index_ts = max(cp.index_ts, f.end_ts)
                cp.flush()

        self._index_threads = [t for t in self._index_threads if t.is_alive()]
        th = threading.Thread(target=work, name="rmq-index-flush", daemon=True)
        self._index_threads.append(th)
        th.start()

    async def _retention_loop(self) -> None:
        interval = max(self.config.cleanResourceInterval, 100) / 1000
        while True:
            await anyio.sleep(interval)
            try:
                await self.clean_expired_files()
            except Exception:
                log.exception("retention pass failed")

    def _default_disk_probe(self) -> float:
        """Used fraction of the fullest partition holding the commitlog or the consume queues, as
        RocketMQ computes it: used / (used + usable), so root-reserved blocks count as neither."""
        ratios = []
        for d in {self.commitlog.dir, self.cqs.root}:
            try:
                st = os.statvfs(d)
            except OSError:
                return 1.0  # unreadable counts as full: clean up rather than run out
            used = (st.f_blocks - st.f_bfree) * st.f_frsize
            usable = st.f_bavail * st.f_frsize
            if used + usable > 0:
                ratios.append(used / (used + usable))
        return max(ratios, default=0.0)

    def check_disk(self) -> float:
        """Probe disk usage; at diskSpaceWarningLevelRatio the store refuses puts until it drops."""
        ratio = float(self.disk_usage_probe())
        self._disk_ratio = ratio
        level = self.config.diskSpaceWarningLevelRatio
        if ratio >= level:
            if not self._disk_full:
                log.error(
                    "disk %.1f%% used >= diskSpaceWarningLevelRatio %.0f%%: refusing puts",
                    ratio * 100,
                    level * 100,
                )
            self._disk_full = (
                f"disk full: {ratio * 100:.1f}% used under {self.commitlog.dir}"
                f" (diskSpaceWarningLevelRatio {level * 100:.0f}%); writes refused until space is freed"
            )
        elif self._disk_full:
            log.info("disk %.1f%% used: accepting puts again", ratio * 100)
            self._disk_full = ""
        self._update_writable()
        return ratio

    def _update_writable(self) -> None:
        self._writable = self._running and not self._disk_full and not self._dispatch_error

    async def clean_expired_files(self, force: bool = False) -> int:
        """One retention pass (§6). Returns commitlog segments deleted; consume-queue and index files
        behind the new minimum are deleted too (counted in ``stats()``)."""
        if self.checkpoint is None:
            return 0
        cfg = self.config
        ratio = self.check_disk()
        max_used = min(max(cfg.diskMaxUsedSpaceRatio, 10), 95) / 100
        hours = {h.strip() for h in cfg.deleteWhen.split(";") if h.strip()}
        now_hour = time.strftime("%H")
        time_up = now_hour in hours or str(int(now_hour)) in hours
        space_full = ratio > max_used
        if not (force or time_up or space_full):
            return 0
        clean_now = force or (cfg.cleanFileForciblyEnable and ratio > cfg.diskSpaceCleanForciblyRatio)
        cl = self.commitlog
        if len(cl.files) > 1 and cl.flushed_where < cl.files[-1].start:
            await anyio.to_thread.run_sync(cl.flush, 0)
        reserved = cfg.fileReservedTime * 3600
        now = time.time()
        deleted = 0
        limit = len(cl.files) if force else 10
        while len(cl.files) > 1 and deleted < limit:
            f = cl.files[0]
            if f.end > cl.flushed_where or f.end > self._reput_offset:
                break
            if not clean_now:
                try:
                    mtime = f.path.stat().st_mtime
                except OSError:
                    mtime = 0.0
                if now < mtime + reserved:
                    break
            log.info("retention: deleting commitlog segment %s", f.path)
            cl.delete_first()
            deleted += 1
            if not force and cfg.deleteCommitLogFilesInterval > 0:
                await anyio.sleep(cfg.deleteCommitLogFilesInterval / 1000)
        if deleted:
            self._n_deleted["commitlog"] += deleted
            cl_min = cl.min_offset
            for cq in self.cqs:
                self._n_deleted["consumequeue"] += cq.delete_expired(cl_min)
                cq.correct_min_offset(cl_min)
            if self.index is not None:
                self._n_deleted["index"] += self.index.delete_expired(cl_min)
            self.check_disk()
        return deleted

    # ------------------------------------------------------------------ reads

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
        self._n_get += 1
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
            self._n_get_found += len(messages)
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
            if phys < phys_min:
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
        f = self.commitlog.file_for(commit_log_offset)
        if f is None:
            return None
        p = commit_log_offset - f.start
        if p < 0 or p + RECORD_OVERHEAD > f.wrote:
            return None
        size, magic = _HEAD2.unpack_from(f.mm, p)
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
            rtopic, props = record_properties(rec, 0)
            if rtopic != topic or not begin <= store_timestamp_at(rec, 0) <= end:
                continue
            if props.get(Prop.UNIQ_KEY) == key or key in props.get(Prop.KEYS, "").split(" "):
                out.append(rec)
                if len(out) >= max_num:
                    break
        return out

    # ------------------------------------------------------------------ admin

    def delete_topics(self, topics: Sequence[str]) -> None:
        for t in topics:
            self.cqs.delete_topic(t)
            self._tq.pop(t, None)

    def stats(self) -> dict[str, Any]:
        cl = self.commitlog
        return {
            "store": "mmap",
            "root": str(self.root),
            "puts": self._n_put,
            "put_bytes": cl.max_offset - self._start_offset,
            "put_failures": self._n_put_failed,
            "gets": self._n_get,
            "get_messages": self._n_get_found,
            "min_phy_offset": cl.min_offset,
            "max_phy_offset": cl.max_offset,
            "flushed_offset": cl.flushed_where,
            "dispatched_offset": self._reput_offset,
            "dispatch_lag_bytes": cl.max_offset - self._reput_offset,
            "dispatched_from_handoff": self._n_handoff,
            "dispatched_from_parse": self._n_parsed,
            "commitlog_files": len(cl.files),
            "consume_queues": sum(1 for _ in self.cqs),
            "index_files": len(self.index.files) if self.index is not None else 0,
            "deleted_files": dict(self._n_deleted),
            "disk_used_ratio": self._disk_ratio,
            "writable": self._writable,
            "remark": self._writable_remark,
            "recovery": dict(self.recovery),
        }
