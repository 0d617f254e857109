"""User-facing value types: the message you send, and what sends, pulls and listeners return.

Consumed messages are ``rmq.protocol.message.MessageExt`` (re-exported here): topic,
body, tags, keys, properties, msg_id, queue_id, queue_offset, reconsume_times, ...
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from rmq.kernel.model import MessageQueue
from rmq.protocol.common import Prop
from rmq.protocol.message import MessageExt

__all__ = [
    "ConsumeResult",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageQueue",
    "PullResult",
    "PullStatus",
    "SendResult",
    "SendStatus",
    "create_reply_message",
]

_TIMER = ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")
_RESERVED = frozenset((Prop.TAGS, Prop.KEYS, Prop.DELAY, Prop.UNIQ_KEY, Prop.TRAN_MSG, Prop.PGROUP, *_TIMER,
                       "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY"))


class Message:
    """A message to send.

    ``body`` may be ``str`` (UTF-8 encoded) or bytes; ``keys`` a string or a list of
    strings (stored space separated, each one indexed by the broker); ``delay_level``
    1..18 maps to the broker's ``1s 5s 10s 30s 1m ... 2h`` levels. ``deliver_at`` (epoch
    ms, or an aware ``datetime``) and ``delay`` (seconds, or a ``timedelta``) make a timer
    message (RocketMQ 5's ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_MS``), delivered no earlier
    than asked, within the broker's ``timerPrecisionMs``.
    """

    __slots__ = ("topic", "body", "flag", "properties")

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | memoryview | str,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        delay_level: int = 0,
        flag: int = 0,
        deliver_at: int | datetime.datetime | None = None,
        delay: float | datetime.timedelta | None = None,
    ) -> None:
        if not topic:
            raise ValueError("a message needs a topic")
        self.topic = topic
        self.body: bytes = body.encode() if isinstance(body, str) else bytes(body)
        self.flag = flag
        props: dict[str, str] = {}
        if properties:
            for k, v in properties.items():
                if not k or v is None or v == "":
                    raise ValueError(f"property {k!r}: names and values must be non-empty strings")
                if "\x01" in k or "\x02" in k or "\x01" in str(v) or "\x02" in str(v):
                    raise ValueError(f"property {k!r} contains a \\x01/\\x02 separator")
                props[k] = str(v)
        self.properties = props
        if tags:
            self.tags = tags
        if keys:
            self.keys = keys  # type: ignore[assignment]
        if delay_level:
            self.delay_level = delay_level
        if deliver_at is not None:
            self.deliver_at = deliver_at  # type: ignore[assignment]
        if delay is not None:
            self.delay = delay  # type: ignore[assignment]

    # -- system properties as attributes --------------------------------------------------
    @property
    def tags(self) -> str | None:
        return self.properties.get(Prop.TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        if value:
            self.properties[Prop.TAGS] = value
        else:
            self.properties.pop(Prop.TAGS, None)

    @property
    def keys(self) -> str | None:
        """Space-separated keys as stored (``KEYS`` property)."""
        return self.properties.get(Prop.KEYS)

    @keys.setter
    def keys(self, value: str | Iterable[str] | None) -> None:
        if not value:
            self.properties.pop(Prop.KEYS, None)
            return
        joined = value if isinstance(value, str) else " ".join(k for k in value if k)
        if joined:
            self.properties[Prop.KEYS] = joined

    @property
    def delay_level(self) -> int:
        return int(self.properties.get(Prop.DELAY, "0"))

    @delay_level.setter
    def delay_level(self, level: int) -> None:
        if level < 0:
            raise ValueError("delay_level must be >= 0")
        if level:
            self.properties[Prop.DELAY] = str(int(level))
        else:
            self.properties.pop(Prop.DELAY, None)

    @property
    def deliver_at(self) -> int | None:
        """Epoch ms the message is due (``TIMER_DELIVER_MS``), None when not set."""
        v = self.properties.get("TIMER_DELIVER_MS")
        return int(v) if v else None

    @deliver_at.setter
    def deliver_at(self, when: int | datetime.datetime | None) -> None:
        for name in _TIMER:
            self.properties.pop(name, None)
        if when is None:
            return
        if isinstance(when, datetime.datetime):
            if when.tzinfo is None:
                raise ValueError("deliver_at needs an aware datetime (with tzinfo)")
            when = int(when.timestamp() * 1000)
        if isinstance(when, bool) or not isinstance(when, int) or when < 0:
            raise ValueError(f"deliver_at must be epoch milliseconds >= 0 or a datetime, not {when!r}")
        self.properties["TIMER_DELIVER_MS"] = str(when)

    @property
    def delay(self) -> float | None:
        """Seconds after the broker receives the message that it is due (``TIMER_DELAY_MS``/``_SEC``)."""
        ms = self.properties.get("TIMER_DELAY_MS")
        if ms:
            return int(ms) / 1000
        sec = self.properties.get("TIMER_DELAY_SEC")
        return float(sec) if sec else None

    @delay.setter
    def delay(self, seconds: float | datetime.timedelta | None) -> None:
        for name in _TIMER:
            self.properties.pop(name, None)
        if seconds is None:
            return
        if isinstance(seconds, datetime.timedelta):
            seconds = seconds.total_seconds()
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise ValueError(f"delay must be seconds >= 0 or a timedelta, not {seconds!r}")
        self.properties["TIMER_DELAY_MS"] = str(round(seconds * 1000))

    def put_property(self, name: str, value: str) -> None:
        if name in _RESERVED:
            raise ValueError(f"{name} is a system property; use the attribute instead")
        self.properties[name] = value

    def __repr__(self) -> str:
        return f"<Message topic={self.topic!r} tags={self.tags!r} keys={self.keys!r} body={len(self.body)}B>"


def create_reply_message(request: Any, body: bytes | str) -> Message:
    """The reply to a request message a consumer received (RocketMQ's ``MessageUtil.createReplyMessage``):
    to ``<CLUSTER>_REPLY_TOPIC``, carrying the request's CORRELATION_ID, REPLY_TO_CLIENT and TTL; send it
    with any Producer. ValueError when the request lacks CLUSTER (it was not stored by a broker)."""
    props = request.properties
    cluster = props.get("CLUSTER")
    if not cluster:
        raise ValueError("create reply message fail, requestMessage error, property[CLUSTER] is null.")
    reply = Message(f"{cluster}_REPLY_TOPIC", body)
    reply.properties.update({"MSG_TYPE": "reply", "CORRELATION_ID": props.get("CORRELATION_ID", ""),
                             "REPLY_TO_CLIENT": props.get("REPLY_TO_CLIENT", ""), "TTL": props.get("TTL", "3000")})
    return reply


class SendStatus(enum.Enum):
    """Outcome of a stored send; anything but SEND_OK means stored but not to the requested durability."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@attrs.frozen(slots=True)
class SendResult:
    """``msg_id`` is the client id (UNIQ_KEY; comma-joined for a batch), ``offset_msg_id`` the broker's."""

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    transaction_id: str | None = None
    region_id: str | None = None
    recall_handle: str | None = None  # a timer message's handle for Producer.recall (RocketMQ 5.3.2+)
    trace_on: bool = True  # the broker's traceOn (TRACE_ON): False means do not trace this send

    @property
    def msg_ids(self) -> list[str]:
        return self.msg_id.split(",") if self.msg_id else []

    @property
    def ok(self) -> bool:
        return self.status is SendStatus.SEND_OK


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@attrs.frozen(slots=True)
class PullResult:
    """One pull: continue from ``next_begin_offset`` whatever the status."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = attrs.field(factory=list)
    suggest_broker_id: int = 0


class ConsumeResult(enum.Enum):
    """What a listener may return; returning None (or anything else) means success."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    # orderly listeners: hold the queue a moment and retry the same messages
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class LocalTransactionState(enum.Enum):
    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"  # RocketMQ's spelling; the broker asks again later

    @classmethod
    def coerce(cls, value: Any) -> LocalTransactionState:
        """Accept the enum, its name, or a bool (True = commit, False = rollback); None = unknown."""
        if isinstance(value, cls):
            return value
        if value is True:
            return cls.COMMIT_MESSAGE
        if value is False:
            return cls.ROLLBACK_MESSAGE
        if value is None:
            return cls.UNKNOW
        if isinstance(value, str):
            v = value.upper()
            for m in cls:
                if m.name == v or m.name.startswith(v):
                    return m
            if v == "UNKNOWN":
                return cls.UNKNOW
        raise ValueError(f"not a transaction state: {value!r}")
