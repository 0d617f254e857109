"""Building commitlog records, shared by every store that writes RocketMQ's record bytes.

:class:`RecordWriter` validates a :class:`MessageRecord` and packs it with the precompiled
structs of :mod:`rmq.protocol.record` plus slice assignments into a caller's buffer, so a
store builds a record (or a whole batch) in a reusable buffer and copies it once. The
``mmap`` and ``memory`` stores both use it, which is why it lives here and not in either
plugin: both refuse the same inputs with the same statuses and write the same bytes.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from rmq.kernel.model import MessageRecord, PutStatus
from rmq.protocol.common import (
    MAGIC_MESSAGE,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    Prop,
    SysFlag,
    decode_properties,
    tags_code,
)
from rmq.protocol.message import host_bytes
from rmq.protocol.names import validate_topic
from rmq.protocol.record import HEADERS

if TYPE_CHECKING:
    from rmq.kernel import CommitLogDispatcher, FlushPolicy, ForcedCleanHook
    from rmq.roles import BrokerConfig

__all__ = [
    "SCHEDULE_TOPIC",
    "RecordError",
    "RecordWriter",
    "WriterAttach",
    "default_store_host",
    "delay_tags_code",
    "message_tags_code",
    "record_properties",
]

SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
HOST_V6_EXTRA: Final = 12
MASK31: Final = 0x7FFFFFFF
_I32: Final = struct.Struct(">i")
_H: Final = struct.Struct(">h")


def default_store_host(config: BrokerConfig) -> bytes:
    """STOREHOST of a store nobody attached one to: ``brokerIP1`` (else loopback) and ``listenPort``."""
    return host_bytes(config.brokerIP1 or "127.0.0.1", config.listenPort)


class RecordError(ValueError):
    """An input a store must refuse; ``status`` is the put status to report."""

    def __init__(self, status: PutStatus, remark: str) -> None:
        super().__init__(remark)
        self.status = status
        self.remark = remark


def delay_tags_code(store_ts: int, props: dict[str, str], delay_levels: Sequence[int]) -> int:
    """CQ tagsCode of a ``SCHEDULE_TOPIC_XXXX`` message: its deliver time (reference §2.2)."""
    try:
        level = int(props.get(Prop.DELAY, "0"))
    except ValueError:
        level = 0
    if level <= 0 or not delay_levels:
        return store_ts + 1000
    level = min(level, len(delay_levels))
    return store_ts + delay_levels[level - 1]


def message_tags_code(topic: str, props: dict[str, str], store_ts: int, delay_levels: Sequence[int]) -> int:
    if topic == SCHEDULE_TOPIC and Prop.DELAY in props:
        return delay_tags_code(store_ts, props, delay_levels)
    return tags_code(props.get(Prop.TAGS))


class RecordWriter:
    """Validates and packs records. One per store; keeps per-topic caches (topics repeat)."""

    def __init__(self, max_message_size: int, store_host: bytes) -> None:
        self.max_message_size = max_message_size
        self._topics: dict[str, bytes] = {}
        self.store_host = store_host

    @property
    def store_host(self) -> bytes:
        return self._store_host

    @store_host.setter
    def store_host(self, value: bytes) -> None:
        if len(value) not in (8, 20):
            raise ValueError(f"store_host must be 8 (IPv4) or 20 (IPv6) bytes, got {len(value)}")
        self._store_host = bytes(value)
        self._store_v6 = SysFlag.STOREHOST_V6 if len(value) == 20 else 0
        self.head8 = HEADERS[(8, len(value))]  # the common case (IPv4 producer), for the inlined put path

    def topic_prefix(self, topic: str) -> bytes:
        """``TOPICLENGTH + TOPIC`` bytes, validated once per topic."""
        tp = self._topics.get(topic)
        if tp is None:
            tb = topic.encode("utf-8")
            if not tb or len(tb) > MAX_TOPIC_BYTES:
                raise RecordError(
                    PutStatus.MESSAGE_ILLEGAL, f"topic length {len(tb)} bytes not in 1..{MAX_TOPIC_BYTES}"
                )
            bad = validate_topic(topic)  # it names a directory: RocketMQ's rule, before any side effect
            if bad is not None:
                raise RecordError(PutStatus.MESSAGE_ILLEGAL, bad)
            if len(self._topics) > 100_000:
                self._topics.clear()
            tp = self._topics[topic] = bytes((len(tb),)) + tb
        return tp

    def measure(self, msg: MessageRecord) -> tuple[bytes, bytes, int, int, Any]:
        """Validate ``msg``: (topic prefix, properties bytes, sysflag, record length, header struct)."""
        body_len = len(msg.body)
        if body_len > self.max_message_size:
            raise RecordError(
                PutStatus.MESSAGE_ILLEGAL,
                f"body {body_len} bytes exceeds maxMessageSize {self.max_message_size}",
            )
        tp = self.topic_prefix(msg.topic)
        props = msg.properties
        pb = props.encode("utf-8") if props else b""
        if len(pb) > MAX_PROPERTIES_BYTES:
            raise RecordError(
                PutStatus.PROPERTIES_SIZE_EXCEEDED,
                f"properties {len(pb)} bytes exceed {MAX_PROPERTIES_BYTES}",
            )
        born = msg.born_host
        bl = len(born)
        if bl == 8:
            sys_flag = (msg.sys_flag & ~0x30) | self._store_v6
        elif bl == 20:
            sys_flag = (msg.sys_flag & ~0x30) | self._store_v6 | SysFlag.BORNHOST_V6
        else:
            raise RecordError(PutStatus.MESSAGE_ILLEGAL, f"born_host must be 8 or 20 bytes, got {bl}")
        head = HEADERS[(bl, len(self._store_host))]
        total = head.size + body_len + len(tp) + 2 + len(pb)
        return tp, pb, sys_flag, total, head

    def pack(
        self,
        buf: bytearray | memoryview,
        pos: int,
        msg: MessageRecord,
        measured: tuple[bytes, bytes, int, int, Any],
        queue_offset: int,
        phys_offset: int,
        store_ts: int,
    ) -> int:
        """Pack a measured record at ``buf[pos:]``; returns the end position."""
        tp, pb, sys_flag, total, head = measured
        body = msg.body
        body_len = len(body)
        head.pack_into(
            buf,
            pos,
            total,
            MAGIC_MESSAGE,
            zlib.crc32(body) & MASK31,
            msg.queue_id,
            msg.flag,
            queue_offset,
            phys_offset,
            sys_flag,
            msg.born_timestamp,
            msg.born_host,
            store_ts,
            self._store_host,
            msg.reconsume_times,
            msg.prepared_tx_offset,
            body_len,
        )
        p = pos + head.size
        e = p + body_len
        buf[p:e] = body
        p = e + len(tp)
        buf[e:p] = tp
        _H.pack_into(buf, p, len(pb))
        p += 2
        e = p + len(pb)
        buf[p:e] = pb
        return e


def record_properties(buf: Any, pos: int) -> tuple[str, dict[str, str]]:
    """(topic, properties) of the record at ``pos`` (used by filters and key lookups).

    Malformed bytes raise :class:`RecordError`, never another exception.
    """
    try:
        return _record_properties(buf, pos)
    except (struct.error, IndexError, ValueError) as e:
        raise RecordError(PutStatus.UNKNOWN_ERROR, f"malformed record at {pos}: {e}") from None


def _record_properties(buf: Any, pos: int) -> tuple[str, dict[str, str]]:
    (sys_flag,) = _I32.unpack_from(buf, pos + 36)
    p = pos + 72
    if sys_flag & SysFlag.BORNHOST_V6:
        p += HOST_V6_EXTRA
    if sys_flag & SysFlag.STOREHOST_V6:
        p += HOST_V6_EXTRA
    (body_len,) = _I32.unpack_from(buf, p + 12)
    if body_len < 0:
        raise ValueError("negative body length")
    p += 16 + body_len
    tl = buf[p]
    topic = bytes(buf[p + 1 : p + 1 + tl]).decode("utf-8", "replace")
    p += 1 + tl
    (pl,) = _H.unpack_from(buf, p)
    props = decode_properties(bytes(buf[p + 2 : p + 2 + pl])) if pl > 0 else {}
    return topic, props


class WriterAttach:
    """Mixin: ``MessageStore.attach`` and ``store_host`` for a store that writes through ``self.writer``.

    What the owner may change while the store runs (the STOREHOST its records carry) and what it may
    not (dispatchers, flush policy) is the contract's, so it is decided here for both bundled stores;
    the store says whether it has started (``_attach_started``) and keeps the rest (``_attach_parts``).
    """

    writer: RecordWriter

    def _attach_started(self) -> bool:
        raise NotImplementedError

    def _attach_parts(self, dispatchers: Sequence[CommitLogDispatcher] | None, flush_policy: FlushPolicy | None,
                      on_forced_clean: ForcedCleanHook | None) -> None:
        raise NotImplementedError

    def attach(
        self,
        *,
        dispatchers: Sequence[CommitLogDispatcher] | None = None,
        flush_policy: FlushPolicy | None = None,
        store_host: bytes | None = None,
        on_forced_clean: ForcedCleanHook | None = None,
    ) -> None:
        """``MessageStore.attach``: what the owner built from the hooks; before ``async with``."""
        if (dispatchers is not None or flush_policy is not None) and self._attach_started():
            raise RuntimeError("attach dispatchers and flush_policy before the store starts")
        if store_host is not None:
            self.writer.store_host = store_host
        self._attach_parts(dispatchers, flush_policy, on_forced_clean)

    @property
    def store_host(self) -> bytes:
        """STOREHOSTADDRESS written into records: 8-byte IPv4 or 20-byte IPv6 form."""
        return self.writer.store_host
