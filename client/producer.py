"""Producer (the transactional one is in ``rmq.client.transaction``).

Sends use SEND_MESSAGE_V2 (310) and batches SEND_BATCH_MESSAGE (320), as the Java
client does. Sync sends retry on another broker (``retry_times``, default 2) within
``send_timeout`` (3 s); brokers that were slow or unreachable are avoided for a while
(latency fault tolerance).
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import logging
import struct
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import anyio
import attrs

from rmq.client.base import ClientBase
from rmq.client.errors import (
    BrokerError,
    MessageTooLargeError,
    NoRouteError,
    RequestTimeoutError,
    SendError,
    response_int,
)
from rmq.client.instance import uniq_ids
from rmq.client.message import Message, SendResult, SendStatus
from rmq.client.options import ProducerOptions, build
from rmq.client.route import TopicRoute
from rmq.client.selector import (
    DefaultQueuePicker,
    HashSelector,
    LatencyFaultTolerance,
    QueueSelector,
)
from rmq.client.sendcb import AioSend
from rmq.client.trace import TraceDispatcher, start_tracing
from rmq.kernel.model import MessageQueue
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand, RemotingError
from rmq.protocol.common import Prop, SysFlag, decode_properties, encode_properties
from rmq.protocol.headers import SEND_V2
from rmq.protocol.message import MessageExt, compress_body, decompress_body

log = logging.getLogger("rmq.client.producer")

SendCallback = Callable[[SendResult | None, BaseException | None], Any]

_STATUS = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}
# broker answers worth another attempt (Java's list plus SYSTEM_BUSY, which is transient)
RETRY_CODES = frozenset(
    (
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.NO_PERMISSION,
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.NO_BUYER_ID,
        ResponseCode.NOT_IN_CURRENT_UNIT,
    )
)
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
_SEND_V2 = int(RequestCode.SEND_MESSAGE_V2)
_BATCH_HEAD = struct.Struct(">iiiii")  # total, magic (0), body crc (0: the broker computes), flag, body length
_U16 = struct.Struct(">H")
_SEND_BATCH = int(RequestCode.SEND_BATCH_MESSAGE)


@attrs.define(slots=True)
class _Prepared:
    """A message encoded once for every attempt."""

    topic: str
    body: bytes
    flag: int
    sys_flag: int
    properties: str
    uniq_id: str
    reconsume_times: int | None = None
    max_reconsume_times: int | None = None
    code: int = _SEND_V2


@attrs.define(slots=True)
class _PublishInfo:
    queues: list[MessageQueue]
    from_default_topic: bool


def parse_send_response(resp: RemotingCommand, mq: MessageQueue, msg_id: str) -> SendResult:
    status = _STATUS.get(resp.code)  # type: ignore[call-overload]
    if status is None:
        raise BrokerError(resp.code, resp.remark, f"send to {mq.topic}")
    ext = resp.ext
    what = f"send to {mq.topic}"
    qid = response_int(resp, "queueId", None, bits=32, what=what)
    queue = mq if qid is None or qid == mq.queue_id else MessageQueue(mq.topic, mq.broker_name, qid)
    return SendResult(
        status=status,
        msg_id=msg_id,
        offset_msg_id=ext.get("msgId", ""),
        queue=queue,
        queue_offset=response_int(resp, "queueOffset", -1, what=what),
        transaction_id=ext.get("transactionId") or None,
        region_id=ext.get("MSG_REGION") or None,
        recall_handle=ext.get("recallHandle") or None,
        trace_on=ext.get("TRACE_ON") != "false",
    )


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a user callback: await coroutine functions, run plain ones inline."""
    res = fn(*args)
    if inspect.isawaitable(res):
        res = await res
    return res



class Producer(ClientBase):
    """Sends messages to a topic's queues.

    ``Producer(group, namesrv_addr="host:port;host:port", **options)``; options are
    :class:`rmq.client.options.ProducerOptions` fields (``send_timeout=3.0``,
    ``retry_times=2``, ``compress_over=4096``, ``latency_fault_tolerance=True``...).
    ``selector`` replaces round robin for every send: a callable
    ``(queues, message, arg) -> MessageQueue``.
    """

    def __init__(
        self,
        group: str = "DEFAULT_PRODUCER",
        namesrv_addr: str | list[str] | None = None,
        *,
        selector: QueueSelector | None = None,
        kernel: Any = None,
        **options: Any,
    ) -> None:
        self._options = build(ProducerOptions, options, type(self).__name__)
        super().__init__(namesrv_addr, self._options, kernel)
        self.group = group
        self.options: ProducerOptions = self._options
        self._selector = selector
        self._fault = LatencyFaultTolerance() if self._options.latency_fault_tolerance else None
        self._picker = DefaultQueuePicker(self._fault)
        self._publish: dict[str, _PublishInfo] = {}
        self._async_slots = anyio.Semaphore(self._options.max_async_in_flight)
        self._aio: asyncio.AbstractEventLoop | None = None  # set at start on asyncio: send_async's fast path
        self._aio_tasks: set[asyncio.Task[None]] = set()
        self._aio_inflight = 0
        self._aio_slot: asyncio.Future[None] | None = None
        self._aio_idle: asyncio.Future[None] | None = None  # wait_async_sends: woken when none is in flight
        self._aio_sends: set[AioSend] = set()  # sends in flight without a task (see rmq.client.sendcb)
        self._hash_selector = HashSelector()
        self._trace: TraceDispatcher | None = None  # enable_trace: Pub records

    # ------------------------------------------------------------------ lifecycle
    async def _on_start(self) -> None:
        try:
            self._aio = asyncio.get_running_loop()
        except RuntimeError:  # another anyio backend: send_async uses the task group
            self._aio = None
        inst = self.instance
        inst.heartbeat_data = self._heartbeat_data
        inst.route_listeners.append(self._on_route)
        inst.handlers[RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT] = self._on_reply
        self._replies: dict[str, anyio.Event | MessageExt] = {}
        if self._options.enable_trace:
            self._trace = await start_tracing(self, self.group)

    def _heartbeat_data(self) -> dict[str, Any]:
        groups = [self.group] if self.group == INNER_PRODUCER_GROUP else [self.group, INNER_PRODUCER_GROUP]
        return {"producerDataSet": [{"groupName": g} for g in groups], "consumerDataSet": []}

    async def _on_shutdown(self) -> None:
        for task in list(self._aio_tasks):  # as the task group's cancellation does on other backends
            task.cancel()
        for send in list(self._aio_sends):  # and so for the sends without a task: their outcome is ignored
            send.cancel()
        if self._trace is not None:
            await self._trace.aclose()
        await self.instance.unregister(producer_group=self.group)

    def _on_route(self, topic: str, route: TopicRoute | None) -> None:
        if topic in self._publish:
            if route is None:
                self._publish.pop(topic, None)
            else:
                queues = route.publish_queues(topic)
                if queues:
                    self._publish[topic] = _PublishInfo(queues, False)

    # ------------------------------------------------------------------ routes
    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a send to ``topic`` may go to (route fetched if needed)."""
        self._check_running()
        return list((await self._publish_info(topic)).queues)

    async def _publish_info(self, topic: str) -> _PublishInfo:
        info = self._publish.get(topic)
        if info is not None and info.queues:
            return info
        inst = self.instance
        route = await inst.fetch_route(topic)
        queues = route.publish_queues(topic) if route is not None else []
        if queues:
            info = _PublishInfo(queues, False)
        else:
            # unknown topic: publish to the template's queues; the broker auto-creates it
            tmpl = await inst.fetch_route(self.options.create_topic_key)
            queues = (
                tmpl.publish_queues(topic, max_queue_nums=self.options.default_topic_queue_nums) if tmpl else []
            )
            if not queues:
                raise NoRouteError(topic)
            info = _PublishInfo(queues, True)
        inst.topics.add(topic)
        self._publish[topic] = info
        return info

    # ------------------------------------------------------------------ message preparation
    def _prepare(self, msg: Message, *, transactional: bool = False) -> _Prepared:
        if not isinstance(msg, Message):
            raise TypeError(f"send() takes an rmq.client.Message, got {type(msg).__name__}")
        props = msg.properties
        uniq = props.get(Prop.UNIQ_KEY)
        extra = ""
        if uniq is None:
            uniq = uniq_ids()()
            extra = f"UNIQ_KEY\x01{uniq}"
        body = msg.body
        sys_flag = 0
        opts = self.options
        if len(body) >= opts.compress_over:
            body = compress_body(body, opts.compress_level)
            sys_flag |= SysFlag.COMPRESSED
        if transactional:
            props = {k: v for k, v in props.items() if k != Prop.DELAY}
            props[Prop.TRAN_MSG] = "true"
            props[Prop.PGROUP] = self.group
            sys_flag |= SysFlag.TX_PREPARED
        if len(body) > opts.max_message_size:
            raise MessageTooLargeError(
                f"message body of {len(body)} bytes exceeds max_message_size {opts.max_message_size}"
            )
        ps = encode_properties(props) if props else ""
        if extra:
            ps = f"{ps}\x02{extra}" if ps else extra
        prepared = _Prepared(msg.topic, body, msg.flag, sys_flag, ps, uniq)
        if props.get("MSG_TYPE") == "reply":  # a reply goes back through the broker's reply processor
            prepared.code = RequestCode.SEND_REPLY_MESSAGE_V2
        if msg.topic.startswith("%RETRY%"):
            rt = props.get(Prop.RECONSUME_TIME)
            mrt = props.get(Prop.MAX_RECONSUME_TIMES)
            prepared.reconsume_times = int(rt) if rt else None
            prepared.max_reconsume_times = int(mrt) if mrt else None
        return prepared

    def _ext(self, p: _Prepared, mq: MessageQueue) -> dict[str, str]:
        k = SEND_V2
        ext = {
            k.producer_group: self.group,
            k.topic: p.topic,
            k.default_topic: self.options.create_topic_key,
            k.default_topic_queue_nums: str(self.options.default_topic_queue_nums),
            k.queue_id: str(mq.queue_id),
            k.sys_flag: str(p.sys_flag),
            k.born_timestamp: str(time.time_ns() // 1_000_000),
            k.flag: str(p.flag),
            k.properties: p.properties,
            k.reconsume_times: str(p.reconsume_times or 0),
            k.unit_mode: "false",
            k.batch: "true" if p.code == _SEND_BATCH else "false",
            k.broker_name: mq.broker_name,
        }
        if p.max_reconsume_times is not None:
            ext[k.max_reconsume_times] = str(p.max_reconsume_times)
        return ext

    # ------------------------------------------------------------------ sending
    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        selector: QueueSelector | None = None,
        sharding_key: Any = None,
        arg: Any = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send and wait for the broker's answer.

        Queue choice, first match wins: ``queue``; ``sharding_key`` (stable hash, same
        key → same queue: per-key order); ``selector(queues, msg, arg)``; the producer's
        selector; round robin with broker fault avoidance (the only mode that retries
        on another broker).
        """
        self._check_running()
        return await self._send(self._prepare(msg), queue, selector, sharding_key, arg, timeout,
                                self.options.retry_times)

    async def _send(
        self,
        p: _Prepared,
        queue: MessageQueue | None,
        selector: QueueSelector | None,
        sharding_key: Any,
        arg: Any,
        timeout: float | None,
        retries: int,
        first: tuple[float, MessageQueue, float, SendResult | BaseException | None] | None = None,
    ) -> SendResult:
        """``first``: the first attempt's (begin, queue, its start, outcome), made without a task (sendcb);
        outcome None: not made yet, to that queue."""
        timeout = self.options.send_timeout if timeout is None else timeout
        begin = time.monotonic() if first is None else first[0]
        if queue is not None:
            return await self._send_to(p, queue, timeout)
        info = await self._publish_info(p.topic)
        if sharding_key is not None:
            mq = self._hash_selector(info.queues, None, sharding_key)
            return await self._send_to(p, mq, timeout - (time.monotonic() - begin))
        sel = selector or self._selector
        if sel is not None:
            mq = sel(info.queues, p, arg)
            if not isinstance(mq, MessageQueue):
                raise TypeError(f"selector returned {mq!r}, not a MessageQueue")
            return await self._send_to(p, mq, timeout - (time.monotonic() - begin))
        last_broker: str | None = None
        last_exc: BaseException | None = None
        attempts = 1 + max(0, retries)
        fault = self._fault
        for attempt in range(attempts):
            outcome: SendResult | BaseException | None = None
            remaining = timeout - (time.monotonic() - begin)
            if first is not None:
                _, mq, t0, outcome = first
                first = None
            else:
                if remaining <= 0:
                    break
                mq = self._picker.pick(info.queues, last_broker)
                t0 = time.monotonic()
            try:
                if outcome is None:
                    result = await self._send_to(p, mq, remaining)
                elif isinstance(outcome, BaseException):
                    raise outcome
                else:
                    result = outcome
            except BrokerError as exc:
                if fault is not None:
                    fault.update(mq.broker_name, 0, failed=True)
                if exc.code not in RETRY_CODES:
                    raise
                last_exc, last_broker = exc, mq.broker_name
            except (RemotingError, OSError) as exc:
                if fault is not None:
                    fault.update(mq.broker_name, 0, failed=True)
                last_exc, last_broker = exc, mq.broker_name
            else:
                if fault is not None:
                    latency_ms = (time.monotonic() - t0) * 1000.0
                    if latency_ms >= 550.0 or fault.has_items:  # below 550 ms nothing is isolated
                        fault.update(mq.broker_name, latency_ms)
                if result.status is not SendStatus.SEND_OK and self.options.retry_another_broker_when_not_store_ok \
                        and attempt + 1 < attempts:
                    last_broker = mq.broker_name
                    continue
                return result
            if isinstance(last_exc, BrokerError) and last_exc.code == ResponseCode.TOPIC_NOT_EXIST:
                self._publish.pop(p.topic, None)
                info = await self._publish_info(p.topic)
        elapsed = time.monotonic() - begin
        raise SendError(
            f"send to topic {p.topic!r} failed after {attempt + 1} attempt(s) in {elapsed:.3f}s: {last_exc}"
        ) from last_exc

    async def _send_to(self, p: _Prepared, mq: MessageQueue, timeout: float) -> SendResult:
        if timeout <= 0:
            raise SendError(f"send to {mq} timed out before it started")
        inst = self.instance
        addr = inst.master_addr(mq.broker_name) or await inst.find_broker_addr(mq.broker_name, mq.topic)
        cmd = RemotingCommand.request(p.code, self._ext(p, mq), p.body)
        begin_ms = time.time_ns() // 1_000_000 if self._trace is not None else 0
        resp = await inst.remoting.invoke(addr, cmd, timeout)
        return self._answer(p, mq, addr, resp, begin_ms)

    def _answer(self, p: _Prepared, mq: MessageQueue, addr: str, resp: RemotingCommand, begin_ms: int) -> SendResult:
        """The SendResult of a send's answer (BrokerError when refused), traced."""
        if resp.code not in _STATUS:
            raise BrokerError(resp.code, resp.remark, f"send to {mq.topic}", addr)
        result = parse_send_response(resp, mq, p.uniq_id)
        if self._trace is not None:
            self._trace.on_send(self.group, p.topic, len(p.body), p.properties, addr, result, begin_ms)
        return result

    async def send_async(
        self,
        msg: Message,
        callback: SendCallback | None = None,
        *,
        queue: MessageQueue | None = None,
        sharding_key: Any = None,
        timeout: float | None = None,
    ) -> None:
        """Start a send and return at once; ``callback(result, error)`` runs when it completes.

        Exactly one of ``result``/``error`` is None. The callback may be a plain function
        or a coroutine function. At most ``max_async_in_flight`` sends are outstanding:
        beyond that this call waits (back-pressure instead of unbounded memory).
        """
        self._check_running()
        p = self._prepare(msg)
        if self._aio is not None:  # asyncio: a plain task and a counter, a fraction of anyio's per-send cost
            while self._aio_inflight >= self.options.max_async_in_flight:
                fut = self._aio_slot = self._aio_slot or self._aio.create_future()
                await fut
            self._aio_inflight += 1
            AioSend(self, p, callback, queue, sharding_key, timeout).start()
            return
        await self._async_slots.acquire()
        assert self._tg is not None
        self._tg.start_soon(self._async_send, p, callback, queue, sharding_key, timeout)

    def _aio_task(self, coro: Coroutine[Any, Any, None]) -> None:
        assert self._aio is not None
        task = self._aio.create_task(coro)
        self._aio_tasks.add(task)
        task.add_done_callback(self._aio_tasks.discard)

    def _aio_release(self) -> None:
        self._aio_inflight -= 1
        fut, self._aio_slot = self._aio_slot, None
        if fut is not None and not fut.done():
            fut.set_result(None)
        if not self._aio_inflight:
            fut, self._aio_idle = self._aio_idle, None
            if fut is not None and not fut.done():
                fut.set_result(None)

    async def _async_send(
        self, p: _Prepared, callback: SendCallback | None, queue: MessageQueue | None, key: Any, timeout: float | None,
        first: tuple[float, MessageQueue, float, SendResult | BaseException | None] | None = None,
    ) -> None:
        """A send_async in a task: from the start, or the retries after a first attempt made without one."""
        try:
            try:
                if first is not None and (queue is not None or key is not None):  # no retry for these
                    outcome = first[3]
                    if isinstance(outcome, BaseException):
                        raise outcome
                    assert outcome is not None  # only a send that may retry hands on an attempt not made
                    result = outcome
                else:
                    result = await self._send(p, queue, None, key, None, timeout, self.options.retry_times_async,
                                              first)
            except Exception as exc:
                if callback is not None:
                    await _call(callback, None, exc)
                else:
                    log.warning("async send to %s failed: %s", p.topic, exc)
                return
            if callback is not None:
                await _call(callback, result, None)
        except Exception:
            log.exception("send callback failed")
        finally:
            if self._aio is not None:
                self._aio_release()
            else:
                self._async_slots.release()

    async def send_oneway(
        self, msg: Message, *, queue: MessageQueue | None = None, sharding_key: Any = None
    ) -> None:
        """Fire and forget: no answer, no retry (fastest, may lose messages)."""
        self._check_running()
        p = self._prepare(msg)
        if queue is None:
            info = await self._publish_info(p.topic)
            if sharding_key is not None:
                queue = self._hash_selector(info.queues, None, sharding_key)
            elif self._selector is not None:
                queue = self._selector(info.queues, p, None)
            else:
                queue = self._picker.pick(info.queues)
        inst = self.instance
        addr = inst.master_addr(queue.broker_name) or await inst.find_broker_addr(queue.broker_name, queue.topic)
        await inst.oneway(addr, p.code, self._ext(p, queue), p.body)

    async def request(self, msg: Message, timeout: float = 3.0) -> MessageExt:
        """Send ``msg`` and wait up to ``timeout`` seconds for its reply (RocketMQ's request-reply).

        The message carries CORRELATION_ID, REPLY_TO_CLIENT (this client) and TTL; a consumer of it
        answers with ``create_reply_message`` + ``send``, and the broker pushes the reply here.
        RequestTimeoutError when none comes; SendError when the request itself is not stored."""
        self._check_running()
        correlation = uuid.uuid4().hex
        msg.properties.update({"CORRELATION_ID": correlation, "REPLY_TO_CLIENT": self.instance.client_id,
                               "TTL": str(int(timeout * 1000))})
        waiter = anyio.Event()
        self._replies[correlation] = waiter
        try:
            if msg.topic not in self._publish:  # as Java: a first route, then every broker learns this client
                await self._publish_info(msg.topic)
                await self.instance.send_heartbeat()
            await self.send(msg, timeout=timeout)
            with anyio.move_on_after(timeout):
                await waiter.wait()
            reply = self._replies.get(correlation)
            if not isinstance(reply, MessageExt):
                raise RequestTimeoutError(
                    f"send request message to {msg.topic} OK, but wait reply message timeout, {int(timeout * 1000)} ms.")
            return reply
        finally:
            self._replies.pop(correlation, None)

    async def _on_reply(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        """PUSH_REPLY_MESSAGE_TO_CLIENT: complete the request waiting for this correlation id."""
        ext = cmd.ext
        props = decode_properties(ext.get("properties") or "")
        body = cmd.body or b""
        sys_flag = int(ext.get("sysFlag") or 0)
        if sys_flag & SysFlag.COMPRESSED:
            body = decompress_body(body, sys_flag=sys_flag)
        props["ARRIVE_TIME"] = str(time.time_ns() // 1_000_000)
        reply = MessageExt(topic=ext.get("topic", ""), body=body, flag=int(ext.get("flag") or 0), properties=props,
                           sys_flag=sys_flag, queue_id=int(ext.get("queueId") or 0),
                           born_timestamp=int(ext.get("bornTimestamp") or 0), born_host=ext.get("bornHost", ""),
                           store_timestamp=int(ext.get("storeTimestamp") or 0), store_host=ext.get("storeHost", ""))
        waiter = self._replies.get(props.get("CORRELATION_ID", ""))
        if isinstance(waiter, anyio.Event):
            self._replies[props["CORRELATION_ID"]] = reply
            waiter.set()
        else:
            log.info("reply for an unknown or expired request %s dropped", props.get("CORRELATION_ID"))
        return cmd.response(ResponseCode.SUCCESS)

    async def recall(self, topic: str, recall_handle: str, *, timeout: float | None = None) -> str:
        """Cancel a timer message not yet delivered, by the ``recall_handle`` its send returned.

        RECALL_MESSAGE (RocketMQ 5.3.2+) to the broker named in the handle; the broker must have
        ``recallMessageEnable``. Returns the message's id (UNIQ_KEY); BrokerError when refused
        (forbidden, unknown topic, a bad or expired handle)."""
        self._check_running()
        try:
            parts = base64.urlsafe_b64decode(recall_handle.encode("ascii")).decode("utf-8").split(" ")
        except (ValueError, UnicodeError) as e:
            raise ValueError(f"not a recall handle: {e}") from None
        if len(parts) < 5 or parts[0] != "v1":
            raise ValueError("not a recall handle (expected v1 <topic> <broker> <time> <id>)")
        inst = self.instance
        addr = inst.master_addr(parts[2]) or await inst.find_broker_addr(parts[2], topic)
        cmd = RemotingCommand.request(RequestCode.RECALL_MESSAGE, {
            "producerGroup": self.group, "topic": topic, "recallHandle": recall_handle})
        resp = await inst.remoting.invoke(addr, cmd, self.options.send_timeout if timeout is None else timeout)
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark, f"recall in {topic}", addr)
        return resp.ext.get("msgId", parts[4])

    async def wait_async_sends(self) -> None:
        """Wait until every ``send_async`` started so far has completed."""
        if self._aio is not None:
            while self._aio_inflight:
                fut = self._aio_idle = self._aio_idle or self._aio.create_future()
                await asyncio.shield(fut)  # a waiter cancelled leaves the others waiting
            return
        n = self.options.max_async_in_flight
        for _ in range(n):
            await self._async_slots.acquire()
        for _ in range(n):
            self._async_slots.release()

    # ------------------------------------------------------------------ batches
    def _batch_chunks(self, msgs: Sequence[Message]) -> list[tuple[list[str], bytes]]:
        """Encode members once (§4.9 layout) and cut into bodies of at most ``batch_max_bytes``."""
        if not msgs:
            raise ValueError("send_batch needs at least one message")
        topic = msgs[0].topic
        if topic.startswith("%RETRY%"):
            raise ValueError("batches cannot be sent to retry topics")
        chunks: list[tuple[list[str], bytes]] = []
        parts: list[bytes] = []
        ids: list[str] = []
        size = 0
        limit = self.options.batch_max_bytes
        head = _BATCH_HEAD.pack
        plen = _U16.pack
        new_id = uniq_ids()
        for m in msgs:
            if m.topic != topic:
                raise ValueError(f"a batch goes to one topic; got {topic!r} and {m.topic!r}")
            props = m.properties
            if Prop.DELAY in props:
                raise ValueError("batched messages cannot have a delay level")
            uniq = props.get(Prop.UNIQ_KEY)
            if uniq is None:
                uniq = new_id()
                ps = encode_properties(props)
                ps = f"{ps}\x02UNIQ_KEY\x01{uniq}" if ps else f"UNIQ_KEY\x01{uniq}"
            else:
                ps = encode_properties(props)
            pb = ps.encode()
            body = m.body
            item = head(22 + len(body) + len(pb), 0, 0, m.flag, len(body)) + body + plen(len(pb)) + pb
            if len(item) > limit:
                raise MessageTooLargeError(f"one batched message of {len(item)} bytes exceeds {limit}")
            if parts and size + len(item) > limit:
                chunks.append((ids, b"".join(parts)))
                parts, ids, size = [], [], 0
            parts.append(item)
            ids.append(uniq)
            size += len(item)
        chunks.append((ids, b"".join(parts)))
        return chunks

    async def send_batch(
        self,
        msgs: Sequence[Message],
        *,
        queue: MessageQueue | None = None,
        sharding_key: Any = None,
        timeout: float | None = None,
    ) -> list[SendResult]:
        """Send messages of one topic as batches (code 320), split to stay under 4 MiB each.

        Returns one SendResult per batch sent (usually one); ``msg_id`` joins the
        members' ids with commas and ``queue_offset`` is the first member's offset.
        """
        self._check_running()
        topic = msgs[0].topic if msgs else ""
        results = []
        for ids, body in self._batch_chunks(msgs):
            p = _Prepared(topic, body, 0, 0, "", ",".join(ids), code=_SEND_BATCH)
            results.append(
                await self._send(p, queue, None, sharding_key, None, timeout, self.options.retry_times)
            )
        return results

    # ------------------------------------------------------------------ internal: consumer retries
    async def send_raw(self, p: _Prepared, timeout: float | None = None) -> SendResult:
        return await self._send(p, None, None, None, None, timeout, self.options.retry_times)
