"""Commitlog flush policies: ``async`` (periodic, FlushRealTimeService) and ``sync`` (group commit).

Entry points ``rmq.flush: async = rmq.plugins.flush:AsyncFlushPlugin`` and
``sync = rmq.plugins.flush:SyncFlushPlugin``. Both take their settings from
``[broker]`` (flushIntervalCommitLog, flushCommitLogLeastPages,
flushCommitLogThoroughInterval, flushCommitLogTimed, syncFlushTimeout) and have no
options of their own. The flush itself runs on a worker thread (``fdatasync``
releases the GIL), so the event loop keeps appending while the disk works; every
put waiting when a flush starts is covered by it (group commit).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.to_thread

from rmq.kernel import Flushable, NoOptions, OwnLoops, RateLimitedLog, hookimpl, structure_options

__all__ = ["AsyncFlushPlugin", "AsyncFlushPolicy", "SyncFlushPlugin", "SyncFlushPolicy"]

log = logging.getLogger("rmq.store")
_limited = RateLimitedLog(log, interval=30.0)


def _check_options(options: Mapping[str, Any] | None) -> None:
    try:
        structure_options(NoOptions, options)
    except ValueError as e:
        raise ValueError(f"{e} (flush settings live in [broker]: flushIntervalCommitLog, ...)") from None


class _PolicyBase(OwnLoops):
    """Shared machinery: a background loop in a task group; waiters await ``store.durable``.

    Each flush advances the store's ``durable`` watermark with the offset it reached, which
    wakes exactly the puts it covered (no round events to re-check, no watchdog task): a
    waiter that outlives syncFlushTimeout (a stalled disk) gives up on its own and the put
    reports FLUSH_DISK_TIMEOUT.
    """

    synchronous = False

    def __init__(self, store: Flushable, config: Any) -> None:
        self.store = store
        self.config = config
        self.timeout = max(int(config.syncFlushTimeout), 1) / 1000
        self._kick: Any = None  # anyio.Event: somebody waits or data arrived
        self.rounds = 0
        self.flush_seconds = 0.0

    async def __aenter__(self) -> Any:
        self._kick = anyio.Event()
        await self.start_loops(self._loop)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if await self.stop_loops():
            await self._final_flush()

    async def _final_flush(self) -> None:
        with anyio.CancelScope(shield=True):
            for _ in range(10):  # RocketMQ retries the final flush; so do we
                try:
                    flushed = await anyio.to_thread.run_sync(self.store.flush, 0)
                except OSError as e:
                    log.error("final commitlog flush failed: %s", e)
                    continue
                self.store.durable.advance(flushed)
                if flushed >= self.store.max_phy_offset:
                    break

    def wake(self) -> None:
        kick = self._kick
        if kick is not None and not kick.is_set():
            kick.set()

    async def _flush(self, least_pages: int) -> int:
        t0 = time.perf_counter()
        try:
            flushed = await anyio.to_thread.run_sync(self.store.flush, least_pages)
        except OSError as e:  # keep running: waiters time out and report FLUSH_DISK_TIMEOUT
            log.error("commitlog flush failed: %s", e)
            return self.store.flushed_offset
        finally:
            self.rounds += 1
            self.flush_seconds += time.perf_counter() - t0
        self.store.durable.advance(flushed)
        return flushed

    async def wait_flushed(self, end_offset: int) -> bool:
        """True once ``end_offset`` is durable; False after syncFlushTimeout (no flush covered it)."""
        if not self.want_flushed(end_offset):
            return True
        return await self.store.durable.wait_for(end_offset, self.timeout)

    def want_flushed(self, end_offset: int) -> bool:
        """Ask for a flush covering ``end_offset`` without waiting for it (the caller waits on
        ``store.durable``: a held answer, see ``MmapMessageStore.put_message_nowait``); False when
        it is durable already."""
        if self.store.durable.value >= end_offset:
            return False
        self._demand()
        return True

    def _demand(self) -> None:
        self.wake()

    async def _loop(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class SyncFlushPolicy(_PolicyBase):
    """Group commit (GroupCommitService): a put awaits the flush round that covers its bytes.

    While a round's ``fdatasync`` runs, newly appended puts queue up; the next round covers
    them all with one call. On asyncio a round is decided once per event-loop turn, after
    every request read in that turn has appended (a callback queued behind them):

    - few waiters (at most ``INLINE_MAX``, e.g. one producer sending synchronously), no
      round in flight and a disk that has been fast (the last ``INLINE_AFTER`` flushes each
      under ``FAST_FLUSH_S``): the ``fdatasync`` runs right there on the loop thread, as
      Redis's ``appendfsync always`` does. Handing it to a thread costs two thread wake-ups
      (measured ~90 µs to start the round and ~55 µs to hear back on a 2-core VM, against a
      ~100-160 µs fdatasync): most of a durable send's latency at low concurrency. One
      slow inline flush (a stalling disk) sends the rounds back to the thread, so a stall
      blocks the loop at most once and timeouts (FLUSH_DISK_TIMEOUT) work as before;
    - more waiters: the round goes to a dedicated thread signalled directly, whose result
      comes back with one ``call_soon_threadsafe`` advancing ``store.durable``, so the loop
      keeps reading and appending while the disk works (group commit overlaps the I/O).

    - a lone producer (each turn's puts come from one unit, ``SOLO_AFTER`` turns in a row) on
      that fast disk: the unit is flushed as soon as it is complete (:meth:`settle`), so its
      answers leave in the same turn, ahead of the reput and the turn's other callbacks; a
      second unit in a turn ends it. A unit is the requests of one socket read on a connection
      holding answers (it calls ``store.durable.settle`` once they are all appended: a
      producer pipelining 32 sends pays one ``fdatasync`` per read, however many requests the
      read carried, and gets the read's answers in one write) or one awaiting put.

    Either way ``store.durable`` wakes exactly the covered puts (a future, or an answer held by
    the connection: ``want_flushed`` asks for the round without waiting). Other backends run
    the same rounds from a task through ``anyio.to_thread``.
    """

    INLINE_MAX = 2
    INLINE_AFTER = 16
    FAST_FLUSH_S = 0.050
    SOLO_AFTER = 4

    synchronous = True

    def __init__(self, store: Flushable, config: Any) -> None:
        super().__init__(store, config)
        self._aloop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        self._wanted = 0  # highest offset a put waits for (guarded by _cond)
        self._served = 0  # highest offset a thread round took as its target (guarded by _cond)
        self._busy = False  # the thread is in a round (guarded by _cond)
        self._stop = False
        self._turn_wanted = 0  # waiters of this loop turn (loop thread only)
        self._turn_count = 0
        self._turn_scheduled = False
        self._turn_units = 0  # settled units this turn (socket reads, awaiting puts): see settle()
        self._solo = 0  # turns in a row whose puts came from a single unit
        self.inline_rounds = 0
        self._fast = 0  # consecutive flushes under FAST_FLUSH_S (either path)

    async def __aenter__(self) -> Any:
        try:
            self._aloop = asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend: rounds from a task
            return await super().__aenter__()
        self._stop = False
        self._thread = threading.Thread(target=self._rounds, name="rmq-group-commit", daemon=True)
        self._thread.start()
        self.store.durable.settle = self.settle
        return self

    async def __aexit__(self, *exc: object) -> None:
        th, self._thread = self._thread, None
        if th is None:
            return await super().__aexit__(*exc)
        if self.store.durable.settle == self.settle:
            self.store.durable.settle = None
        with self._cond:
            self._stop = True
            self._cond.notify()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(th.join)
        await self._final_flush()

    def want_flushed(self, end_offset: int) -> bool:
        if self.store.durable.value >= end_offset:
            return False
        if self._thread is None:
            self._demand()
            return True
        if not self._turn_scheduled:
            self._turn_scheduled = True
            loop = self._aloop
            assert loop is not None
            loop.call_soon(self._end_of_turn)  # behind the requests already read this turn
        if end_offset > self._turn_wanted:
            self._turn_wanted = end_offset
        self._turn_count += 1
        return True

    async def wait_flushed(self, end_offset: int) -> bool:
        """An awaiting put is a unit of its own (see :meth:`settle`): a lone one may flush on the spot."""
        if not self.want_flushed(end_offset):
            return True
        self.settle()
        if self.store.durable.value >= end_offset:
            return True
        return await self.store.durable.wait_for(end_offset, self.timeout)

    def settle(self) -> None:
        """A unit of this turn's puts is complete: every request of one socket read has appended
        (called through ``store.durable.settle`` by the connection), or one awaiting put. When the
        puts of the last ``SOLO_AFTER`` turns each came from one unit and this is the turn's first,
        its round runs now, inline: one ``fdatasync`` for the whole unit, whose held answers are
        queued by the advance before this returns. Otherwise the end of the turn decides."""
        if self._thread is None:
            return
        self._turn_units += 1
        if (self._turn_units == 1 and self._solo >= self.SOLO_AFTER
                and self._turn_wanted > self.store.durable.value and self._may_inline()):
            self._flush_inline()

    def _may_inline(self) -> bool:
        """The disk has been fast and the thread is idle with nothing asked of it (only this loop
        raises ``_wanted``, so no thread round can start until it does)."""
        with self._cond:  # uncontended but for the instant a round takes its target
            return self._fast >= self.INLINE_AFTER and not self._busy and self._wanted <= self._served

    def _end_of_turn(self) -> None:
        """Start the round for this turn's waiters: inline when they are few and no round runs."""
        self._turn_scheduled = False
        wanted, count, units = self._turn_wanted, self._turn_count, self._turn_units
        self._turn_count = self._turn_units = 0
        # one unit per turn, turn after turn: a lone producer, whose units may flush as they complete
        self._solo = self._solo + 1 if units == 1 else 0
        if wanted <= self.store.durable.value:
            return
        if count > self.INLINE_MAX or not self._may_inline():
            with self._cond:
                if wanted > self._wanted:
                    self._wanted = wanted
                    self._cond.notify()
            return
        self._flush_inline()

    def _flush_inline(self) -> None:
        """One round on the loop thread (see the class docstring)."""
        flushed, took = self._timed_flush()
        if flushed is None:
            return
        if took >= self.FAST_FLUSH_S:
            _limited.warning("slow-inline", "commitlog flush took %.0f ms on the event loop: group commit goes "
                             "back to its thread until %d flushes in a row are fast", took * 1000, self.INLINE_AFTER)
        self.inline_rounds += 1
        self._round_done(flushed)

    def _timed_flush(self) -> tuple[int | None, float]:
        """One ``store.flush(0)`` and how long it took (counted in ``flush_seconds`` and in the run of fast
        flushes that lets rounds go inline); None for a failed flush: logged, its waiters time out
        (FLUSH_DISK_TIMEOUT) and the next put asks again. Called on the loop or the flush thread."""
        t0 = time.perf_counter()
        try:
            flushed = self.store.flush(0)
        except OSError as e:
            log.error("commitlog flush failed: %s", e)
            self._fast = 0
            return None, 0.0
        finally:
            self.flush_seconds += time.perf_counter() - t0
        took = time.perf_counter() - t0
        self._fast = self._fast + 1 if took < self.FAST_FLUSH_S else 0  # read by the loop: an int, no lock
        return flushed, took

    def _rounds(self) -> None:
        """The flush thread: one ``store.flush(0)`` per round while puts wait beyond what is durable."""
        loop = self._aloop
        assert loop is not None
        while True:
            with self._cond:
                self._busy = False
                while self._wanted <= self._served and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                self._served = self._wanted  # every put waiting now is appended: this round covers it
                self._busy = True
            flushed, _ = self._timed_flush()
            if flushed is None:
                continue
            try:
                loop.call_soon_threadsafe(self._round_done, flushed)
            except RuntimeError:  # the loop closed under us: nobody is waiting any more
                return

    def _round_done(self, flushed: int) -> None:
        self.rounds += 1
        self.store.durable.advance(flushed)

    async def _loop(self) -> None:
        while True:
            await self._kick.wait()
            self._kick = anyio.Event()
            await self._flush(0)


class AsyncFlushPolicy(_PolicyBase):
    """FlushRealTimeService: every flushIntervalCommitLog ms flush if >= flushCommitLogLeastPages pages
    are dirty; every flushCommitLogThoroughInterval ms flush whatever is written."""

    synchronous = False

    def __init__(self, store: Flushable, config: Any) -> None:
        super().__init__(store, config)
        self.interval = max(int(config.flushIntervalCommitLog), 1) / 1000
        self.least_pages = int(config.flushCommitLogLeastPages)
        self.thorough = max(int(config.flushCommitLogThoroughInterval), 0) / 1000
        self.timed = bool(config.flushCommitLogTimed)
        self._demanded = False

    def wake(self) -> None:
        if not self.timed:  # flushCommitLogTimed=false: each put may wake the flusher early
            super().wake()

    def _demand(self) -> None:
        self._demanded = True
        super().wake()

    async def _loop(self) -> None:
        last_thorough = time.monotonic()
        while True:
            with anyio.move_on_after(self.interval):
                await self._kick.wait()
            self._kick = anyio.Event()
            now = time.monotonic()
            least = self.least_pages
            if self._demanded or now - last_thorough >= self.thorough:
                least = 0
                last_thorough = now
                self._demanded = False
            await self._flush(least)


class _FlushPlugin:
    """A flush plugin: no options, and the policy it makes for a store."""

    policy: type[AsyncFlushPolicy | SyncFlushPolicy]

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        _check_options(options)

    @hookimpl(trylast=True)
    def rmq_flush_make_policy(self, kernel: Any, store: Flushable, config: Any) -> AsyncFlushPolicy | SyncFlushPolicy:
        return self.policy(store, config)


class AsyncFlushPlugin(_FlushPlugin):
    """``flushDiskType = ASYNC_FLUSH``."""

    policy = AsyncFlushPolicy


class SyncFlushPlugin(_FlushPlugin):
    """``flushDiskType = SYNC_FLUSH``."""

    policy = SyncFlushPolicy
