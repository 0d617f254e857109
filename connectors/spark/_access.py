"""Every call into ``rmq.client`` goes through this module, so client API drift is a local fix.

A :class:`Session` owns one private event-loop thread hosting the async client objects
(``async with`` must enter and exit in one task, so a host task keeps them open until
``close()``). Spark calls us from plain threads; each call is a coroutine submitted to that
loop. Pulls and sends are pipelined there (several in flight) because a round trip, not
decoding, bounds a single sequential pull loop.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import struct
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from rmq.connectors.spark._offsets import Bounds, DataLossError, QueueRef

log = logging.getLogger("rmq.connectors.spark")

__all__ = ["HalfRef", "Session", "shared_session", "message_factory", "key_hash"]

T = TypeVar("T")

PULLS_IN_FLIGHT = 8  # spans of one queue pulled concurrently
SENDS_IN_FLIGHT = 8  # batches sent concurrently by one task
HALVES_IN_FLIGHT = 32  # half messages (one per request: a batch cannot be transactional) in flight per task
_GROUP = "rmq_spark_reader"  # pulls need a group name; nothing is committed under it


def message_factory() -> Callable[..., Any]:
    """``Message(topic, body, tags=, keys=, properties=)`` of the client (resolved once per task)."""
    from rmq.client import Message

    return Message


def key_hash() -> Callable[[str], int]:
    """The client's cross-process key hash (Java ``String.hashCode`` for str, as Java's
    SelectMessageQueueByHash): the same key picks the same queue from any process or language."""
    from rmq.client.selector import stable_hash

    return stable_hash


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:  # pragma: no cover - uvloop is optional
        return asyncio.new_event_loop()


class Session:
    """A connection to one RocketMQ cluster (name server list), usable from any thread."""

    def __init__(self, nameserver: str, timeout_s: float = 10.0,
                 credentials: tuple[str, str] | None = None) -> None:
        self.nameserver = nameserver
        self.timeout_s = timeout_s
        self.credentials = credentials
        self._loop = _new_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rmq-spark-io", daemon=True)
        self._thread.start()
        self._stop: asyncio.Event | None = None
        self._hosts: list[concurrent.futures.Future[Any]] = []
        self._consumer: Any = None
        self._groups: dict[str, Any] = {}
        self._admin: Any = None
        self._producers: dict[str, Producer] = {}
        self._lock = threading.Lock()
        self.closed = False
        _all_sessions.add(self)
        try:
            self._consumer = self._host(self._pull_consumer(_GROUP))
        except BaseException:
            self.close()
            raise

    # -- plumbing --------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return not self.closed and self._thread.is_alive()

    def _call(self, coro: Awaitable[T], timeout: float | None = None) -> T:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        try:
            return fut.result(timeout if timeout is not None else self.timeout_s * 3)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"rocketmq: no answer from {self.nameserver} within {self.timeout_s * 3:.0f}s") from None

    def _pull_consumer(self, group: str) -> Any:
        from rmq.client import PullConsumer

        return PullConsumer(group, namesrv_addr=self.nameserver, request_timeout=self.timeout_s,
                            pull_timeout=self.timeout_s, credentials=self.credentials)

    def _host(self, client: Any) -> Any:
        """Enter ``async with client`` in a task of the loop that stays until close()."""
        started: concurrent.futures.Future[None] = concurrent.futures.Future()

        async def host() -> None:
            if self._stop is None:
                self._stop = asyncio.Event()
            try:
                async with client:
                    started.set_result(None)
                    await self._stop.wait()
            except BaseException as exc:
                if not started.done():
                    started.set_exception(exc)
                raise

        self._hosts.append(asyncio.run_coroutine_threadsafe(host(), self._loop))
        try:
            started.result(self.timeout_s * 3)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(
                f"rocketmq: {type(client).__name__} for name server {self.nameserver} did not start within "
                f"{self.timeout_s * 3:.0f}s"
            ) from None
        return client

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True

        async def stop() -> None:
            if self._stop is not None:
                self._stop.set()

        try:
            if self._thread.is_alive():
                asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
                for h in self._hosts:
                    try:
                        h.result(self.timeout_s)
                    except Exception as exc:  # shutting down: report, do not raise
                        log.debug("rocketmq: client shutdown: %s", exc)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metadata --------------------------------------------------------------------------------
    def _get_admin(self) -> Any:
        with self._lock:
            if self._admin is None:
                from rmq.client import Admin

                self._admin = self._host(Admin(namesrv_addr=self.nameserver, request_timeout=self.timeout_s,
                                                  credentials=self.credentials))
            return self._admin

    def list_topics(self) -> list[str]:
        """User topics: the cluster's topic list minus those named after clusters and brokers."""
        admin = self._get_admin()

        async def fetch() -> list[str]:
            topics, info = await asyncio.gather(admin.list_topics(), admin.cluster_info())
            internal = set(info.brokers) | set(info.clusters)
            return sorted(t for t in topics if t not in internal)

        return self._call(fetch())

    def queues(self, topic: str) -> list[QueueRef]:
        """Readable queues of ``topic`` sorted by (broker, queue id); [] when the topic is unknown."""
        from rmq.client import NoRouteError

        async def fetch() -> list[QueueRef]:
            try:
                mqs = await self._consumer.fetch_queues(topic)
            except NoRouteError:
                return []
            return sorted(QueueRef(m.topic, m.broker_name, m.queue_id) for m in mqs)

        return self._call(fetch())

    def bounds(self, queues: Sequence[QueueRef]) -> dict[QueueRef, Bounds]:
        """Min and max offsets of every queue: one stats call per topic and broker, concurrently."""
        admin = self._get_admin()
        topics = sorted({q.topic for q in queues})

        async def per_queue(q: QueueRef) -> Bounds:
            mq = _mq(q)
            lo, hi = await asyncio.gather(self._consumer.min_offset(mq), self._consumer.max_offset(mq))
            return Bounds(lo, hi)

        async def all_() -> dict[QueueRef, Bounds]:
            stats = await asyncio.gather(*(admin.topic_stats(t) for t in topics))
            found = {
                QueueRef(s.queue.topic, s.queue.broker_name, s.queue.queue_id): Bounds(s.min_offset, s.max_offset)
                for per_topic in stats
                for s in per_topic
            }
            missing = [q for q in queues if q not in found]
            for q, b in zip(missing, await asyncio.gather(*(per_queue(q) for q in missing)), strict=True):
                found[q] = b
            return {q: found[q] for q in queues}

        return self._call(all_())

    def search(self, q: QueueRef, timestamp_ms: int) -> int:
        """First offset stored at or after ``timestamp_ms`` (Kafka's semantics; max if none).

        The broker answers with the offset stored *nearest* the time (RocketMQ's semantics),
        which may be one before it; a few one-message pulls settle the exact boundary.
        """
        consumer = self._consumer
        mq = _mq(q)

        async def store_time(offset: int) -> int | None:
            from rmq.client import PullStatus

            res = await consumer.pull(mq, offset, 1)
            if res.status is PullStatus.FOUND and res.messages:
                return int(res.messages[0].store_timestamp)
            return None

        async def find() -> int:
            lo, hi = await asyncio.gather(consumer.min_offset(mq), consumer.max_offset(mq))
            off = min(max(await consumer.search_offset(mq, timestamp_ms), lo), hi)
            for _ in range(64):  # forward past messages stored before the time
                if off >= hi:
                    return hi
                t = await store_time(off)
                if t is None or t >= timestamp_ms:
                    break
                off += 1
            for _ in range(64):  # back over equal-or-later neighbours
                if off <= lo:
                    break
                t = await store_time(off - 1)
                if t is None or t < timestamp_ms:
                    break
                off -= 1
            return off

        return self._call(find())

    def commit_offsets(self, group: str, offsets: Mapping[QueueRef, int]) -> None:
        """Store ``offsets`` as ``group``'s consume offsets on the brokers (for monitoring tools)."""
        with self._lock:
            consumer = self._groups.get(group)
            if consumer is None:
                consumer = self._groups[group] = self._host(self._pull_consumer(group))

        async def all_() -> None:
            await asyncio.gather(*(consumer.update_consume_offset(_mq(q), off) for q, off in offsets.items()))

        self._call(all_())

    # -- reading ---------------------------------------------------------------------------------
    def read(
        self,
        q: QueueRef,
        start: int,
        end: int,
        *,
        expression: str | None,
        expression_type: str,
        fail_on_data_loss: bool,
        pull_batch_size: int,
    ) -> Iterator[tuple[list[bytes], int, int]]:
        """Raw pull bodies covering ``[start, end)`` in offset order, as (bodies, lo, hi) per span.

        The range is cut into spans of ``pull_batch_size`` offsets, up to PULLS_IN_FLIGHT of
        them pulled concurrently. A body may hold records outside its span (a filtered pull
        scans on); the caller keeps only offsets in ``[lo, hi)``, so spans never overlap.
        Bodies are decoded by the caller, off the event loop (see ``_decode.Columns``).
        """
        span = max(1, pull_batch_size)
        starts = iter(range(start, end, span))
        window: list[tuple[int, int, concurrent.futures.Future[list[bytes]]]] = []
        filtered = expression not in (None, "*") or expression_type != "TAG"
        puller = _SpanPuller(self._consumer, q, expression or "*", expression_type, fail_on_data_loss, filtered, span)

        def submit() -> bool:
            lo = next(starts, None)
            if lo is None:
                return False
            hi = min(lo + span, end)
            window.append((lo, hi, asyncio.run_coroutine_threadsafe(puller.pull_span(lo, hi), self._loop)))
            return True

        try:
            for _ in range(PULLS_IN_FLIGHT):
                if not submit():
                    break
            while window:
                lo, hi, fut = window.pop(0)
                bodies = fut.result(self.timeout_s * 3)
                submit()
                if bodies:
                    yield bodies, lo, hi
        finally:
            for _, _, fut in window:
                fut.cancel()

    # -- writing ---------------------------------------------------------------------------------
    def producer(self, group: str, send_timeout_s: float) -> Producer:
        with self._lock:
            p = self._producers.get(group)
            if p is None:
                from rmq.client import Producer as ClientProducer

                client = ClientProducer(group, namesrv_addr=self.nameserver, send_timeout=send_timeout_s,
                                        request_timeout=self.timeout_s, credentials=self.credentials)
                p = self._producers[group] = Producer(self, self._host(client))
            return p

    def tx_producer(self, group: str, send_timeout_s: float, checker: Callable[[Mapping[str, str]], bool | None]
                    ) -> TxProducer:
        """A transactional producer of ``group`` whose broker checks ``checker(properties)`` answers
        (True commit, False rollback, None unknown). It lives as long as this process's session, so
        every Python worker that wrote or committed halves keeps answering checks for the group."""
        with self._lock:
            p = self._producers.get("tx:" + group)
            if p is None:
                from rmq.client import LocalTransactionState, TransactionProducer

                def check(msg: Any) -> Any:
                    ok = checker(msg.properties)
                    return (LocalTransactionState.UNKNOW if ok is None else
                            LocalTransactionState.COMMIT_MESSAGE if ok else LocalTransactionState.ROLLBACK_MESSAGE)

                client = TransactionProducer(group, namesrv_addr=self.nameserver, send_timeout=send_timeout_s,
                                             request_timeout=self.timeout_s, credentials=self.credentials,
                                             checker=check)
                p = self._producers["tx:" + group] = TxProducer(self, self._host(client))
            assert isinstance(p, TxProducer)
            return p

    def publish_queues(self, topic: str) -> list[QueueRef]:
        """Queues a send may target, sorted by (broker, queue id): the sink's ``partition`` index."""
        p = next(iter(self._producers.values()), None)
        if p is None:
            raise RuntimeError("publish_queues needs a producer (call producer() first)")
        mqs = self._call(p.client.fetch_publish_queues(topic))
        return sorted(QueueRef(m.topic, m.broker_name, m.queue_id) for m in mqs)


class Producer:
    """Sends batches of messages, each batch to a chosen queue, several in flight."""

    def __init__(self, session: Session, client: Any) -> None:
        self.session = session
        self.client = client

    def send_batches(self, jobs: Sequence[tuple[QueueRef, Sequence[Any]]]) -> None:
        client = self.client

        async def all_() -> None:
            slots = asyncio.Semaphore(SENDS_IN_FLIGHT)

            async def one(q: QueueRef, msgs: Sequence[Any]) -> None:
                async with slots:
                    if len(msgs) == 1:
                        await client.send(msgs[0], queue=_mq(q))
                    else:
                        await client.send_batch(msgs, queue=_mq(q))

            await asyncio.gather(*(one(q, m) for q, m in jobs))

        if jobs:
            self.session._call(all_(), timeout=self.session.timeout_s * (3 + len(jobs) / SENDS_IN_FLIGHT))


@dataclass(frozen=True)
class HalfRef:
    """A stored half message: what END_TRANSACTION needs to end it (picklable, for commit messages)."""

    topic: str
    broker: str
    queue_offset: int  # in the half topic (tranStateTableOffset)
    commit_log_offset: int
    offset_msg_id: str
    msg_id: str  # UNIQ_KEY: the half's identity in the commit log
    transaction_id: str


class TxProducer(Producer):
    """Sends half messages (each on its own: RocketMQ has no transactional batch) and ends them."""

    def send_halves(self, jobs: Sequence[tuple[QueueRef, Any]]) -> list[HalfRef]:
        from rmq.client import SendStatus
        from rmq.protocol.message import decode_offset_msg_id

        client = self.client

        async def all_() -> list[HalfRef]:
            slots = asyncio.Semaphore(HALVES_IN_FLIGHT)

            async def one(q: QueueRef, msg: Any) -> HalfRef:
                async with slots:
                    prepared = client._prepare(msg, transactional=True)
                    r = await client._send(prepared, _mq(q), None, None, None, None, client.options.retry_times)
                if r.status is not SendStatus.SEND_OK:  # stored but not safe: its attempt fails, a check rolls it back
                    raise RuntimeError(f"rocketmq: half message to {q} not stored safely: {r.status.name}")
                off = r.offset_msg_id or r.msg_id
                return HalfRef(q.topic, r.queue.broker_name, r.queue_offset, decode_offset_msg_id(off)[2], off,
                               r.msg_id, r.transaction_id or r.msg_id)

            return list(await asyncio.gather(*(one(q, m) for q, m in jobs)))

        if not jobs:
            return []
        return self.session._call(all_(), timeout=self.session.timeout_s * (3 + len(jobs) / HALVES_IN_FLIGHT))

    def end(self, halves: Sequence[HalfRef], commit: bool, deadline: float | None = None) -> set[str]:
        """END_TRANSACTION for each half as a request (not Java's oneway), so its arrival is known.
        Returns the msg ids the broker acknowledged; the rest are left to the broker's check. No END
        starts after ``deadline`` (time.time()), when a check may take over the outcome."""
        import time

        from rmq.client import LocalTransactionState
        from rmq.client.transaction import end_transaction_header
        from rmq.protocol.codes import RequestCode

        client = self.client
        inst = client.instance
        state = LocalTransactionState.COMMIT_MESSAGE if commit else LocalTransactionState.ROLLBACK_MESSAGE

        async def all_() -> set[str]:
            slots = asyncio.Semaphore(HALVES_IN_FLIGHT)
            acked: set[str] = set()

            async def one(h: HalfRef) -> None:
                async with slots:
                    if deadline is not None and time.time() > deadline:
                        return
                    ext = end_transaction_header(client.group, state, queue_offset=h.queue_offset,
                                                 offset_msg_id=h.offset_msg_id, msg_id=h.msg_id,
                                                 transaction_id=h.transaction_id, from_check=False,
                                                 commit_log_offset=h.commit_log_offset)
                    try:
                        addr = await inst.find_broker_addr(h.broker, h.topic)
                        await inst.invoke(addr, RequestCode.END_TRANSACTION, ext, timeout=self.session.timeout_s,
                                          what=f"end transaction {h.msg_id}")
                    except Exception as exc:  # noqa: BLE001 - unknown outcome: the broker's check decides
                        log.warning("rocketmq: END_TRANSACTION of %s not acknowledged (a check will end it): %s",
                                    h.msg_id, exc)
                        return
                    acked.add(h.msg_id)

            await asyncio.gather(*(one(h) for h in halves))
            return acked

        if not halves:
            return set()
        return self.session._call(all_(), timeout=self.session.timeout_s * (3 + len(halves) / HALVES_IN_FLIGHT))


_RAW_STATUS = {0: "FOUND", 19: "NO_NEW_MSG", 20: "NO_MATCHED_MSG", 21: "OFFSET_ILLEGAL"}


class _SpanPuller:
    """Pulls one span ``[lo, hi)`` of a queue completely, deciding what gaps and illegal offsets mean.

    Pulls return the raw record bytes (decoding happens in the reader thread, columnar).
    That uses the client's instance-level ``invoke``; if the client ever stops offering it,
    the public ``PullConsumer.pull`` is used and its messages are re-encoded (slower).
    """

    def __init__(
        self, consumer: Any, q: QueueRef, expression: str, expression_type: str, fail: bool, filtered: bool,
        max_nums: int,
    ) -> None:
        self.consumer = consumer
        self.mq = _mq(q)
        self.q = q
        self.expression = expression
        self.expression_type = expression_type
        self.fail = fail
        self.filtered = filtered
        self.max_nums = max_nums
        try:
            from rmq.client.consumer import pull_ext
            from rmq.client.subscription import Subscription

            self._sub = Subscription.parse(q.topic, expression, expression_type)
            self._pull_ext = pull_ext
            self._raw = callable(getattr(consumer.instance, "invoke", None))
        except (ImportError, AttributeError):  # pragma: no cover - client API drift
            self._raw = False

    def _lost(self, lo: int, hi: int, why: str) -> None:
        if self.fail:
            raise DataLossError(
                f"rocketmq: offsets {lo}..{hi - 1} of queue {self.q} are no longer readable ({why}); "
                "some data was lost. Set failOnDataLoss=false to skip it and continue."
            )
        log.warning("rocketmq: skipping offsets %d..%d of %s (%s)", lo, hi - 1, self.q, why)

    async def _pull(self, offset: int, max_nums: int) -> tuple[str, int, int, int, bytes]:
        """(status, next offset, min offset, max offset, record bytes) of one pull."""
        if self._raw:
            from rmq.client.errors import BrokerError

            inst = self.consumer.instance
            mq = self.mq
            addr = inst.broker_addr(mq.broker_name) or await inst.find_broker_addr(mq.broker_name, mq.topic)
            ext = self._pull_ext(self.consumer.group, mq, offset, max_nums, self._sub)
            resp = await inst.invoke(addr, 11, ext, timeout=self.consumer.pull_timeout, ok=tuple(_RAW_STATUS),
                                     what=f"pull {self.q}")
            status = _RAW_STATUS.get(resp.code)
            if status is None:  # pragma: no cover - invoke raised already
                raise BrokerError(resp.code, resp.remark, f"pull {self.q}", addr)
            e = resp.ext
            return (status, int(e.get("nextBeginOffset") or 0), int(e.get("minOffset") or 0),
                    int(e.get("maxOffset") or 0), bytes(resp.body or b"") if status == "FOUND" else b"")
        res = await self.consumer.pull(self.mq, offset, max_nums, expression=self.expression,
                                       expression_type=self.expression_type)
        return (res.status.name, res.next_begin_offset, res.min_offset, res.max_offset,
                _encode(res.messages) if res.messages else b"")

    async def pull_span(self, lo: int, hi: int) -> list[bytes]:
        out: list[bytes] = []
        cur = lo
        while cur < hi:
            status, nxt, min_off, max_off, body = await self._pull(cur, min(self.max_nums, hi - cur))
            if status == "FOUND":
                if body:
                    first = _QOFF.unpack_from(body, 20)[0]
                    if not self.filtered and first > cur:
                        self._lost(cur, min(first, hi), "gap in the queue")
                    out.append(body)
                nxt = max(nxt, cur + 1) if body else nxt
            elif status == "NO_MATCHED_MSG":
                pass
            elif status == "OFFSET_ILLEGAL" and cur < min_off:
                self._lost(cur, min(min_off, hi), f"the queue now starts at {min_off}")
                nxt = min_off
            else:  # NO_NEW_MSG, or illegal above the max: the range's tail is gone
                self._lost(cur, hi, f"the queue now ends at {max_off}")
                return out
            if nxt <= cur:
                raise RuntimeError(f"rocketmq: pull of {self.q} at {cur} made no progress ({status})")
            cur = nxt
        return out


_QOFF = struct.Struct(">q")  # a record's QUEUEOFFSET sits at byte 20


def _encode(msgs: Sequence[Any]) -> bytes:
    """MessageExt objects back to record bytes (only on the fallback path)."""
    from rmq.protocol.message import encode_message

    return b"".join(
        encode_message(m.topic, m.body, queue_id=m.queue_id, flag=m.flag, properties=m.properties,
                       sys_flag=m.sys_flag & ~0x1, queue_offset=m.queue_offset, commit_log_offset=m.commit_log_offset,
                       born_timestamp=m.born_timestamp, born_host=m.born_host, store_timestamp=m.store_timestamp,
                       store_host=m.store_host)
        for m in msgs
    )


def _mq(q: QueueRef) -> Any:
    from rmq.kernel import MessageQueue

    return MessageQueue(q.topic, q.broker, q.queue_id)


_shared: dict[tuple[str, float, tuple[str, str] | None], Session] = {}
_all_sessions: weakref.WeakSet[Session] = weakref.WeakSet()  # closed at exit, so no loop dies mid-task
_shared_lock = threading.Lock()


def shared_session(nameserver: str, timeout_s: float, credentials: tuple[str, str] | None = None) -> Session:
    """One session per (name servers, timeout) per Python worker, reused by later tasks.

    Spark reuses Python workers, so this saves the route fetch and connects on every task.
    """
    key = (nameserver, timeout_s, credentials)
    with _shared_lock:
        s = _shared.get(key)
        if s is None or not s.alive:
            s = _shared[key] = Session(nameserver, timeout_s, credentials)
        return s


@atexit.register
def _close_all() -> None:
    for s in list(_all_sessions):
        try:
            s.close()
        except Exception:  # noqa: S110 - interpreter exit
            pass
    _shared.clear()
