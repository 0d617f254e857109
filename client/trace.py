"""Message trace, as RocketMQ 4.9's client writes it (``enable_trace=True`` on a producer or consumer).

Records go in RocketMQ's TraceDataEncoder text format so its tools (the dashboard, ``mqadmin
queryMsgTraceById``) read them: one record per context, fields split by ``\\x01``, records
ended by ``\\x02``. ``Pub`` is written after each answered send; ``SubBefore``/``SubAfter``
around each listener call. A background task batches records per trace topic (AsyncTraceDispatcher:
one message when ~118 KB is gathered or the oldest record waited 500 ms) and sends them through an
inner producer, keyed by the traced messages' ids and keys so the broker's index finds them.
Tracing is best effort: a full queue drops records and a failed trace send is only logged; the
traced send or consume never sees either.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from rmq.client.message import Message
from rmq.client.options import ClientOptions
from rmq.protocol.common import Prop, decode_properties
from rmq.protocol.names import TRACE_TOPIC

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from rmq.client.message import SendResult
    from rmq.client.producer import Producer
    from rmq.protocol.message import MessageExt

log = logging.getLogger("rmq.client.trace")

__all__ = ["CONTENT_SPLITOR", "FIELD_SPLITOR", "TraceContext", "TraceDispatcher", "decode_traces", "encode_trace"]

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
GROUP_NAME_PREFIX = "_INNER_TRACE_PRODUCER"
QUEUE_SIZE = 2048  # contexts waiting to be batched; more are dropped
MAX_MSG_SIZE = 128_000  # the inner producer's maxMessageSize; a batch is sent 10 KB below it
WAIT_THRESHOLD = 0.5  # seconds the oldest record of a batch may wait
POLL = 0.1

# MessageType ordinals (Pub) and ConsumeReturnType ordinals (SubAfter contextCode)
NORMAL_MSG, TRANS_MSG_HALF, TRANS_MSG_COMMIT, DELAY_MSG = 0, 1, 2, 3
CONSUME_SUCCESS, CONSUME_FAILED = 0, 4


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _s(value: object) -> str:
    """Java's StringBuilder.append: null is written "null", booleans lower case."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@attrs.define
class TraceBean:
    topic: str = ""
    msg_id: str = ""
    offset_msg_id: str = ""
    tags: str | None = None
    keys: str | None = None
    store_host: str = ""
    body_length: int = 0
    msg_type: int = NORMAL_MSG
    retry_times: int = 0


@attrs.define
class TraceContext:
    trace_type: str  # Pub | SubBefore | SubAfter
    group: str
    beans: list[TraceBean]
    timestamp: int = attrs.field(factory=_now_ms)
    region_id: str | None = None
    request_id: str = ""
    cost_time: int = 0
    success: bool = True
    context_code: int = 0


def encode_trace(ctx: TraceContext) -> tuple[str, list[str]]:
    """(record text, index keys: each bean's msg id and keys), as TraceDataEncoder.encoderFromContextBean."""
    c, f = CONTENT_SPLITOR, FIELD_SPLITOR
    parts: list[str] = []
    if ctx.trace_type == "Pub":
        b = ctx.beans[0]
        parts.append(c.join(_s(v) for v in (
            "Pub", ctx.timestamp, ctx.region_id, ctx.group, b.topic, b.msg_id, b.tags, b.keys, b.store_host,
            b.body_length, ctx.cost_time, b.msg_type, b.offset_msg_id, ctx.success)) + f)
    elif ctx.trace_type == "SubBefore":
        for b in ctx.beans:
            parts.append(c.join(_s(v) for v in (
                "SubBefore", ctx.timestamp, ctx.region_id, ctx.group, ctx.request_id, b.msg_id, b.retry_times,
                b.keys)) + f)
    elif ctx.trace_type == "SubAfter":
        for b in ctx.beans:
            parts.append(c.join(_s(v) for v in (
                "SubAfter", ctx.request_id, b.msg_id, ctx.cost_time, ctx.success, b.keys, ctx.context_code,
                ctx.timestamp, ctx.group)) + f)
    else:
        raise ValueError(f"unknown trace type {ctx.trace_type!r}")
    keys: list[str] = []
    for b in ctx.beans:
        keys.append(b.msg_id)
        if b.keys:
            keys.extend(k for k in b.keys.split(" ") if k)
    return "".join(parts), keys


_FIELDS = {
    "Pub": ("timestamp", "regionId", "groupName", "topic", "msgId", "tags", "keys", "storeHost", "bodyLength",
            "costTime", "msgType", "offsetMsgId", "success"),
    "SubBefore": ("timestamp", "regionId", "groupName", "requestId", "msgId", "retryTimes", "keys"),
    "SubAfter": ("requestId", "msgId", "costTime", "success", "keys", "contextCode", "timestamp", "groupName"),
}


def decode_traces(data: str | bytes) -> list[dict[str, str]]:
    """The records of one trace message body, each a dict of RocketMQ's field names plus ``traceType``
    (TraceDataEncoder.decoderFromTraceDataString, keeping the text as written)."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    out = []
    for record in text.split(FIELD_SPLITOR):
        if not record:
            continue
        values = record.split(CONTENT_SPLITOR)
        names = _FIELDS.get(values[0])
        if names is None:
            continue
        out.append({"traceType": values[0], **dict(zip(names, values[1:], strict=False))})
    return out


async def start_tracing(client: Any, group: str) -> TraceDispatcher | None:
    """The dispatcher of a started producer or consumer with ``enable_trace``, running in its task
    group; None (tracing off, logged) if it cannot start, which never stops the client itself."""
    opts = client.options
    # the connection settings (and whatever else clients share) carry over, as Java hands its RPC hook on
    shared = {f.name: getattr(opts, f.name) for f in attrs.fields(ClientOptions)
              if f.name not in ("instance_name", "enable_trace", "trace_topic")}
    try:
        tracer = TraceDispatcher(group, client._namesrv_addr, opts.trace_topic, client._kernel, **shared)
        await tracer.start(client._tg)
    except Exception as exc:
        log.warning("%s: message trace not started: %s", group, exc)
        return None
    return tracer


def _guarded(fn: Any) -> Any:
    """A hook that logs its own failure instead of raising into a send or a consume."""

    def hook(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception:
            log.warning("message trace hook %s failed", fn.__name__, exc_info=True)
            return None

    hook.__name__ = fn.__name__
    hook.__doc__ = fn.__doc__
    return hook


class _Segment:
    """Records bound for one trace topic, not yet sent."""

    def __init__(self) -> None:
        self.data: list[str] = []
        self.keys: dict[str, None] = {}  # insertion-ordered set
        self.size = 0
        self.first = 0.0

    def add(self, text: str, keys: Sequence[str]) -> None:
        if not self.data:
            self.first = time.monotonic()
        self.data.append(text)
        self.keys.update(dict.fromkeys(keys))
        self.size += len(text)


class TraceDispatcher:
    """Batches trace contexts and sends them to the trace topic with an inner producer (AsyncTraceDispatcher)."""

    def __init__(self, group: str, namesrv_addr: Any, trace_topic: str = "", kernel: Any = None,
                 **producer_options: Any) -> None:
        from rmq.client.producer import Producer  # the producer module hooks into this one

        self.trace_topic = trace_topic or TRACE_TOPIC
        self.producer: Producer = Producer(f"{GROUP_NAME_PREFIX}-{group}", namesrv_addr, kernel=kernel,
                                           max_message_size=MAX_MSG_SIZE, **producer_options)
        self._queue: deque[TraceContext] = deque()
        self._wake = anyio.Event()
        self._closed = False
        self._done = anyio.Event()
        self.dropped = 0  # contexts lost to a full queue
        self.sent = 0  # trace messages written

    async def start(self, tg: TaskGroup) -> None:
        await self.producer.start()
        tg.start_soon(self._run)

    def append(self, ctx: TraceContext) -> None:
        if self._closed or len(self._queue) >= QUEUE_SIZE:
            self.dropped += 1
            return
        self._queue.append(ctx)
        self._wake.set()

    async def aclose(self, timeout: float = 5.0) -> None:
        """Send what is queued (bounded by ``timeout``), then stop the inner producer."""
        self._closed = True
        self._wake.set()
        with anyio.move_on_after(timeout, shield=True):
            await self._done.wait()
        await self.producer.shutdown()

    async def _run(self) -> None:
        segments: dict[str, _Segment] = {}
        try:
            while True:
                while self._queue:
                    ctx = self._queue.popleft()
                    if not ctx.beans:
                        continue
                    text, keys = encode_trace(ctx)
                    seg = segments.setdefault(self.trace_topic, _Segment())
                    seg.add(text, keys)
                    if seg.size >= MAX_MSG_SIZE - 10_000:
                        await self._flush(self.trace_topic, segments.pop(self.trace_topic))
                if self._closed:
                    break
                now = time.monotonic()
                for topic in [t for t, seg in segments.items() if now - seg.first >= WAIT_THRESHOLD]:
                    await self._flush(topic, segments.pop(topic))
                with anyio.move_on_after(POLL):
                    await self._wake.wait()
                self._wake = anyio.Event()  # whatever arrived meanwhile is in the queue, drained next
            for topic, seg in segments.items():
                await self._flush(topic, seg)
        finally:
            self._done.set()

    async def _flush(self, topic: str, seg: _Segment) -> None:
        msg = Message(topic, "".join(seg.data).encode("utf-8"), keys=" ".join(seg.keys))
        try:
            await self.producer.send(msg)
            self.sent += 1
        except Exception as exc:  # tracing never fails the traced work
            log.warning("trace send to %s failed (%d records dropped): %s", topic, len(seg.data), exc)

    # ------------------------------------------------------------------ hooks (SendMessageTraceHookImpl, ConsumeMessageTraceHookImpl)

    @_guarded
    def on_send(self, group: str, topic: str, body_length: int, properties: str, store_host: str,
                result: SendResult, begin_ms: int) -> None:
        """A Pub record for an answered send (brokers with traceOn=false are not traced, as RocketMQ)."""
        if topic.startswith(self.trace_topic) or result.region_id is None or not result.trace_on:
            return
        props = decode_properties(properties) if properties else {}
        msg_type = NORMAL_MSG
        if props.get(Prop.TRAN_MSG) == "true":
            msg_type = TRANS_MSG_HALF
        elif props.get(Prop.DELAY) not in (None, "", "0"):
            msg_type = DELAY_MSG
        bean = TraceBean(topic=topic, msg_id=result.msg_id, offset_msg_id=result.offset_msg_id,
                         tags=props.get(Prop.TAGS), keys=props.get(Prop.KEYS), store_host=store_host,
                         body_length=body_length, msg_type=msg_type)
        self.append(TraceContext("Pub", group, [bean], timestamp=begin_ms, region_id=result.region_id,
                                 cost_time=_now_ms() - begin_ms, success=result.ok))

    @_guarded
    def before_consume(self, group: str, msgs: Sequence[MessageExt], request_id: str) -> TraceContext | None:
        beans, region = [], None
        for m in msgs:
            if m.properties.get(Prop.TRACE_ON) == "false":
                continue
            region = m.properties.get(Prop.MSG_REGION)
            beans.append(TraceBean(topic=m.topic, msg_id=m.msg_id, tags=m.tags, keys=m.keys,
                                   body_length=m.store_size, retry_times=m.reconsume_times))
        if not beans:
            return None
        ctx = TraceContext("SubBefore", group, beans, region_id=region, request_id=request_id)
        self.append(ctx)
        return ctx

    @_guarded
    def after_consume(self, before: TraceContext | None, count: int, success: bool) -> None:
        if before is None:
            return
        cost = math.floor((_now_ms() - before.timestamp) / max(count, 1))
        self.append(TraceContext("SubAfter", before.group, before.beans, region_id=before.region_id,
                                 request_id=before.request_id, cost_time=cost, success=success,
                                 context_code=CONSUME_SUCCESS if success else CONSUME_FAILED))
