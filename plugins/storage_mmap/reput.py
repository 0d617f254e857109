"""The reput service: turns new commitlog bytes into ``DispatchRequest`` batches for every dispatcher.

One loop task. It sleeps while dispatch has caught up (a put wakes it only then: one
flag test per put), and otherwise hands at most ``dispatch_batch`` records per loop turn
to the store's own dispatchers (consume queues, index) and then the attached ones.

Records appended by this process arrive as :class:`Handoff` tuples (the values the put
just packed), so the loop does not re-parse bytes it has just written; anything else
(recovery replay, a hand-off out of step) is parsed from the mapping. A test checks
that both paths produce identical requests. When the compiled store serves and no attached
dispatcher needs request lists, the hand-offs go straight into the consume queues and the
index instead (reput_direct: no request objects; attached dispatchers with a true
``lazy_requests`` attribute get batches built on first use).

Controller mode (RocketMQ 5's ``getReputEndOffset``): ``bound`` is the confirm offset, and
records at or beyond it are not dispatched, so no consumer (pull, POP, gRPC, lite pull, a
slave's reads) sees what a SyncStateSet member may still lack. ``None`` (every classic
broker; a controller-mode master whose SyncStateSet is itself, or without
allAckInSyncStateSet) dispatches to the log's end: the classic loop pays one ``is None``
test per turn, nothing per record. While held back, each put still wakes the loop once
so the attached dispatchers get an empty batch: the replication notifier ships the new
bytes (a slave's ack is what moves the bound).

Failures: the store's own dispatchers are retried until they take a batch (a full disk
for their files refuses writes meanwhile, see the store's docstring); a third-party
dispatcher that raises skips that batch only.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import operator
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio
import anyio.lowlevel

from rmq.kernel import DispatchRequest, RateLimitedLog
from rmq.plugins.storage_mmap.codec import SCHEDULE_TOPIC, message_tags_code, parse_for_dispatch
from rmq.plugins.storage_mmap.mapped_file import full_remark
from rmq.plugins.storage_mmap.reput_direct import DirectReput
from rmq.plugins.storage_mmap.scan import resync
from rmq.protocol import storepath
from rmq.protocol.common import MAGIC_BLANK, Prop, decode_properties, tags_code
from rmq.protocol.record import HEAD2

if TYPE_CHECKING:
    from rmq.kernel import CommitLogDispatcher
    from rmq.plugins.storage_mmap.store import MmapMessageStore

log = logging.getLogger("rmq.store")
_limited = RateLimitedLog(log, interval=30.0)
_first = operator.itemgetter(0)


def _record_end(h: tuple[Any, ...]) -> int:
    return h[0] + h[1]

_REPLAY_LOG_BYTES = 64 * 1024 * 1024  # replays at least this long log their progress
_HELD_HANDOFF_MAX = 65536  # hand-offs kept while dispatch is held back; beyond, the records are parsed later


async def _asyncio_yield() -> None:
    await asyncio.sleep(0)


class Handoff(NamedTuple):
    """What the put path just packed for one record, for the reput loop to build its request from.

    The field layout only: the put path appends plain tuples in this order. A plain tuple of
    ints and strs is untracked by the cyclic GC after its first young collection, a NamedTuple
    never is: with up to ``backlog_bytes`` of small records waiting (100k+ under batch load),
    every full collection walked them all (measured 12 -> 54 ms growing, loop stalls of ~90 ms
    that tripped send flow control)."""

    phys: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    sys_flag: int
    store_timestamp: int
    prepared_offset: int
    properties: str


class ReputService:
    """``offset``: commitlog bytes below it have been dispatched. ``handoff``: appended, not yet
    dispatched (the append path adds to this very list; it is never replaced)."""

    def __init__(self, store: MmapMessageStore) -> None:
        self.store = store
        self.offset = 0
        self.handoff: list[tuple[Any, ...]] = []  # Handoff layout, plain tuples
        self.idle = False  # the loop sleeps: the next put must wake it
        self.dispatchers: list[CommitLogDispatcher] = []
        self.builtin: list[CommitLogDispatcher] = []
        self.bound: int | None = None  # controller mode: the confirm offset (see the module docstring)
        self._poked = 0  # log end the attached dispatchers last heard of while dispatch was held back
        self._wake: Any = None  # an Event, created by start (it needs a running loop)
        self._new_event: Any = anyio.Event
        self._yield: Any = anyio.lowlevel.checkpoint
        self._progress: Any = None
        self._batch = store.options.dispatch_batch
        self._levels = store.config.delay_levels_ms()
        self.fast: Any = storepath.FAST  # the compiled request builder, None on the pure path
        self.direct = DirectReput(self)  # hand-offs straight into queues and index, when it may serve
        self.n_handoff = self.n_parsed = 0

    def start(self) -> None:
        # On asyncio the loop's own Event and sleep(0) (what anyio's wrap): a turn then costs no
        # backend lookup (anyio sniffs the library on every Event() and checkpoint()).
        try:
            asyncio.current_task()  # RuntimeError unless an asyncio loop runs
        except RuntimeError:
            self._new_event, self._yield = anyio.Event, anyio.lowlevel.checkpoint
        else:
            self._new_event, self._yield = asyncio.Event, _asyncio_yield
        self._wake = self._new_event()
        self._progress = None

    def wake(self) -> None:
        self.idle = False
        self._wake.set()

    def put_done(self) -> None:
        """The put path appended hand-offs: while the loop sleeps, dispatch them here on the direct path
        (the common case: one compiled call) rather than wake the loop for it, whose two task steps per
        socket read cost more than the dispatch (measured: bench/broker.py, ASYNC_FLUSH); wake it for
        anything the direct path leaves (a roll, a new queue, a confirm offset, a dispatch error)."""
        if not self.idle:
            return
        offset = self.offset
        items = self.handoff
        if self.bound is None and items and items[0][0] == offset and not self.store._dispatch_error \
                and self.direct.usable():
            take = items[: self._batch]
            try:
                done = self.direct.run(take, offset)
            except Exception:  # noqa: BLE001 - never the put's failure: the loop retries and says what fails
                done = 0
            if done:
                del items[:done]
                self.n_handoff += done
                self.offset = take[done - 1][0] + take[done - 1][1]
                self.signal_progress()
                if not items:
                    return
        self.wake()

    def end(self) -> int:
        """Where dispatch may go: the log's end, or the confirm offset below it."""
        end = self.store.commitlog.max_offset
        bound = self.bound
        return end if bound is None or bound > end else bound

    def set_bound(self, bound: int | None) -> None:
        """A new confirm offset (None: none); a raised one wakes the loop."""
        old, self.bound = self.bound, bound
        if self._wake is not None and (bound is None or old is None or bound > old):
            self.wake()

    def signal_progress(self) -> None:
        """Wake whoever waits for dispatch; free when nobody does (the usual case: once per reput turn)."""
        progress = self._progress
        if progress is not None:
            self._progress = None
            progress.set()

    def _progress_event(self) -> Any:
        if self._progress is None:
            self._progress = anyio.Event()
        return self._progress

    async def wait_progress(self) -> None:
        await self._progress_event().wait()

    async def wait_dispatched(self, offset: int | None = None) -> None:
        """Return once dispatch has consumed the commitlog up to ``offset`` (default: its end now)."""
        cl = self.store.commitlog
        target = cl.max_offset if offset is None else offset
        while self.offset < target and self.offset < self.end():
            await self._progress_event().wait()

    async def wait_caught_up_or_stalled(self) -> None:
        store = self.store
        while self.offset < self.end() and not store._dispatch_error:
            await self._progress_event().wait()

    async def replay_at_start(self) -> None:
        """Replay dispatch before serving (queues complete at start), with progress lines for long
        replays; a replay stalled by a full disk does not hold the start: the store opens read-only."""
        start = self.offset
        total = max(self.end() - start, 0)
        t0 = next_log = time.monotonic()
        while self.offset < self.end() and not self.store._dispatch_error:
            with anyio.move_on_after(1):
                await self._progress_event().wait()
            if total >= _REPLAY_LOG_BYTES and time.monotonic() >= next_log + 2:
                next_log = time.monotonic()
                done = self.offset - start
                log.info(
                    "replaying dispatch: %d%% (%d of %d MiB)", 100 * done // total, done >> 20, total >> 20
                )
        if total >= _REPLAY_LOG_BYTES:
            log.info("replayed %d MiB of dispatch in %.1fs", total >> 20, time.monotonic() - t0)

    # ------------------------------------------------------------------ loop

    async def run(self) -> None:
        store = self.store
        cl = store.commitlog
        while True:
            end = cl.max_offset
            bound = self.bound
            if bound is not None and bound < end:
                if self.offset >= bound:
                    self._held(end)
                    wake = self._wake = self._new_event()
                    self.idle = True
                    self.signal_progress()
                    await wake.wait()
                    continue
            elif self.offset >= end:
                wake = self._wake = self._new_event()
                self.idle = True  # a put sets the event only when the loop sleeps
                await wake.wait()
                continue
            try:
                await self._once()
            except Exception as e:  # a bug must not end dispatch for good: say so, refuse writes, retry
                _limited.error("reput", "reput failed at offset %d: %r; retrying", self.offset, e)
                log.debug("reput failure", exc_info=True)
                if not store._dispatch_error:
                    store._dispatch_error = f"dispatch failing at offset {self.offset}: {e!r}"
                    store._update_writable()
                self.signal_progress()
                await anyio.sleep(1)
                continue
            if store._dispatch_error.startswith("dispatch failing"):
                store._dispatch_error = ""
                store._update_writable()
            self.signal_progress()
            await self._yield()

    def _held(self, end: int) -> None:
        """Dispatch is held back at the confirm offset: tell the attached dispatchers (an empty batch)
        that bytes were appended, and keep the hand-off list from growing without end."""
        if end != self._poked:  # (a truncated log may end below the last value)
            self._poked = end
            for d in self.dispatchers[len(self.builtin):]:
                try:
                    d.dispatch(())
                except Exception:
                    log.exception("dispatcher %r failed on an empty batch", d)
        if len(self.handoff) > _HELD_HANDOFF_MAX:
            self.handoff.clear()

    async def _once(self) -> None:
        cl = self.store.commitlog
        offset = self.offset
        if offset < cl.min_offset:
            offset = cl.min_offset
        take = self._handoff_take(offset, self.end()) if self.handoff else None
        if take:
            if take[0][0] == offset and self.direct.usable():
                done = self.direct.run(take, offset)
                if done:
                    del self.handoff[:done]
                    self.n_handoff += done
                    self.offset = take[done - 1][0] + take[done - 1][1]
                    return
                take = take[:1]  # (a reserve chunk, a roll, a new queue...): that record alone, then direct again
            del self.handoff[: len(take)]
            reqs, end = self._handoff_requests(take, offset)
            if reqs:
                self.n_handoff += len(reqs)
                await self._dispatch(reqs)
                self.offset = end
                return
        f = cl.file_for(offset)
        if f is None:  # beyond the end (cannot happen) or nothing left
            self.offset = cl.max_offset
            return
        limit = f.wrote
        bound = self.bound
        held = bound is not None and bound - f.start < limit
        if held:
            limit = bound - f.start  # type: ignore[operator]
        holes = cl.holes
        if holes:  # corrupt ranges found by recovery: parse up to the next one, then jump over it
            skip_to = holes.find(offset)
            if skip_to >= 0:
                self.offset = skip_to
                return
            nxt = holes.next_start(offset) - f.start
            if 0 <= nxt < limit:
                limit = nxt
        reqs: list[Any] = []
        pos, state = parse_for_dispatch(f.mm, offset - f.start, limit, f.start, reqs, self._batch, self._levels)
        if reqs:
            self.n_parsed += len(reqs)
            await self._dispatch(reqs)
        if state == 1:
            self.offset = f.end
        elif state == -1 and held and pos < f.wrote:
            self.offset = f.start + pos  # a record the confirm offset cuts (none should): wait for the rest
        elif state == -1:
            self.offset = self._resync(f, pos)
        else:
            self.offset = f.start + pos

    def _handoff_take(self, offset: int, limit: int) -> list[Any]:
        """The hand-offs this turn may dispatch: starting at ``offset`` (or the next segment after its
        end-of-file blank) and ending by ``limit``; empty when they do not start there. Left in the list."""
        items = self.handoff
        if items[0][0] < offset:  # already dispatched by the parser
            del items[: bisect.bisect_left(items, offset, key=_first)]
            if not items:
                return []
        if items[0][0] != offset and not self._rolled(offset, items[0][0], self.store.commitlog.file_size):
            return []
        take = items[: self._batch]
        if take[-1][0] + take[-1][1] > limit:  # held back by the confirm offset: only what ends by it
            take = take[: bisect.bisect_right(take, limit, key=_record_end)]
        return take

    def _handoff_requests(self, take: list[Any], offset: int) -> tuple[list[Any], int]:
        """Requests for the hand-offs ``take`` (taken off the list) starting at ``offset``, and where
        they end; a hand-off out of step ends them and drops the rest of the list (parsed instead)."""
        items = self.handoff
        fsize = self.store.commitlog.file_size
        reqs: list[Any] = []
        add = reqs.append
        decode, tags, req, levels = decode_properties, tags_code, DispatchRequest, self._levels
        expected = offset
        if self.fast is not None:  # the compiled loop takes the common run, this one goes on from there
            done = self.fast.requests(take, offset, reqs)
            if done:
                expected = take[done - 1][0] + take[done - 1][1]
                take = take[done:]
        for phys, size, topic, qid, qoff, sys_flag, ts, prepared, props in take:
            if phys != expected and not self._rolled(expected, phys, fsize):
                log.warning("reput: hand-off out of step at %d (expected %d); parsing instead", phys, expected)
                items.clear()
                break
            if props:
                d = decode(props)
                if topic == SCHEDULE_TOPIC and Prop.DELAY in d:
                    tc = message_tags_code(topic, d, ts, levels)
                else:
                    tc = tags(d.get("TAGS"))
                add(req(topic, qid, phys, size, tc, ts, qoff, sys_flag, prepared, d.get("KEYS"), d.get("UNIQ_KEY"), d))
            else:
                add(req(topic, qid, phys, size, 0, ts, qoff, sys_flag, prepared, None, None, {}))
            expected = phys + size
        return reqs, expected

    def _rolled(self, offset: int, nxt: int, fsize: int) -> bool:
        """True when ``offset`` holds the end-of-file blank and ``nxt`` starts the next segment."""
        if nxt % fsize or nxt != (offset // fsize + 1) * fsize:
            return False
        f = self.store.commitlog.file_for(offset)
        if f is None:
            return False
        pos = offset - f.start
        return pos + 8 <= f.size and HEAD2.unpack_from(f.mm, pos)[1] == MAGIC_BLANK

    def _resync(self, f: Any, pos: int) -> int:
        """An invalid record the recovery did not report (a bug, or damage since): skip to the next
        valid record, remember the range as a hole, and say so."""
        at = f.start + pos
        cand = resync(f.mm, pos, f.wrote, f.start, True, self.store._stale_span)
        nxt = f.start + cand if cand >= 0 else (f.start + f.wrote if f.wrote < f.size else f.end)
        self.store.commitlog.holes.add(at, nxt)
        log.error("reput: invalid record at offset %d in %s; skipped %d bytes to %d", at, f.path, nxt - at, nxt)
        return nxt

    async def _dispatch(self, reqs: list[Any]) -> None:
        """Every dispatcher gets the batch. The store's own (queues, index) are retried until they
        take it, writes refused meanwhile: a disk that cannot hold their files at once, anything
        else after 30 tries. Retrying is safe, their duplicate guards skip what already landed."""
        store = self.store
        builtin = self.builtin
        for d in self.dispatchers:
            attempt = 0
            while True:
                try:
                    d.dispatch(reqs)
                    break
                except Exception as e:
                    if d not in builtin:
                        log.exception("dispatcher %r failed on %d records; they are skipped for it", d, len(reqs))
                        break
                    attempt += 1
                    if isinstance(e, OSError):
                        if not store._dispatch_error:
                            store._dispatch_error = full_remark(e, "extend a consume queue or index file")
                            store._update_writable()
                            self.signal_progress()
                        await anyio.sleep(store.options.disk_retry_ms / 1000)
                        continue
                    if attempt == 30:
                        store._dispatch_error = f"consume queue/index build failing: {e}"
                        store._update_writable()
                        self.signal_progress()
                    elif attempt < 30:
                        log.warning("dispatch into %r failed (%s); retrying", d, e)
                    await anyio.sleep(1)
        if store._dispatch_error:
            store._dispatch_error = ""
            store._update_writable()
        if len(store.cqs.mapped) > store.cqs.max_mapped:  # between batches no queue file is in use
            store.cqs.trim()
