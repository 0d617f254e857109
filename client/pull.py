"""Pull-style consumers.

``PullConsumer`` is the low-level one: you name the queue and the offset, it pulls
once (what a connector or a custom scheduler needs). ``LitePullConsumer`` pulls in
the background — queues from a group rebalance (``subscribe``) or chosen by you
(``assign``) — and hands batches to ``poll()``; offsets are committed
automatically every ``persist_interval`` seconds or by ``commit()``.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from typing import Any

import anyio

from rmq.client.base import ClientBase
from rmq.client.consumer import ConsumerBase, pull_once
from rmq.client.errors import BrokerError, ClientError, ClientStateError
from rmq.client.message import PullResult, PullStatus
from rmq.client.options import ClientOptions, build
from rmq.client.process_queue import ProcessQueue
from rmq.client.subscription import Subscription
from rmq.kernel.model import MessageQueue
from rmq.protocol.codes import ResponseCode
from rmq.protocol.command import RemotingError
from rmq.protocol.message import MessageExt

log = logging.getLogger("rmq.client.pull")
MIB = 1024 * 1024


class PullConsumer(ClientBase):
    """Explicit pulls: list queues, read offsets, pull a batch at an offset.

    Public building blocks (also what the Spark connector uses):

    * ``await fetch_queues(topic) -> list[MessageQueue]`` — readable queues of the topic.
    * ``await min_offset(mq)`` / ``await max_offset(mq)`` — first offset still stored and
      the next offset to be written (so ``max - min`` messages are readable).
    * ``await search_offset(mq, timestamp_ms)`` — offset of the message stored nearest
      that time; ``await earliest_msg_store_time(mq)``.
    * ``await pull(mq, offset, max_nums=32, expression="*", expression_type="TAG",
      block=False) -> PullResult(status, next_begin_offset, min_offset, max_offset,
      messages)`` — server-side filtered (TAG or SQL92); continue at
      ``next_begin_offset`` whatever the status; ``block=True`` long-polls up to
      ``suspend_timeout`` seconds for new messages.
    * ``await fetch_consume_offset(mq)`` / ``await update_consume_offset(mq, offset)`` —
      the group's committed offset on the broker.
    """

    def __init__(
        self,
        group: str = "DEFAULT_CONSUMER",
        namesrv_addr: str | list[str] | None = None,
        *,
        kernel: Any = None,
        pull_timeout: float = 10.0,
        suspend_timeout: float = 20.0,
        **options: Any,
    ) -> None:
        self._options = build(ClientOptions, options, "PullConsumer")
        super().__init__(namesrv_addr, self._options, kernel)
        self.group = group
        self.pull_timeout = pull_timeout
        self.suspend_timeout = suspend_timeout
        self._subs: dict[tuple[str, str, str], Subscription] = {}

    async def fetch_queues(self, topic: str) -> list[MessageQueue]:
        self._check_running()
        route = await self.instance.route(topic, refresh=True)
        self.instance.topics.add(topic)
        return route.subscribe_queues(topic)

    fetch_subscribe_queues = fetch_queues

    async def min_offset(self, mq: MessageQueue) -> int:
        self._check_running()
        return await self.instance.min_offset(mq)

    async def max_offset(self, mq: MessageQueue) -> int:
        self._check_running()
        return await self.instance.max_offset(mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        self._check_running()
        return await self.instance.search_offset(mq, int(timestamp_ms))

    async def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        self._check_running()
        return await self.instance.earliest_msg_store_time(mq)

    async def fetch_consume_offset(self, mq: MessageQueue) -> int | None:
        """The group's committed offset of ``mq`` (None when it has none)."""
        self._check_running()
        return await self.instance.query_consumer_offset(self.group, mq)

    async def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        self._check_running()
        await self.instance.update_consumer_offset(self.group, mq, offset, oneway=False)

    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        *,
        expression: str = "*",
        expression_type: str = "TAG",
        block: bool = False,
        timeout: float | None = None,
    ) -> PullResult:
        """Pull up to ``max_nums`` messages of ``mq`` from ``offset`` (see the class doc)."""
        self._check_running()
        key = (mq.topic, expression, expression_type)
        sub = self._subs.get(key)
        if sub is None:
            sub = self._subs[key] = Subscription.parse(mq.topic, expression, expression_type)
        suspend_ms = int(self.suspend_timeout * 1000) if block else 0
        t = timeout if timeout is not None else (self.suspend_timeout + self.pull_timeout if block else self.pull_timeout)
        return await pull_once(self.instance, self.group, mq, offset, max_nums, sub, suspend_ms=suspend_ms, timeout=t)


class LitePullConsumer(ConsumerBase):
    """Background pulling, foreground ``poll()``.

    ``subscribe(topic, expression)`` joins the group's rebalance (like PushConsumer);
    ``assign([mq, ...])`` consumes exactly those queues. ``poll(timeout)`` returns the
    next pulled batch (possibly empty). Offsets: with ``auto_commit=True`` (default)
    what ``poll`` returned is committed every ``persist_interval`` seconds and at
    shutdown; otherwise call ``commit()``.
    """

    consume_type = "CONSUME_ACTIVELY"

    def __init__(
        self, group: str, namesrv_addr: str | list[str] | None = None, *, auto_commit: bool = True, **kwargs: Any
    ) -> None:
        """``kwargs``: ``ConsumerBase``'s (message model, where to start, allocation, options)."""
        super().__init__(group, namesrv_addr, **kwargs)
        self.auto_commit = auto_commit
        self._assigned: list[MessageQueue] | None = None
        self._buffer: deque[tuple[MessageQueue, ProcessQueue, int, list[MessageExt]]] = deque()
        self._buffer_ready = anyio.Event()
        self._scopes: dict[MessageQueue, anyio.CancelScope] = {}
        self._next_offset: dict[MessageQueue, int] = {}
        self._consumed: dict[MessageQueue, int] = {}

    # ------------------------------------------------------------------ set-up
    def subscribe(self, topic: str, expression: str = "*", expression_type: str = "TAG") -> None:
        if self._assigned is not None:
            raise ClientStateError("subscribe() and assign() are exclusive")
        super().subscribe(topic, expression, expression_type)

    def assign(self, mqs: Iterable[MessageQueue], expression: str = "*", expression_type: str = "TAG") -> None:
        """Consume exactly these queues (no rebalance); before or after start."""
        if self.subscriptions and self._assigned is None:
            raise ClientStateError("subscribe() and assign() are exclusive")
        mqs = sorted(set(mqs))
        for topic in {m.topic for m in mqs}:
            self.subscriptions[topic] = Subscription.parse(topic, expression, expression_type)
        self._assigned = mqs
        if self._state == "running":
            assert self._tg is not None
            self._tg.start_soon(self._apply_assignment)

    async def _apply_assignment(self) -> None:
        assert self._assigned is not None
        wanted = set(self._assigned)
        for mq, pq in list(self.process_queues.items()):
            if mq not in wanted:
                await self._queue_removed(mq, pq)
                self.process_queues.pop(mq, None)
        for mq in self._assigned:
            if mq not in self.process_queues:
                self.instance.topics.add(mq.topic)
                await self._queue_added(mq)

    async def _on_start(self) -> None:
        await self._start_consumer(rebalance=self._assigned is None)
        if self._assigned is not None:
            await self._apply_assignment()

    async def _on_shutdown(self) -> None:
        for pq in self.process_queues.values():
            pq.dropped = True
        for scope in self._scopes.values():
            scope.cancel()
        if self.auto_commit:
            self._commit_consumed()
        await self.persist_offsets(sync=True)
        await self.instance.unregister(consumer_group=self.group)

    async def persist_offsets(self, sync: bool = False) -> None:
        if self.auto_commit:
            self._commit_consumed()
        await super().persist_offsets(sync=sync)

    def _commit_consumed(self, mqs: Iterable[MessageQueue] | None = None) -> None:
        store = self.offset_store
        assert store is not None
        for mq in list(mqs if mqs is not None else self._consumed):
            off = self._consumed.get(mq)
            if off is not None and mq in self.process_queues:
                store.update(mq, off)

    # ------------------------------------------------------------------ queues
    async def _queue_added(self, mq: MessageQueue) -> bool:
        offset = await self.start_offset(mq)
        if offset is None:
            return False
        pq = ProcessQueue()
        self.process_queues[mq] = pq
        self._start_pulling(mq, pq, offset)
        return True

    def _start_pulling(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        old = self._scopes.pop(mq, None)
        if old is not None:
            old.cancel()
        scope = anyio.CancelScope()
        self._scopes[mq] = scope
        self._next_offset[mq] = offset
        assert self._tg is not None
        self._tg.start_soon(self._pull_loop, mq, pq, pq.generation, scope)

    async def _queue_removed(self, mq: MessageQueue, pq: ProcessQueue, persist: bool = True) -> None:
        pq.dropped = True
        scope = self._scopes.pop(mq, None)
        if scope is not None:
            scope.cancel()
        store = self.offset_store
        assert store is not None
        if self.auto_commit:
            self._commit_consumed([mq])
        if persist:
            await store.persist([mq])
        store.remove(mq)
        self._consumed.pop(mq, None)
        self._next_offset.pop(mq, None)

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, generation: int, scope: anyio.CancelScope) -> None:
        opts = self.options
        max_count = opts.pull_threshold_for_queue
        max_bytes = opts.pull_threshold_size_for_queue * MIB
        with scope:
            while not pq.dropped and pq.generation == generation:
                if pq.paused or pq.count > max_count or pq.msg_size > max_bytes:
                    await anyio.sleep(0.05)
                    continue
                offset = self._next_offset[mq]
                sub = self.subscriptions.get(mq.topic) or Subscription.parse(mq.topic)
                try:
                    res = await pull_once(
                        self.instance,
                        self.group,
                        mq,
                        offset,
                        opts.pull_batch_size,
                        sub,
                        suspend_ms=int(opts.suspend_timeout * 1000),
                        timeout=opts.pull_timeout,
                    )
                except BrokerError as exc:
                    await anyio.sleep(0.02 if exc.code == ResponseCode.FLOW_CONTROL else opts.pull_retry_delay)
                    continue
                except (ClientError, RemotingError, OSError) as exc:
                    self.rlog.info(f"pull:{type(exc).__name__}", "%s: pull %s failed: %s", self.group, mq, exc)
                    await anyio.sleep(opts.pull_retry_delay)
                    continue
                if pq.dropped or pq.generation != generation:
                    return
                self._next_offset[mq] = res.next_begin_offset
                if res.status is PullStatus.FOUND and res.messages:
                    pq.put(res.messages)
                    self._buffer.append((mq, pq, generation, res.messages))
                    self._buffer_ready.set()
                elif res.status is PullStatus.OFFSET_ILLEGAL:
                    self.rlog.warning("offset-illegal", "%s: offset %d of %s illegal; continuing at %d",
                                      self.group, offset, mq, res.next_begin_offset)
                    self._consumed[mq] = res.next_begin_offset
                elif pq.count == 0 and res.next_begin_offset > self._consumed.get(mq, -1) >= 0:
                    self._consumed[mq] = res.next_begin_offset

    # ------------------------------------------------------------------ the user's side
    async def poll(self, timeout: float = 5.0) -> list[MessageExt]:
        """The next pulled batch, or ``[]`` after ``timeout`` seconds without messages."""
        self._check_running()
        with anyio.move_on_after(timeout):
            while True:
                while self._buffer:
                    mq, pq, gen, msgs = self._buffer.popleft()
                    if pq.dropped or pq.generation != gen:
                        continue
                    offset = pq.remove(msgs)
                    if offset >= 0:
                        self._consumed[mq] = offset
                    return msgs
                self._buffer_ready = anyio.Event()
                await self._buffer_ready.wait()
        return []

    async def commit(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """Commit what ``poll`` returned so far (or the given offsets) to the broker, synchronously."""
        self._check_running()
        store = self.offset_store
        assert store is not None
        if offsets:
            for mq, off in offsets.items():
                store.update(mq, off)
            await store.persist(offsets.keys(), sync=True)
            return
        self._commit_consumed()
        await store.persist(list(self.process_queues), sync=True)

    commit_sync = commit

    async def committed(self, mq: MessageQueue) -> int | None:
        """The offset the broker holds for ``mq`` (None when nothing was committed)."""
        self._check_running()
        assert self.offset_store is not None
        return await self.offset_store.read_stored(mq)

    def _seek_to(self, mq: MessageQueue, offset: int) -> None:
        pq = self.process_queues.get(mq)
        if pq is None:
            raise ClientStateError(f"{mq} is not assigned to this consumer")
        pq.clear()
        self._consumed[mq] = offset
        self._start_pulling(mq, pq, offset)

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Continue ``mq`` at ``offset`` (buffered messages of it are discarded)."""
        self._check_running()
        lo, hi = await self.instance.min_offset(mq), await self.instance.max_offset(mq)
        if not lo <= offset <= hi:
            raise ValueError(f"offset {offset} of {mq} is outside [{lo}, {hi}]")
        self._seek_to(mq, offset)

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        self._check_running()
        self._seek_to(mq, await self.instance.min_offset(mq))

    async def seek_to_end(self, mq: MessageQueue) -> None:
        self._check_running()
        self._seek_to(mq, await self.instance.max_offset(mq))

    async def seek_by_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> None:
        self._check_running()
        self._seek_to(mq, await self.instance.search_offset(mq, int(timestamp_ms)))

    def pause(self, mqs: Iterable[MessageQueue]) -> None:
        for mq in mqs:
            pq = self.process_queues.get(mq)
            if pq is not None:
                pq.paused = True

    def resume(self, mqs: Iterable[MessageQueue]) -> None:
        for mq in mqs:
            pq = self.process_queues.get(mq)
            if pq is not None:
                pq.paused = False
