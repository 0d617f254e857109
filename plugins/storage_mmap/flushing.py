"""Flushing inside the mmap store: the default commitlog policy and the "logics" (queues, index, checkpoint).

:class:`DefaultFlushPolicy` is the commitlog policy a store runs when its owner attached
none (tests, benches, embedding). :class:`LogicsFlusher` forces consume queues every
flushIntervalConsumeQueue ms, each index file when it fills, and the checkpoint with the
times captured before the flush, so recovery never trusts a time newer than the data.


A broker attaches the policy its ``rmq.flush`` plugin built; this one exists so a store
used on its own still flushes, and it stays deliberately small rather than importing the
flush plugin (a plugin never imports another). ``flushDiskType = SYNC_FLUSH`` makes it
synchronous: a put's ``wait_flushed`` asks for a flush and awaits ``store.durable``, and
every put waiting when a flush starts is covered by it (group commit). Otherwise it
flushes every ``flushIntervalCommitLog`` ms.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from rmq.kernel import OwnLoops, RateLimitedLog

if TYPE_CHECKING:
    from rmq.kernel import Flushable
    from rmq.plugins.storage_mmap.index import IndexFile
    from rmq.plugins.storage_mmap.store import MmapMessageStore

log = logging.getLogger("rmq.store")
_limited = RateLimitedLog(log, interval=30.0)


class DefaultFlushPolicy(OwnLoops):
    """See the module docstring; ``FlushPolicy`` by structure."""

    def __init__(self, store: Flushable, config: Any) -> None:
        self.store = store
        self.synchronous = str(config.flushDiskType).upper() == "SYNC_FLUSH"
        self.interval = max(int(config.flushIntervalCommitLog), 1) / 1000
        self.timeout = max(int(config.syncFlushTimeout), 1) / 1000
        self.rounds = 0
        self._kick: Any = None

    async def __aenter__(self) -> DefaultFlushPolicy:
        self._kick = anyio.Event()
        await self.start_loops(self._loop)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if await self.stop_loops():
            with anyio.CancelScope(shield=True):
                await self._flush()

    def wake(self) -> None:
        if self.synchronous and self._kick is not None:
            self._kick.set()

    async def wait_flushed(self, end_offset: int) -> bool:
        if not self.want_flushed(end_offset):
            return True
        return await self.store.durable.wait_for(end_offset, self.timeout)

    def want_flushed(self, end_offset: int) -> bool:
        """Ask for a round covering ``end_offset``; False when it is durable already."""
        if self.store.durable.value >= end_offset:
            return False
        if self._kick is not None:
            self._kick.set()
        return True

    async def _flush(self) -> None:
        try:
            flushed = await anyio.to_thread.run_sync(self.store.flush, 0)
        except OSError as e:  # waiters time out (FLUSH_DISK_TIMEOUT); the next round tries again
            log.error("commitlog flush failed: %s", e)
            return
        self.rounds += 1
        self.store.durable.advance(flushed)

    async def _loop(self) -> None:
        while True:
            with anyio.move_on_after(self.interval):
                await self._kick.wait()
            self._kick = anyio.Event()
            if self.store.flushed_offset < self.store.max_phy_offset:
                await self._flush()


class LogicsFlusher:
    """Flushes what the commitlog's policy does not: consume queues, index files, the checkpoint."""

    def __init__(self, store: MmapMessageStore) -> None:
        self.store = store
        self._index_threads: list[threading.Thread] = []
        self._last_thorough = time.monotonic()

    async def run(self) -> None:
        """Flush consume queues, then persist the checkpoint with the times captured before the flush."""
        interval = max(self.store.config.flushIntervalConsumeQueue, 1) / 1000
        while True:
            await anyio.sleep(interval)
            try:
                await self._flush()
            except OSError as e:  # the next round tries again; what is not flushed is replayed
                _limited.error("logics-flush", "consume queue / checkpoint flush failed: %s", e)
            self.store.cqs.trim()  # queues the flush just cleaned may be unmapped now

    async def _flush(self) -> None:
        logics_ts = self.store.cqs.logics_ts
        physic_ts = self.store.commitlog.last_flushed_ts
        await anyio.to_thread.run_sync(self._flush_sync, logics_ts, physic_ts)

    def _flush_sync(self, logics_ts: int, physic_ts: int) -> None:
        """flushConsumeQueueLeastPages dirty pages per file, or everything once every
        flushConsumeQueueThoroughInterval (RocketMQ's FlushConsumeQueueService)."""
        cfg = self.store.config
        least = cfg.flushConsumeQueueLeastPages
        now = time.monotonic()
        if now - self._last_thorough >= cfg.flushConsumeQueueThoroughInterval / 1000:
            self._last_thorough = now
            least = 0
        for cq in self.store.cqs:
            cq.flush_files(least)
        cp = self.store.checkpoint
        if cp is not None:
            if self.store.reput.bound is None:  # everything is confirmed (RocketMQ 5's getConfirmOffset)
                cp.confirm_phy = self.store.commitlog.max_offset
            if least == 0:  # only a thorough round vouches for every consume queue up to logics_ts
                cp.logics_ts = max(cp.logics_ts, logics_ts)
            cp.physic_ts = max(cp.physic_ts, physic_ts)
            cp.flush()

    def index_full(self, f: IndexFile) -> None:
        """An index file filled: force it and record its end time in the checkpoint, off the loop."""

        def work() -> None:
            try:
                f.write_header()
                f.mf.sync()
                cp = self.store.checkpoint
                if cp is not None:
                    cp.index_ts = max(cp.index_ts, f.end_ts)
                    cp.flush()
            except (OSError, ValueError) as e:  # closed meanwhile, or the disk refused
                _limited.error("index-flush", "index file %s: flush failed: %s", f.name, e)

        self._index_threads = [t for t in self._index_threads if t.is_alive()]
        th = threading.Thread(target=work, name="rmq-index-flush", daemon=True)
        self._index_threads.append(th)
        th.start()

    def final_flush(self) -> None:
        """Everything, then the checkpoint (blocking: the store's last act on shutdown)."""
        store = self.store
        cp = store.checkpoint
        assert cp is not None
        store.commitlog.flush(0)
        for cq in store.cqs:
            cq.flush_files(0)
        for th in self._index_threads:
            th.join()
        if store.index is not None:
            for f in store.index.files:
                f.write_header()
                f.mf.sync()
        cp.physic_ts = max(cp.physic_ts, store.commitlog.last_flushed_ts)
        cp.logics_ts = max(cp.logics_ts, store.cqs.logics_ts)
        if store.reput.bound is None:
            cp.confirm_phy = store.commitlog.max_offset
        cp.flush()
