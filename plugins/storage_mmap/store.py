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

Failure modes (each logged once when it starts and once when it ends):

* **Disk full.** A commitlog segment is created with all its blocks reserved, and the
  next one is created before the current one is closed with its blank record; when the
  disk cannot hold it, the put is refused with SERVICE_NOT_AVAILABLE and a remark
  starting "disk full: ", reads go on, and a background task retries every
  ``disk_retry_ms`` until the segment exists, then writes resume by themselves.
  Consume-queue and index files reserve their blocks a chunk ahead; when that fails
  the reput loop keeps the batch, the store refuses writes with the same kind of
  remark, and the batch is retried (idempotently) until it goes through: the queues
  then catch up. No file is ever written through a mapping where no block is
  reserved, so a full disk cannot end the process with SIGBUS. The store starts on a
  full disk read-only (one line says why) and resumes the same way.
* **Corruption.** See ``recovery`` and ``commitlog``: damaged consume queues and
  index files are rebuilt from the commitlog at start-up; a corrupt commitlog record
  costs only itself (a "hole": never dispatched, never served; its queue offset reads
  as a filler unit that gets and pulls step over).
"""

from __future__ import annotations

import bisect
import logging
import operator
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
from rmq.kernel.ratelimit import RateLimitedLog
from rmq.kernel.watermark import Watermark
from rmq.plugins.storage_mmap import retention
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
from rmq.plugins.storage_mmap.consume_queue import (
    INT_MAX,
    UNIT,
    UNIT_SIZE,
    ConsumeQueueDispatcher,
    ConsumeQueueTable,
)
from rmq.plugins.storage_mmap.flushing import DefaultFlushPolicy
from rmq.plugins.storage_mmap.index import IndexDispatcher, IndexFile, IndexService
from rmq.plugins.storage_mmap.mapped_file import DiskFullError
from rmq.plugins.storage_mmap.recovery import recover_store
from rmq.plugins.storage_mmap.scan import resync
from rmq.protocol.common import MAGIC_BLANK, MAGIC_MESSAGE, Prop, decode_properties, tags_code
from rmq.protocol.names import validate_topic
from rmq.protocol.recordwriter import default_store_host

if TYPE_CHECKING:
    from rmq.kernel.config import BrokerConfig
    from rmq.kernel.hookspecs.dispatch import CommitLogDispatcher
    from rmq.kernel.hookspecs.filtering import MessageFilter
    from rmq.kernel.hookspecs.flush import FlushPolicy

log = logging.getLogger("rmq.store")
_limited = RateLimitedLog(log, interval=30.0)

_HEAD2 = struct.Struct(">ii")
_PROPS_LEN = struct.Struct(">h").pack
_first = operator.itemgetter(0)
_MIN = -(1 << 63)
_REPLAY_LOG_BYTES = 64 * 1024 * 1024  # replays at least this long log their progress
DiskProbe = Callable[[], float]
ForcedCleanHook = Callable[[dict[tuple[str, int], tuple[int, int]]], None]


@attrs.define(frozen=True)
class MmapOptions:
    """The ``[plugin.storage.mmap]`` table."""

    preallocate: bool = True  # create the next commitlog segment on a background thread
    # Reserve disk blocks before writing any file. false leaves files sparse: a full disk then ends
    # the process with SIGBUS. Only for a filesystem whose posix_fallocate is too slow.
    fallocate: bool = True
    dispatch_batch: int = 4096  # most records handed to dispatchers in one call
    backlog_bytes: int = 32 * 1024 * 1024  # a put yields to the reput loop when dispatch lags this much
    # Start-up checks: "all" validates every commitlog record (CRC) and checks every consume-queue
    # unit against its record, which reads the whole store at each start (~3.5 s per GiB of 1 KiB
    # messages, cached); "recent" does so only in RocketMQ's window (the last three segments, or
    # from the checkpoint after a crash); "auto": "all" up to verify_all_max_gib, else "recent".
    verify: str = "auto"
    verify_all_max_gib: float = 8.0
    disk_retry_ms: int = 1000  # how often writes refused for a full disk retry on their own

    def __attrs_post_init__(self) -> None:
        if self.dispatch_batch < 1:
            raise ValueError("dispatch_batch must be >= 1")
        if self.backlog_bytes < 1:
            raise ValueError("backlog_bytes must be >= 1")
        if self.verify not in ("auto", "all", "recent"):
            raise ValueError(f"verify must be 'auto', 'all' or 'recent', got {self.verify!r}")
        if self.disk_retry_ms < 1:
            raise ValueError("disk_retry_ms must be >= 1")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _full_remark(e: OSError, what: str) -> str:
    """The "disk full: ..." remark of a failed reservation or file creation."""
    return e.remark if isinstance(e, DiskFullError) else str(DiskFullError(what, e))


class MmapMessageStore:
    """See the module docstring. Public extras beyond ``MessageStore``: ``store_host`` (read-only;
    ``attach(store_host=...)`` sets it),
    ``disk_usage_probe`` (settable), ``on_forced_clean`` (settable, optional: called with
    ``{(topic, queue): (old min offset, new min offset)}`` after a clean that deleted data
    before its expiry, disk over diskSpaceCleanForciblyRatio; it must not block),
    ``wait_dispatched()``, ``check_disk()`` and the ``Flushable`` members (``flushed_offset``,
    ``flush()``)."""

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
        self.cqs = ConsumeQueueTable(
            self.root / "consumequeue",
            config.mappedFileSizeConsumeQueue,
            tombstones=self.root / "deleted_topics",
        )
        self.index: IndexService | None = None
        if config.messageIndexEnable:
            self.index = IndexService(
                self.root / "index", config.maxHashSlotNum, config.maxIndexNum, on_full=self._index_full
            )
        self.writer = RecordWriter(config.maxMessageSize, default_store_host(config))
        self.disk_usage_probe: DiskProbe = disk_usage_probe or self._default_disk_probe
        self.on_forced_clean: ForcedCleanHook | None = None
        self.checkpoint: Checkpoint | None = None
        self.dispatchers: list[CommitLogDispatcher] = []
        self.builtin_dispatchers: list[CommitLogDispatcher] = [ConsumeQueueDispatcher(self.cqs)]
        if self.index is not None:
            self.builtin_dispatchers.append(IndexDispatcher(self.index))
        self.policy: FlushPolicy | None = None
        self._attached: list[CommitLogDispatcher] = []
        self._attached_policy: FlushPolicy | None = None
        self.durable = Watermark()
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
        self._disk_full = ""  # the diskSpaceWarningLevelRatio guard
        self._alloc_error = ""  # a commitlog segment could not be reserved
        self._dispatch_error = ""  # consume queue / index could not be written
        self._retry: Any = None  # anyio.Event: wakes the disk retry task
        self._write_state = ""  # last remark logged as "writes stopped" ("" = writing)
        self._disk_ratio = -1.0
        self._index_threads: list[Any] = []
        self.recovery: dict[str, Any] = {}
        self._n_put = self._n_put_failed = self._n_get = self._n_get_found = 0
        self._start_offset = 0  # commitlog end at start: put_bytes = growth since
        self._n_handoff = self._n_parsed = 0
        self._n_deleted = {"commitlog": 0, "consumequeue": 0, "index": 0}
        self._stale_span = config.maxMessageSize + 128 * 1024

    # ------------------------------------------------------------------ public attributes

    def attach(
        self,
        *,
        dispatchers: Sequence[CommitLogDispatcher] | None = None,
        flush_policy: FlushPolicy | None = None,
        store_host: bytes | None = None,
    ) -> None:
        """``MessageStore.attach``: what the owner built from the hooks; before ``async with``."""
        if (dispatchers is not None or flush_policy is not None) and (self._stack is not None or self._running):
            raise RuntimeError("attach dispatchers and flush_policy before the store starts")
        if store_host is not None:
            self.writer.store_host = store_host
        if dispatchers is not None:
            self._attached = [d for d in dispatchers if d not in self.builtin_dispatchers]
        if flush_policy is not None:
            self._attached_policy = flush_policy

    @property
    def store_host(self) -> bytes:
        """STOREHOSTADDRESS written into records: 8-byte IPv4 or 20-byte IPv6 form (settable)."""
        return self.writer.store_host

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
        return self._closed_reason or self._disk_full or self._alloc_error or self._dispatch_error

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> MmapMessageStore:
        stack = AsyncExitStack()
        await stack.__aenter__()
        self._wake = anyio.Event()
        self._progress = anyio.Event()
        self._retry = anyio.Event()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._lock = StoreLock(self.root / "lock")
            stack.callback(self._lock.release)
            stack.callback(self._close_files)
            t0 = time.monotonic()
            abnormal = await anyio.to_thread.run_sync(self._load_and_recover)
            self.durable.advance(self.commitlog.flushed_where)
            self.dispatchers = [*self.builtin_dispatchers, *self._attached]
            self.policy = self._attached_policy or DefaultFlushPolicy(self, self.config)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)
            self._tg.start_soon(self._reput_loop)
            await self._startup_dispatch()
            self._rebuild_topic_queue_table()
            self._start_offset = self.commitlog.max_offset
            await stack.enter_async_context(self.policy)
            self._sync = bool(self.policy.synchronous)
            self._tg.start_soon(self._logics_flush_loop)
            self._tg.start_soon(self._retention_loop)
            self._tg.start_soon(self._disk_retry_loop)
            try:  # the segment being written must have all its blocks before a put lands in it
                await anyio.to_thread.run_sync(self.commitlog.prepare_writable)
            except OSError as e:
                self._alloc_error = _full_remark(e, "reserve the commitlog segment being written")
            retention.check_disk(self)
            try:
                (self.root / "abort").touch()
            except OSError as e:
                log.warning("%s: cannot create the abort marker (%s)", self.root, e)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        self._closed_reason = ""
        self._write_state = self._writable_remark  # the start line says it; "writes resumed" ends it
        self._running = True
        self._update_writable()
        if self._alloc_error:
            self._retry.set()
        self.recovery["seconds"] = round(time.monotonic() - t0, 3)
        log.info(
            "store %s started (%s recovery in %.2fs): commitlog [%d, %d), %d consume queues%s",
            self.root,
            "abnormal" if abnormal else "normal",
            self.recovery["seconds"],
            self.min_phy_offset,
            self.max_phy_offset,
            sum(1 for _ in self.cqs),
            f"; READ-ONLY until this clears: {self._write_state}" if self._write_state else "",
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is None:
            return
        self._closed_reason = "store is shutting down"
        self._running = False
        self._update_writable()
        with anyio.move_on_after(10, shield=True):
            await self._wait_dispatch_or_stall()
        caught_up = self._reput_offset >= self.commitlog.max_offset
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
        except OSError as e:
            log.error("store %s: final flush failed (%s); next start runs recovery", self.root, e)
        finally:
            self.commitlog.close()
            self.cqs.close()
            if self.index is not None:
                self.index.close()
            if self.checkpoint is not None:
                self.checkpoint.close()
                self.checkpoint = None

    def _load_and_recover(self) -> bool:
        """Blocking part of start-up (worker thread): §4.3 steps 1-4 (see ``recovery``). True after a crash."""
        abnormal = (self.root / "abort").exists()
        self.checkpoint = Checkpoint(self.root / "checkpoint")
        self._reput_offset, self.recovery = recover_store(
            self.config,
            self.commitlog,
            self.cqs,
            self.index,
            self.checkpoint,
            abnormal,
            self._verify_all(),
            self._delay_levels,
            self._stale_span,
        )
        self._rebuild_topic_queue_table()
        return abnormal

    def _verify_all(self) -> bool:
        """Whether start-up checks the whole store (``verify``): "auto" decides by the commitlog's size."""
        mode = self.options.verify
        if mode != "auto":
            return mode == "all"
        d = self.commitlog.dir
        size = sum(p.stat().st_size for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else 0
        if size <= self.options.verify_all_max_gib * (1 << 30):
            return True
        log.info(
            "start-up checks cover the recent segments only: the commitlog is %.1f GiB > verify_all_max_gib %g"
            ' (set verify = "all" to check everything)',
            size / (1 << 30),
            self.options.verify_all_max_gib,
        )
        return False

    async def _startup_dispatch(self) -> None:
        """Replay dispatch before serving (queues complete at start), with progress lines for long
        replays; a replay stalled by a full disk does not hold the start: the store opens read-only."""
        start = self._reput_offset
        total = self.commitlog.max_offset - start
        t0 = next_log = time.monotonic()
        while self._reput_offset < self.commitlog.max_offset and not self._dispatch_error:
            with anyio.move_on_after(1):
                await self._progress.wait()
            if total >= _REPLAY_LOG_BYTES and time.monotonic() >= next_log + 2:
                next_log = time.monotonic()
                done = self._reput_offset - start
                log.info(
                    "replaying dispatch: %d%% (%d of %d MiB)", 100 * done // total, done >> 20, total >> 20
                )
        if total >= _REPLAY_LOG_BYTES:
            log.info("replayed %d MiB of dispatch in %.1fs", total >> 20, time.monotonic() - t0)

    async def _wait_dispatch_or_stall(self) -> None:
        while self._reput_offset < self.commitlog.max_offset and not self._dispatch_error:
            await self._progress.wait()

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
                return self._alloc_failed(e)
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
        try:
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
        except struct.error as exc:  # a field outside its Java type: refuse before anything is written
            if msg.sys_flag & 0xC not in (4, 12):
                self._tq[msg.topic][msg.queue_id] = qoff  # give the queue offset back: no hole
            self._n_put_failed += 1
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=f"a record field is out of range: {exc}")
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
            return self._alloc_failed(e)
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
        handed = len(handoff)
        try:
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
        except struct.error as exc:  # a member's field outside its Java type: nothing was written yet
            tq[qid] = qoff
            del handoff[handed:]
            self._n_put_failed += 1
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=f"a batch member's field is out of range: {exc}")
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

    def _alloc_failed(self, e: OSError) -> PutResult:
        """The next commitlog segment cannot be created: refuse writes until the retry task makes it."""
        self._alloc_error = _full_remark(e, "create the next commitlog segment")
        self._update_writable()
        self._retry.set()
        return self._refused()

    async def _disk_retry_loop(self) -> None:
        """While a segment cannot be reserved, try again every ``disk_retry_ms``; clear the error once
        it exists (the next put takes it), which resumes writes."""
        interval = self.options.disk_retry_ms / 1000
        while True:
            if not self._alloc_error:
                self._retry = anyio.Event()
                await self._retry.wait()
                continue
            await anyio.sleep(interval)
            try:
                await anyio.to_thread.run_sync(self.commitlog.prepare_writable)
            except OSError as e:
                self._alloc_error = _full_remark(e, "create the next commitlog segment")
                continue
            self._alloc_error = ""
            self._update_writable()

    def _update_writable(self) -> None:
        """Recompute the put path's flag; log one line when writes stop and one when they resume."""
        self._writable = self._running and not (self._disk_full or self._alloc_error or self._dispatch_error)
        if not self._running:
            return
        if self._writable:
            if self._write_state:
                log.warning("writes resumed (they had stopped: %s)", self._write_state)
                self._write_state = ""
        elif not self._write_state:
            self._write_state = self._writable_remark
            log.error("writes stopped: %s; reads continue", self._write_state)

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
            try:
                await self._reput_once()
            except Exception as e:  # a bug must not end dispatch for good: say so, refuse writes, retry
                _limited.error("reput", "reput failed at offset %d: %r; retrying", self._reput_offset, e)
                log.debug("reput failure", exc_info=True)
                if not self._dispatch_error:
                    self._dispatch_error = f"dispatch failing at offset {self._reput_offset}: {e!r}"
                    self._update_writable()
                self._signal_progress()
                await anyio.sleep(1)
                continue
            if self._dispatch_error.startswith("dispatch failing"):
                self._dispatch_error = ""
                self._update_writable()
            self._signal_progress()
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
        limit = f.wrote
        holes = cl.holes
        if holes:  # corrupt ranges found by recovery: parse up to the next one, then jump over it
            skip_to = holes.find(offset)
            if skip_to >= 0:
                self._reput_offset = skip_to
                return
            nxt = holes.next_start(offset) - f.start
            if 0 <= nxt < limit:
                limit = nxt
        reqs: list[Any] = []
        pos, state = parse_for_dispatch(
            f.mm, offset - f.start, limit, f.start, reqs, self.options.dispatch_batch, self._delay_levels
        )
        if reqs:
            self._n_parsed += len(reqs)
            await self._run_dispatchers(reqs)
        if state == 1:
            self._reput_offset = f.end
        elif state == -1:
            self._reput_offset = self._reput_resync(f, pos)
        else:
            self._reput_offset = f.start + pos

    def _reput_resync(self, f: Any, pos: int) -> int:
        """An invalid record the recovery did not report (a bug, or damage since): skip to the next
        valid record, remember the range as a hole, and say so."""
        at = f.start + pos
        cand = resync(f.mm, pos, f.wrote, f.start, True, self._stale_span)
        nxt = f.start + cand if cand >= 0 else (f.start + f.wrote if f.wrote < f.size else f.end)
        self.commitlog.holes.add(at, nxt)
        log.error(
            "reput: invalid record at offset %d in %s; skipped %d bytes to %d", at, f.path, nxt - at, nxt
        )
        return nxt

    async def _run_dispatchers(self, reqs: list[Any]) -> None:
        """Every dispatcher gets the batch. The store's own (queues, index) are retried until they
        take it, writes refused meanwhile: a disk that cannot hold their files at once, anything
        else after 30 tries. Retrying is safe, their duplicate guards skip what already landed."""
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
                    if isinstance(e, OSError):
                        if not self._dispatch_error:
                            self._dispatch_error = _full_remark(e, "extend a consume queue or index file")
                            self._update_writable()
                            self._signal_progress()
                        await anyio.sleep(self.options.disk_retry_ms / 1000)
                        continue
                    if attempt == 30:
                        self._dispatch_error = f"consume queue/index build failing: {e}"
                        self._update_writable()
                        self._signal_progress()
                    elif attempt < 30:
                        log.warning("dispatch into %r failed (%s); retrying", d, e)
                    await anyio.sleep(1)
        if self._dispatch_error:
            self._dispatch_error = ""
            self._update_writable()

    def _signal_progress(self) -> None:
        progress, self._progress = self._progress, anyio.Event()
        progress.set()

    # ------------------------------------------------------------------ background services

    async def _logics_flush_loop(self) -> None:
        """Flush consume queues, then persist the checkpoint with the times captured before the flush."""
        interval = max(self.config.flushIntervalConsumeQueue, 1) / 1000
        while True:
            await anyio.sleep(interval)
            try:
                await self._flush_logics()
            except OSError as e:  # the next round tries again; what is not flushed is replayed
                _limited.error("logics-flush", "consume queue / checkpoint flush failed: %s", e)

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
            try:
                f.write_header()
                f.mf.sync()
                cp = self.checkpoint
                if cp is not None:
                    cp.index_ts = max(cp.index_ts, f.end_ts)
                    cp.flush()
            except (OSError, ValueError) as e:  # closed meanwhile, or the disk refused
                _limited.error("index-flush", "index file %s: flush failed: %s", f.name, e)

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
        return retention.default_disk_probe(self)

    def check_disk(self) -> float:
        """Probe disk usage; at diskSpaceWarningLevelRatio the store refuses puts until it drops."""
        return retention.check_disk(self)

    async def clean_expired_files(self, force: bool = False) -> int:
        """One retention pass (§6): see ``retention``. Returns commitlog segments deleted."""
        return await retention.clean_expired_files(self, force)

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

    # ------------------------------------------------------------------ admin

    def delete_topics(self, topics: Sequence[str]) -> None:
        """Forget the topics' queues and remove their directories, confined to the store: a name
        that is not a valid topic is ignored (logged), whatever it contains. Records already in
        the commitlog never bring a deleted topic's queues back (see ``ConsumeQueueTable``)."""
        at = self.commitlog.max_offset
        for t in topics:
            if self.cqs.delete_topic(t, at):
                self._tq.pop(t, None)
            else:
                _limited.warning("delete-topic", "delete_topics: ignored, %s", validate_topic(t))

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
            "corrupt_ranges": len(cl.holes),
            "writable": self._writable,
            "remark": self._writable_remark,
            "recovery": dict(self.recovery),
        }
