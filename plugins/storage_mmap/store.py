"""``MmapMessageStore``: RocketMQ 4.9's on-disk store (commitlog, consume queues, index, checkpoint).

This module is the facade, the put path's gate and the lifecycle; the services live beside
it: ``append`` (the put path), ``reput`` (dispatch of new records), ``reads`` (pulls and
lookups, on ``rmq.protocol.storeread``), ``replica`` (the ``ReplicaLog`` face: HA's raw
bytes, the confirm offset) with ``truncate`` (cutting the log back), ``admin`` (topic
deletion and the admin codes' capabilities), ``retention`` (disk guards, expired files),
``recovery`` (start-up), ``flushing`` (the flush policy used when the owner attached none).

Start-up (``async with store``) follows reference §4.3: load, recover consume queues,
recover the commitlog (normal, or from the checkpoint after a crash), truncate what
lies beyond its end, then replay dispatch and block until the queues have caught up.
What the store works with (extra dispatchers, the flush policy, STOREHOST) is handed to
it by its owner with ``attach`` before that; the store itself calls no hooks.

A put appends synchronously (one event loop = one writer), wakes the reput loop, and
only then awaits the flush policy when that is synchronous.

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
* **Out of descriptors.** EMFILE/ENFILE while a file is created or opened takes the same
  path, with a remark starting "too many open files (EMFILE|ENFILE): " that names the cure
  (``ulimit -n``): it is no disk problem and is never called one. Writes resume by
  themselves once descriptors free up; existing queues keep being read meanwhile.
* **Corruption.** See ``recovery`` and ``commitlog``: damaged consume queues and
  index files are rebuilt from the commitlog at start-up; a corrupt commitlog record
  costs only itself (a "hole": never dispatched, never served; its queue offset reads
  as a filler unit that gets and pulls step over).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from rmq.kernel import MessageRecord, PutResult, PutStatus, Watermark
from rmq.plugins.storage_mmap import retention
from rmq.plugins.storage_mmap.admin import StoreAdminMixin
from rmq.plugins.storage_mmap.append import make_appender
from rmq.plugins.storage_mmap.checkpoint import Checkpoint, StoreLock
from rmq.plugins.storage_mmap.commitlog import CommitLog
from rmq.plugins.storage_mmap.flushing import DefaultFlushPolicy, LogicsFlusher
from rmq.plugins.storage_mmap.index import IndexDispatcher, IndexService
from rmq.plugins.storage_mmap.mapped_file import full_remark
from rmq.plugins.storage_mmap.options import MmapOptions
from rmq.plugins.storage_mmap.queue_table import ConsumeQueueDispatcher, ConsumeQueueTable
from rmq.plugins.storage_mmap.reads import StoreReader
from rmq.plugins.storage_mmap.recovery import load_and_recover
from rmq.plugins.storage_mmap.replica import Replica, ReplicaLogMixin
from rmq.plugins.storage_mmap.reput import ReputService
from rmq.protocol.common import waits_for_store
from rmq.protocol.recordwriter import RecordWriter, WriterAttach, default_store_host

if TYPE_CHECKING:
    from rmq.kernel import CommitLogDispatcher, FlushPolicy, ForcedCleanHook
    from rmq.roles import BrokerConfig

log = logging.getLogger("rmq.store")

_OK = PutStatus.PUT_OK
DiskProbe = Callable[[], float]
QueueGuard = Callable[[str, int], "str | None"]


class MmapMessageStore(StoreReader, ReplicaLogMixin, StoreAdminMixin, WriterAttach):
    """See the module docstring. Public extras beyond ``MessageStore``: ``store_host`` (read-only;
    ``attach(store_host=...)`` sets it), ``disk_usage_probe`` (settable), ``on_forced_clean``
    (settable, optional: called with ``{(topic, queue): (old min offset, new min offset)}`` after a
    clean that deleted data before its expiry, disk over diskSpaceCleanForciblyRatio; it must not
    block), ``queue_guard`` (settable, optional: ``(topic, queue id) -> reason or None``, asked
    before a put opens a consume queue the store does not have yet; a reason refuses the put with
    MESSAGE_ILLEGAL, so no request can make queues its topic does not have; replicated records are
    not asked), ``wait_dispatched()``, ``check_disk()`` and the ``Flushable`` members
    (``flushed_offset``, ``flush()``, ``durable``)."""

    def __init__(
        self,
        config: BrokerConfig,
        options: MmapOptions | None = None,
        disk_usage_probe: DiskProbe | None = None,
    ) -> None:
        self.config = config
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
            max_mapped=self.options.max_mapped_queues,
        )
        self.logics = LogicsFlusher(self)
        self.index: IndexService | None = None
        if config.messageIndexEnable:
            self.index = IndexService(
                self.root / "index", config.maxHashSlotNum, config.maxIndexNum, on_full=self.logics.index_full
            )
        self.writer = RecordWriter(config.maxMessageSize, default_store_host(config))
        self.disk_usage_probe: DiskProbe = disk_usage_probe or self._default_disk_probe
        self.on_forced_clean: ForcedCleanHook | None = None
        self.queue_guard: QueueGuard | None = None
        self.checkpoint: Checkpoint | None = None
        self.builtin_dispatchers: list[CommitLogDispatcher] = [ConsumeQueueDispatcher(self.cqs)]
        if self.index is not None:
            self.builtin_dispatchers.append(IndexDispatcher(self.index))
        self.dispatchers: list[CommitLogDispatcher] = []
        self.policy: FlushPolicy | None = None
        self.durable = Watermark()
        self._attached: list[CommitLogDispatcher] = []
        self._attached_policy: FlushPolicy | None = None
        self._stale_span = config.maxMessageSize + 128 * 1024
        self.reput = ReputService(self)
        self.appender = make_appender(self)  # compiled unless RMQ_PURE (or no compiler at install)
        self._append = self.appender.append  # bound once: the put path's hottest call
        self.replica = Replica(self)
        self._sync = False
        self.holds_answers = False  # put_message_nowait may return durable_at (SYNC_FLUSH)
        self.flush_timeout = max(int(config.syncFlushTimeout), 1) / 1000  # how long a held answer waits
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
        self.recovery: dict[str, Any] = {}
        self._start_offset = 0  # commitlog end at start: put_bytes = growth since
        self._n_deleted = {"commitlog": 0, "consumequeue": 0, "index": 0}

    def _attach_started(self) -> bool:
        return self._stack is not None or self._running

    def _attach_parts(self, dispatchers: Sequence[CommitLogDispatcher] | None, flush_policy: FlushPolicy | None,
                      on_forced_clean: ForcedCleanHook | None) -> None:
        if dispatchers is not None:
            self._attached = [d for d in dispatchers if d not in self.builtin_dispatchers]
        if flush_policy is not None:
            self._attached_policy = flush_policy
        if on_forced_clean is not None:
            self.on_forced_clean = on_forced_clean

    # ------------------------------------------------------------------ public attributes

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
        return self.reput.offset

    def flush(self, least_pages: int) -> int:
        """``Flushable.flush``: blocking, for a worker thread (the caller advances ``durable``)."""
        return self.commitlog.flush(least_pages)

    @property
    def _writable_remark(self) -> str:
        return self._closed_reason or self._disk_full or self._alloc_error or self._dispatch_error

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> MmapMessageStore:
        stack = AsyncExitStack()
        await stack.__aenter__()
        self.reput.start()
        self._retry = anyio.Event()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._lock = StoreLock(self.root / "lock")
            stack.callback(self._lock.release)
            stack.callback(self._close_files)
            t0 = time.monotonic()
            abnormal = await anyio.to_thread.run_sync(load_and_recover, self)
            self.durable.advance(self.commitlog.flushed_where)
            self.dispatchers = [*self.builtin_dispatchers, *self._attached]
            self.reput.dispatchers, self.reput.builtin = self.dispatchers, self.builtin_dispatchers
            self.policy = self._attached_policy or DefaultFlushPolicy(self, self.config)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)
            self._tg.start_soon(self.reput.run)
            await self.reput.replay_at_start()
            self.appender.rebuild_queue_table()
            self._start_offset = self.commitlog.max_offset
            await stack.enter_async_context(self.policy)
            self._sync = bool(self.policy.synchronous)
            # a policy that can be asked for a flush without awaiting it lets puts return at once
            self.holds_answers = self._sync and callable(getattr(self.policy, "want_flushed", None))
            self._tg.start_soon(self.logics.run)
            self._tg.start_soon(retention.retention_loop, self)
            self._tg.start_soon(retention.disk_retry_loop, self)
            try:  # the segment being written must have all its blocks before a put lands in it
                await anyio.to_thread.run_sync(self.commitlog.prepare_writable)
            except OSError as e:
                self._alloc_error = full_remark(e, "reserve the commitlog segment being written")
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
            await self.reput.wait_caught_up_or_stalled()
        caught_up = self.reput.offset >= self.reput.end()  # a tail held back by the confirm offset is no fault
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
                self.logics.final_flush()
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

    # ------------------------------------------------------------------ put

    async def put_message(self, msg: MessageRecord) -> PutResult:
        if not self._writable:
            return self._refused()
        result = self._append((msg,))
        if result.status is not _OK:
            return result
        # the tail below is repeated in put_messages: a shared coroutine would cost each put ~0.5 µs
        end = result.wrote_offset + result.wrote_bytes
        if self._sync:  # wait for the disk, unless the producer said WAIT=false
            if msg.waits and waits_for_store(msg.properties) and not await self.policy.wait_flushed(end):  # type: ignore[union-attr]
                result.status = PutStatus.FLUSH_DISK_TIMEOUT
        elif end - self.reput.offset > self._backlog:
            await anyio.lowlevel.checkpoint()  # let the reput loop catch up with a put-only caller
        return result

    def put_message_nowait(self, msg: MessageRecord) -> PutResult:
        """``put_message`` that never suspends: under SYNC_FLUSH (``holds_answers``) a round is
        asked for and ``durable_at`` tells the caller where ``durable`` must reach before it may
        answer (FLUSH_DISK_TIMEOUT if syncFlushTimeout passes first). A send then costs no
        parked coroutine and no task per request; the bytes' fate is the same as ``put_message``'s."""
        if not self._writable:
            return self._refused()
        return self._ask_flush(self._append((msg,)), msg.properties)

    def put_messages_nowait(self, batch: Sequence[MessageRecord]) -> PutResult:
        """``put_messages`` that never suspends (see ``put_message_nowait``)."""
        if not self._writable:
            return self._refused()
        return self._ask_flush(self.appender.put_batch(batch), batch[0].properties)

    def _ask_flush(self, result: PutResult, properties: str) -> PutResult:
        """A stored put that must be durable (SYNC_FLUSH, not WAIT=false) asks for its round and
        carries the offset its answer waits for."""
        if result.status is _OK and self.holds_answers and waits_for_store(properties):
            end = result.wrote_offset + result.wrote_bytes
            if self.policy.want_flushed(end):  # type: ignore[union-attr]
                result.durable_at = end
        return result


    async def put_messages(self, batch: Sequence[MessageRecord]) -> PutResult:
        """All records of one (topic, queue) built into one buffer and copied with one slice assignment."""
        if not self._writable:
            return self._refused()
        result = self.appender.put_batch(batch)
        if result.status is not _OK:
            return result
        end = result.wrote_offset + result.wrote_bytes
        if self._sync:
            if waits_for_store(batch[0].properties) and not await self.policy.wait_flushed(end):  # type: ignore[union-attr]
                result.status = PutStatus.FLUSH_DISK_TIMEOUT
        elif end - self.reput.offset > self._backlog:
            await anyio.lowlevel.checkpoint()
        return result

    def sends_pure(self) -> str:
        """Why the compiled send path (``append.CompiledAppender.serve_sends``) cannot serve: '' when it can."""
        if getattr(self.appender, "serve_sends", None) is None:
            return "pure store append"
        return "SYNC_FLUSH without held answers" if self._sync and not self.holds_answers else ""

    def serve_sends(self, *args: Any) -> tuple[int, bytes | None, list[Any], Any] | None:
        """``CompiledAppender.serve_sends(*args)`` while writes are open (None: not now, the pure path serves),
        and under SYNC_FLUSH what its answers wait for, as ``put_message_nowait``'s: (watermark, offset,
        timeout), or None when they may leave now."""
        if not self._writable or self.sends_pure():
            return None
        pos, answers, counts = self.appender.serve_sends(*args, self._sync)  # type: ignore[attr-defined]
        hold = None
        if self._sync and answers is not None:
            end = self.commitlog.tail[0]
            if self.policy.want_flushed(end):  # type: ignore[union-attr]
                hold = (self.durable, end, self.flush_timeout)
        return pos, answers, counts, hold

    def _refused(self) -> PutResult:
        self.appender.n_failed += 1
        return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=self._writable_remark or "store not writable")

    def _alloc_failed(self, e: OSError) -> PutResult:
        """The next commitlog segment cannot be created: refuse writes until the retry task makes it."""
        self._alloc_error = full_remark(e, "create the next commitlog segment")
        self._update_writable()
        self._retry.set()
        return self._refused()

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

    async def wait_dispatched(self, offset: int | None = None) -> None:
        """Return once dispatch has consumed the commitlog up to ``offset`` (default: its end now)."""
        await self.reput.wait_dispatched(offset)

    # ------------------------------------------------------------------ background services

    def _default_disk_probe(self) -> float:
        return retention.default_disk_probe(self)

    def check_disk(self) -> float:
        """Probe disk usage; at diskSpaceWarningLevelRatio the store refuses puts until it drops."""
        return retention.check_disk(self)

    async def clean_expired_files(self, force: bool = False) -> int:
        """One retention pass (§6): see ``retention``. Returns commitlog segments deleted."""
        return await retention.clean_expired_files(self, force)

    def stats(self) -> dict[str, Any]:
        cl = self.commitlog
        return {
            "store": "mmap",
            "root": str(self.root),
            "puts": self.appender.n_put,
            "compiled_sends": getattr(self.appender, "n_served", 0),  # of them, stored by the compiled send path
            "put_bytes": cl.max_offset - self._start_offset,
            "put_failures": self.appender.n_failed,
            "gets": self.n_get,
            "compiled_pulls": self.n_joined,  # of them, walked by the compiled pull_join
            "get_messages": self.n_found,
            "found_gets": self.n_hit,
            "min_phy_offset": cl.min_offset,
            "max_phy_offset": cl.max_offset,
            "flushed_offset": cl.flushed_where,
            # commitlog flush rounds (fdatasync calls), those run on the event loop, and their seconds
            "flush_rounds": int(getattr(self.policy, "rounds", 0)),
            "flush_inline_rounds": int(getattr(self.policy, "inline_rounds", 0)),
            "flush_seconds": round(float(getattr(self.policy, "flush_seconds", 0.0)), 6),
            "dispatched_offset": self.reput.offset,
            "dispatch_lag_bytes": cl.max_offset - self.reput.offset,
            **({} if self.reput.bound is None else {"confirm_offset": self.reput.end()}),
            "dispatched_from_handoff": self.reput.n_handoff,
            "dispatched_from_parse": self.reput.n_parsed,
            "commitlog_files": len(cl.files),
            "consume_queues": sum(1 for _ in self.cqs),
            "mapped_consume_queues": len(self.cqs.mapped),
            "index_files": len(self.index.files) if self.index is not None else 0,
            "deleted_files": dict(self._n_deleted),
            "disk_used_ratio": self._disk_ratio,
            "corrupt_ranges": len(cl.holes),
            "writable": self._writable,
            "remark": self._writable_remark,
            "recovery": dict(self.recovery),
        }
