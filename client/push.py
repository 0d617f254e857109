"""PushConsumer: a listener called for every message of the subscribed topics.

Shape: one pull loop per assigned queue (long polling), messages cached in the
queue's ProcessQueue (flow control: count, bytes, offset span), consumed by tasks
gated by ``consume_concurrency``; the committed offset is the lowest message still
in flight. Failures go back to the broker for a delayed retry (%RETRY%<group>), or
are re-tried in place when orderly.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from rmq.client.consumer import BROADCASTING, CLUSTERING, ConsumerBase, pull_once
from rmq.client.errors import BrokerError, ClientError, NoRouteError, decode_records
from rmq.client.instance import uniq_ids
from rmq.client.message import ConsumeResult, PullStatus
from rmq.client.process_queue import ProcessQueue
from rmq.client.subscription import Subscription, retry_topic
from rmq.client.trace import TraceDispatcher, start_tracing
from rmq.kernel.model import MessageQueue
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand, RemotingError
from rmq.protocol.common import Prop, encode_properties
from rmq.protocol.message import MessageExt

log = logging.getLogger("rmq.client.push")

Listener = Callable[[Any], Any]
_FAIL = (ConsumeResult.RECONSUME_LATER, ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT)
MIB = 1024 * 1024
FLOW_CONTROL_DELAY = 0.01  # Java waits 50 ms; shorter keeps a fast listener busy
SPLIT_AFTER_S = 0.01  # a pulled batch's consumer still busy after this gets helpers (see _split)


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


class PushConsumer(ConsumerBase):
    """Calls ``listener`` for each message (a list when ``consume_batch_size`` > 1).

    Returning normally means consumed; raising or returning
    ``ConsumeResult.RECONSUME_LATER`` means retry later (clustering: redelivered via
    ``%RETRY%<group>`` after 10 s, 30 s, 1 min, ...; orderly: the queue pauses
    ``suspend_current_queue_time`` and the same messages are retried in order).
    Async listeners run on the event loop; plain functions run in a thread pool of
    ``consume_concurrency`` threads (default 20).
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        listener: Listener | None = None,
        orderly: bool = False,
        **kwargs: Any,
    ) -> None:
        """``kwargs``: ``ConsumerBase``'s (message model, where to start, allocation, options)."""
        super().__init__(group, namesrv_addr, **kwargs)
        opts = self.options
        self.listener = listener
        self.orderly = orderly
        self._consume_limiter = anyio.CapacityLimiter(opts.consume_concurrency)
        self._aio: asyncio.AbstractEventLoop | None = None  # set at start on asyncio: _dispatch's fast path
        self._aio_tasks: set[asyncio.Task[None]] = set()
        self._thread_limiter = anyio.CapacityLimiter(opts.consume_concurrency)
        self._pull_scopes: dict[MessageQueue, anyio.CancelScope] = {}
        self._workers_done: dict[MessageQueue, anyio.Event] = {}
        self._inflight = 0
        self._idle = anyio.Event()
        self._idle.set()
        self._paused = False
        self.consumed = 0  # messages handed to the listener (stats)
        self.failed = 0
        self._trace: TraceDispatcher | None = None  # enable_trace: SubBefore/SubAfter records

    # ------------------------------------------------------------------ lifecycle
    async def _on_start(self) -> None:
        if self.listener is None:
            raise ValueError("PushConsumer needs listener=callable(message)")
        try:
            self._aio = asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend: consumption tasks go to the task group
            self._aio = None
        else:
            self._consume_limiter = asyncio.Semaphore(self.options.consume_concurrency)  # type: ignore[assignment]
        self._async_listener = _is_async(self.listener)
        if self.options.enable_trace:
            self._trace = await start_tracing(self, self.group)
        if not self.subscriptions:
            log.debug("%s: started without subscriptions (subscribe() may follow)", self.group)
        await self._start_consumer()
        self.instance.handlers[RequestCode.CONSUME_MESSAGE_DIRECTLY] = self._on_consume_directly
        if self.orderly and self.message_model == CLUSTERING:
            assert self._tg is not None
            self._tg.start_soon(self._lock_loop)

    async def _on_shutdown(self) -> None:
        for pq in self.process_queues.values():
            pq.dropped = True
            pq.data_ready.set()
        for scope in self._pull_scopes.values():
            scope.cancel()
        with anyio.move_on_after(self.options.shutdown_timeout):
            while self._inflight:
                self._idle = anyio.Event() if self._idle.is_set() else self._idle
                await self._idle.wait()
        for task in list(self._aio_tasks):  # what outlived shutdown_timeout ends as the task group's would
            task.cancel()
        await self.persist_offsets(sync=True)
        if self.orderly and self.message_model == CLUSTERING:
            await self._unlock_all(list(self.process_queues))
        if self._trace is not None:
            await self._trace.aclose()
        await self.instance.unregister(consumer_group=self.group)

    def pause(self) -> None:
        """Stop pulling (in-flight messages still finish); ``resume()`` continues."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    # ------------------------------------------------------------------ queue assignment
    async def _queue_added(self, mq: MessageQueue) -> bool:
        pq = ProcessQueue()
        if self.orderly and self.message_model == CLUSTERING:
            addr = await self.instance.find_broker_addr(mq.broker_name, mq.topic)
            try:
                locked = await self.instance.lock_batch(self.group, [mq], addr)
            except (ClientError, RemotingError, OSError) as exc:
                log.info("%s: lock of %s failed: %s", self.group, mq, exc)
                return False
            if mq not in locked:
                return False
            pq.locked = True
            pq.last_lock_time = time.monotonic()
        offset = await self.start_offset(mq)
        if offset is None:
            return False
        self.process_queues[mq] = pq
        scope = anyio.CancelScope()
        self._pull_scopes[mq] = scope
        assert self._tg is not None
        self._tg.start_soon(self._pull_loop, mq, pq, offset, scope)
        if self.orderly:
            done = anyio.Event()
            self._workers_done[mq] = done
            self._tg.start_soon(self._orderly_worker, mq, pq, done)
        return True

    async def _queue_removed(self, mq: MessageQueue, pq: ProcessQueue, persist: bool = True) -> None:
        pq.dropped = True
        pq.data_ready.set()
        scope = self._pull_scopes.pop(mq, None)
        if scope is not None:
            scope.cancel()
        done = self._workers_done.pop(mq, None)
        if done is not None:  # orderly: let the message being consumed finish before unlocking
            with anyio.move_on_after(self.options.shutdown_timeout):
                await done.wait()
        store = self.offset_store
        assert store is not None
        if persist:
            await store.persist([mq])
        store.remove(mq)
        if self.orderly and self.message_model == CLUSTERING:
            await self._unlock_all([mq])

    # ------------------------------------------------------------------ pulling
    def _pull_subscription(self, mq: MessageQueue) -> Subscription:
        sub = self.subscriptions.get(mq.topic)
        if sub is None:
            sub = Subscription.parse(mq.topic, "*")
        return sub

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue, offset: int, scope: anyio.CancelScope) -> None:
        opts = self.options
        inst = self.instance
        store = self.offset_store
        assert store is not None
        clustering = self.message_model == CLUSTERING
        orderly = self.orderly
        max_count = opts.pull_threshold_for_queue
        max_bytes = opts.pull_threshold_size_for_queue * MIB
        suspend_ms = int(opts.suspend_timeout * 1000)
        rt = retry_topic(self.group)
        with scope:
            while not pq.dropped:
                if self._paused or pq.paused:
                    await anyio.sleep(0.2)
                    continue
                if pq.count > max_count or pq.msg_size > max_bytes or (not orderly and pq.span() > opts.max_span):
                    await anyio.sleep(FLOW_CONTROL_DELAY)
                    continue
                if orderly and clustering and not self._lock_valid(pq):
                    await anyio.sleep(0.5)
                    continue
                sub = self._pull_subscription(mq)
                commit = (store.get(mq) or 0) if clustering else 0
                try:
                    res = await pull_once(
                        inst,
                        self.group,
                        mq,
                        offset,
                        opts.pull_batch_size,
                        sub if opts.post_subscription_when_pull else None,
                        suspend_ms=suspend_ms,
                        timeout=opts.pull_timeout,
                        commit_offset=commit,
                    )
                except BrokerError as exc:
                    delay = 0.02 if exc.code == ResponseCode.FLOW_CONTROL else opts.pull_retry_delay
                    self.rlog.info(f"pull:{exc.code}", "%s: pull %s failed: %s", self.group, mq, exc)
                    await anyio.sleep(delay)
                    continue
                except (ClientError, RemotingError, OSError) as exc:
                    self.rlog.info(f"pull:{type(exc).__name__}", "%s: pull %s failed: %s", self.group, mq, exc)
                    await anyio.sleep(opts.pull_retry_delay)
                    continue
                if pq.dropped:
                    return
                pq.last_pull_time = time.monotonic()
                status = res.status
                if status is PullStatus.FOUND:
                    offset = res.next_begin_offset
                    msgs = res.messages
                    if msgs:
                        if mq.topic == rt:
                            for m in msgs:
                                orig = m.properties.get(Prop.RETRY_TOPIC)
                                if orig:
                                    m.topic = orig
                        self._dispatch(mq, pq, msgs)
                    elif pq.count == 0:  # all filtered out client-side: move the committed offset on
                        pq.max_offset = max(pq.max_offset, offset - 1)
                        store.update(mq, offset, increase_only=True)
                elif status is PullStatus.OFFSET_ILLEGAL:
                    self.rlog.warning("offset-illegal", "%s: offset %d of %s is illegal; continuing at %d",
                                      self.group, offset, mq, res.next_begin_offset)
                    offset = res.next_begin_offset
                    pq.max_offset = offset - 1 if pq.count == 0 else pq.max_offset
                    store.update(mq, offset)
                    await store.persist([mq])
                else:
                    if status is PullStatus.NO_MATCHED_MSG and pq.count == 0 and res.next_begin_offset > offset:
                        store.update(mq, res.next_begin_offset, increase_only=True)
                    offset = res.next_begin_offset
                if opts.pull_interval:
                    await anyio.sleep(opts.pull_interval)

    def _dispatch(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        pq.put(msgs)
        if self.orderly:
            return
        self._spawn(mq, pq, self._work(msgs), leader=True)

    def _work(self, msgs: list[MessageExt]) -> deque[list[MessageExt]]:
        bs = self.options.consume_batch_size
        return deque([msgs[i : i + bs] for i in range(0, len(msgs), bs)])

    def _spawn(self, mq: MessageQueue, pq: ProcessQueue, work: deque[list[MessageExt]], leader: bool) -> None:
        self._inflight += 1
        pq.inflight += 1
        loop = self._aio
        if loop is not None:  # asyncio: a plain task (anyio's spawn costs more than it)
            task = loop.create_task(self._consume_concurrently(mq, pq, work, leader))
            self._aio_tasks.add(task)
            task.add_done_callback(self._aio_tasks.discard)
            return
        assert self._tg is not None
        self._tg.start_soon(self._consume_concurrently, mq, pq, work, leader)

    def _split(self, mq: MessageQueue, pq: ProcessQueue, work: deque[list[MessageExt]]) -> None:
        """A pulled batch's leader is still busy after SPLIT_AFTER_S: helpers take its remaining chunks,
        as Java's pool gives each chunk a thread — a slow listener (I/O per message) then works on up to
        ``consume_concurrency`` messages of one queue at once, and a stuck message holds the committed
        offset at itself, not at the start of its batch. A quick listener never pays for this."""
        if pq.dropped or self._state != "running":
            return
        for _ in range(min(len(work), self.options.consume_concurrency - 1)):
            self._spawn(mq, pq, work, leader=False)

    # ------------------------------------------------------------------ concurrent consumption
    async def _consume_concurrently(self, mq: MessageQueue, pq: ProcessQueue, work: deque[list[MessageExt]],
                                    leader: bool = True) -> None:
        timer = None
        try:
            async with self._consume_limiter:
                if leader and len(work) > 1 and self._aio is not None and self._trace is None:
                    timer = self._aio.call_later(SPLIT_AFTER_S, self._split, mq, pq, work)
                while work and not pq.dropped:  # a round: the whole batch, or what SPLIT_AFTER_S allowed
                    msgs, failed = await self._run_work(work)
                    await self._settle(mq, pq, msgs, failed)
        finally:
            if timer is not None:
                timer.cancel()
            self._inflight -= 1
            pq.inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    async def _settle(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt],
                      failed: list[MessageExt]) -> None:
        """After a round: failures back to the broker (or retried here), the rest out of the process queue,
        the offset to commit forward."""
        done = msgs
        if failed:
            self.failed += len(failed)
            if self.message_model == BROADCASTING:
                log.warning("%s: %d message(s) failed; broadcasting drops them", self.group, len(failed))
            else:
                kept = await self._send_back_all(mq, failed)
                if kept:
                    ids = {id(m) for m in kept}
                    done = [m for m in msgs if id(m) not in ids]
                    self._inflight += 1
                    pq.inflight += 1
                    assert self._tg is not None
                    self._tg.start_soon(self._consume_later, mq, pq, kept)
        offset = pq.remove(done)
        if offset >= 0 and not pq.dropped:
            store = self.offset_store
            assert store is not None
            store.update(mq, offset, increase_only=True)

    async def _consume_later(self, mq: MessageQueue, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """Messages that could neither be consumed nor sent back: try again here in a while."""
        try:
            await anyio.sleep(self.options.send_back_retry_delay)
        finally:
            self._inflight -= 1
            pq.inflight -= 1
        if pq.dropped or self._state != "running":
            return
        self._inflight += 1
        pq.inflight += 1
        await self._consume_concurrently(mq, pq, self._work(msgs))

    async def _run_work(self, work: deque[list[MessageExt]]) -> tuple[list[MessageExt], list[MessageExt]]:
        """One round: consume chunks of ``work`` (helpers may take from it too) until it is empty or
        SPLIT_AFTER_S passed, so a slow round's messages leave the process queue one by one (the committed
        offset then waits only for what is still being consumed): (consumed, failed). A plain function
        runs a round in one thread hop."""
        done: list[MessageExt] = []
        failed: list[MessageExt] = []
        until = time.monotonic() + SPLIT_AFTER_S
        if self._async_listener or self._trace is not None:
            call = self._call_listener if self._trace is None else self._run_listener  # the latter counts and traces
            while work:
                chunk = work.popleft()
                done += chunk
                failed += await call(chunk)
                if time.monotonic() > until:
                    break
            if self._trace is None:
                self.consumed += len(done)
            return done, failed
        done, failed = await anyio.to_thread.run_sync(self._run_sync_work, work, limiter=self._thread_limiter)
        self.consumed += len(done)
        return done, failed

    def _run_sync_work(self, work: deque[list[MessageExt]]) -> tuple[list[MessageExt], list[MessageExt]]:
        done: list[MessageExt] = []
        failed: list[MessageExt] = []
        until = time.monotonic() + SPLIT_AFTER_S
        while time.monotonic() <= until or not done:
            try:
                chunk = work.popleft()  # deque.popleft is atomic: helpers' threads take from it too
            except IndexError:
                break
            done += chunk
            failed += self._run_sync(chunk)
        return done, failed

    def _calls(self, msgs: list[MessageExt]) -> list[tuple[Any, list[MessageExt]]]:
        """(listener argument, messages it covers): one message each, or lists of the batch size."""
        bs = self.options.consume_batch_size
        if bs == 1:
            return [(m, [m]) for m in msgs]
        return [(msgs[i : i + bs], msgs[i : i + bs]) for i in range(0, len(msgs), bs)]

    def _listener_failed(self, covered: list[MessageExt]) -> None:
        what = covered[0].msg_id if len(covered) == 1 else f"a batch of {len(covered)}"
        log.warning("%s: listener raised on %s", self.group, what, exc_info=True)

    async def _on_consume_directly(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY (an operator's mqadmin / dashboard): the broker's copy of one
        message handed to the listener now; the answer is a ConsumeMessageDirectlyResult."""
        started = time.monotonic()
        try:
            msgs = decode_records(cmd.body or b"", "consume directly")
        except ClientError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        if not msgs:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "no message in the request")
        failed = await self._call_listener(msgs[:1])
        result = {"order": self.orderly, "autoCommit": True,
                  "consumeResult": "CR_LATER" if failed else "CR_SUCCESS", "remark": None,
                  "spentTimeMills": int((time.monotonic() - started) * 1000)}
        return cmd.response(body=json.dumps(result).encode())

    async def _run_listener(self, msgs: list[MessageExt]) -> list[MessageExt]:
        """Consume ``msgs``; return those that failed."""
        self.consumed += len(msgs)
        if self._trace is None:
            return await self._call_listener(msgs)
        before = self._trace.before_consume(self.group, msgs, uniq_ids()())
        failed = await self._call_listener(msgs)
        self._trace.after_consume(before, len(msgs), not failed)
        return failed

    async def _call_listener(self, msgs: list[MessageExt]) -> list[MessageExt]:
        if not self._async_listener:
            return await anyio.to_thread.run_sync(self._run_sync, msgs, limiter=self._thread_limiter)
        listener = self.listener
        assert listener is not None
        failed: list[MessageExt] = []
        for arg, covered in self._calls(msgs):
            try:
                r = await listener(arg)
            except Exception:
                self._listener_failed(covered)
                r = ConsumeResult.RECONSUME_LATER
            if r in _FAIL:
                failed.extend(covered)
        return failed

    def _run_sync(self, msgs: list[MessageExt]) -> list[MessageExt]:
        """The same for a plain function, in a worker thread."""
        listener = self.listener
        assert listener is not None
        failed: list[MessageExt] = []
        for arg, covered in self._calls(msgs):
            try:
                r = listener(arg)
            except Exception:
                self._listener_failed(covered)
                r = ConsumeResult.RECONSUME_LATER
            if r in _FAIL:
                failed.extend(covered)
        return failed

    # ------------------------------------------------------------------ retries
    def _max_reconsume(self) -> int:
        mrt = self.options.max_reconsume_times
        if mrt >= 0:
            return mrt
        return 2**31 - 1 if self.orderly else 16

    async def _send_back_all(self, mq: MessageQueue, msgs: Sequence[MessageExt]) -> list[MessageExt]:
        """CONSUMER_SEND_MSG_BACK each; fall back to re-sending to %RETRY%. Returns the ones that failed both."""
        kept = []
        for m in msgs:
            if not await self.send_back(mq, m):
                kept.append(m)
        return kept

    async def send_back(self, mq: MessageQueue, msg: MessageExt, delay_level: int = 0) -> bool:
        inst = self.instance
        max_rt = self._max_reconsume()
        origin = msg.properties.get(Prop.ORIGIN_MESSAGE_ID) or msg.msg_id
        ext = {
            "offset": str(msg.commit_log_offset),
            "group": self.group,
            "delayLevel": str(delay_level),
            "originMsgId": origin,
            "originTopic": msg.topic,
            "unitMode": "false",
            "maxReconsumeTimes": str(max_rt),
            "bname": mq.broker_name,
        }
        try:
            addr = inst.broker_addr(mq.broker_name) or msg.store_host
            await inst.invoke(addr, RequestCode.CONSUMER_SEND_MSG_BACK, ext, timeout=5.0, what="send back")
            return True
        except (ClientError, RemotingError, OSError) as exc:
            log.info("%s: send back of %s failed (%s); re-sending to the retry topic", self.group, msg.msg_id, exc)
        try:
            await self.resend_to_retry(msg, max_rt)
            return True
        except (ClientError, RemotingError, OSError) as exc:
            log.warning("%s: re-sending %s to the retry topic failed: %s", self.group, msg.msg_id, exc)
            return False

    async def resend_to_retry(self, msg: MessageExt, max_rt: int) -> None:
        """Produce ``msg`` to %RETRY%<group> ourselves (the broker moves it to the DLQ past max)."""
        inst = self.instance
        rt = retry_topic(self.group)
        props = {
            k: v
            for k, v in msg.properties.items()
            if k not in (Prop.RECONSUME_TIME, Prop.MAX_RECONSUME_TIMES, Prop.TRAN_MSG, Prop.CLUSTER)
        }
        props.setdefault(Prop.RETRY_TOPIC, msg.topic)
        props[Prop.ORIGIN_MESSAGE_ID] = props.get(Prop.ORIGIN_MESSAGE_ID) or msg.msg_id
        props[Prop.DELAY] = str(3 + msg.reconsume_times)
        props.setdefault(Prop.UNIQ_KEY, uniq_ids()())
        try:
            route = await inst.route(rt)
        except NoRouteError:
            route = await inst.route(rt, refresh=True)
        queues = route.publish_queues(rt)
        if not queues:
            raise NoRouteError(rt)
        mq = random.choice(queues)
        ext = {
            "a": "CLIENT_INNER_PRODUCER",
            "b": rt,
            "c": "TBW102",
            "d": "4",
            "e": str(mq.queue_id),
            "f": "0",
            "g": str(msg.born_timestamp),
            "h": str(msg.flag),
            "i": encode_properties(props),
            "j": str(msg.reconsume_times + 1),
            "k": "false",
            "l": str(max_rt),
            "n": mq.broker_name,
        }
        addr = await inst.find_broker_addr(mq.broker_name, rt)
        await inst.invoke(addr, RequestCode.SEND_MESSAGE_V2, ext, msg.body, what="re-send to retry topic")

    # ------------------------------------------------------------------ orderly consumption
    def _lock_valid(self, pq: ProcessQueue) -> bool:
        return pq.locked and time.monotonic() - pq.last_lock_time < self.options.lock_max_live

    async def _lock_loop(self) -> None:
        while True:
            await anyio.sleep(min(1.0, self.options.lock_interval))
            await self.lock_all()
            await anyio.sleep(max(0.0, self.options.lock_interval - 1.0))

    async def lock_all(self) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq, pq in self.process_queues.items():
            if not pq.dropped:
                by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, mqs in by_broker.items():
            try:
                addr = await self.instance.find_broker_addr(broker)
                locked = await self.instance.lock_batch(self.group, mqs, addr)
            except (ClientError, RemotingError, OSError) as exc:
                log.info("%s: re-locking on %s failed: %s", self.group, broker, exc)
                continue
            now = time.monotonic()
            for mq in mqs:
                pq = self.process_queues.get(mq)
                if pq is None:
                    continue
                if mq in locked:
                    pq.locked = True
                    pq.last_lock_time = now
                else:
                    pq.locked = False

    async def _unlock_all(self, mqs: list[MessageQueue]) -> None:
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        for broker, group_mqs in by_broker.items():
            try:
                addr = await self.instance.find_broker_addr(broker)
                await self.instance.unlock_batch(self.group, group_mqs, addr)
            except (ClientError, RemotingError, OSError) as exc:
                log.info("%s: unlock on %s failed: %s", self.group, broker, exc)

    async def _orderly_worker(self, mq: MessageQueue, pq: ProcessQueue, done: anyio.Event) -> None:
        store = self.offset_store
        assert store is not None
        bs = self.options.consume_batch_size
        clustering = self.message_model == CLUSTERING
        max_rt = self._max_reconsume()
        try:
            while not pq.dropped:
                msgs = pq.take(bs)
                if not msgs:
                    await pq.data_ready.wait()
                    continue
                if clustering and not self._lock_valid(pq):
                    await anyio.sleep(0.1)
                    continue
                self._inflight += 1
                self._idle = anyio.Event() if self._idle.is_set() else self._idle
                try:
                    async with self._consume_limiter:
                        failed = await self._run_listener(msgs)
                finally:
                    self._inflight -= 1
                    if self._inflight == 0:
                        self._idle.set()
                if failed:
                    self.failed += len(failed)
                    for m in msgs:
                        m.reconsume_times += 1
                    if not clustering or max(m.reconsume_times for m in msgs) <= max_rt:
                        await anyio.sleep(self.options.suspend_current_queue_time)
                        continue
                    try:  # out of retries: to the DLQ via the retry topic, then move on
                        for m in msgs:
                            await self.resend_to_retry(m, max_rt)
                    except (ClientError, RemotingError, OSError) as exc:
                        log.warning("%s: moving %s to the DLQ failed: %s", self.group, mq, exc)
                        await anyio.sleep(self.options.suspend_current_queue_time)
                        continue
                if pq.dropped:
                    break
                offset = pq.remove(msgs)
                if offset >= 0:
                    store.update(mq, offset)
        finally:
            done.set()
