"""The commitlog record codec shared by the ``mmap`` and ``memory`` stores (reference §1.1).

Writing: :class:`RecordWriter` validates a :class:`MessageRecord` and packs it with
one precompiled ``struct.Struct`` per host variant plus slice assignments into a
caller's buffer, so the store can build a record (or a whole batch) in a reusable
buffer and copy it into the mmap in one go.

Reading: :func:`parse_for_dispatch` turns stored bytes into ``DispatchRequest``s
(what the reput loop feeds to dispatchers), written against offsets inside any
buffer (mmap, bytearray, bytes). Validating possibly damaged bytes (recovery) is
``scan``'s job.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any, Final

from rmq.kernel.model import DispatchRequest, MessageRecord, PutStatus
from rmq.protocol.common import (
    MAGIC_BLANK,
    MAGIC_MESSAGE,
    MAX_PROPERTIES_BYTES,
    MAX_TOPIC_BYTES,
    Prop,
    SysFlag,
    decode_properties,
    java_hash,
    tags_code,
)
from rmq.protocol.names import validate_topic
from rmq.protocol.record import HEAD2, HEADERS, MIN_RECORD, store_timestamp_at

__all__ = ["HEAD2", "HEADERS", "RECORD_OVERHEAD", "RecordError", "RecordWriter", "store_timestamp_at"]

SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
RECORD_OVERHEAD: Final = MIN_RECORD  # fixed bytes of a record with two IPv4 hosts (91)
BLANK_LEN: Final = 8  # TOTALSIZE + MAGIC of the end-of-file filler
HOST_V6_EXTRA: Final = 12
TX_MASK: Final = SysFlag.TX_MASK
TX_PREPARED: Final = SysFlag.TX_PREPARED
TX_ROLLBACK: Final = SysFlag.TX_ROLLBACK
MASK31: Final = 0x7FFFFFFF
INT_MAX: Final = 0x7FFFFFFF

# the layout itself is declared once, in rmq.protocol.record
Q: Final = struct.Struct(">q")
I32: Final = struct.Struct(">i")
H: Final = struct.Struct(">h")
BLANK: Final = HEAD2


class RecordError(ValueError):
    """An input a store must refuse; ``status`` is the put status to report."""

    def __init__(self, status: PutStatus, remark: str) -> None:
        super().__init__(remark)
        self.status = status
        self.remark = remark


# --------------------------------------------------------------------------- hashing and properties

_DIGITS = b"0123456789abcdefghijklmnopqrstu"
_LOW31 = bytes(_DIGITS[c % 31] for c in range(256))
_HIGH31 = bytes(_DIGITS[c // 31] for c in range(256))


def java_hash_fast(s: str) -> int:
    """``String.hashCode`` 5x faster than a Python loop, for the per-key index path.

    Σ c·31^k with c = 31q + r is the base-31 number of the r digits plus 31 times the
    base-31 number of the q digits; ``bytes.translate`` and ``int(x, 31)`` do that
    in C. Latin-1 only (one UTF-16 unit per byte); anything else takes the loop.
    """
    if not s or len(s) > 4000:  # int() refuses > 4300 digits in non-binary bases
        return java_hash(s)
    try:
        b = s.encode("latin-1")
    except UnicodeEncodeError:
        return java_hash(s)
    h = (int(b.translate(_LOW31), 31) + 31 * int(b.translate(_HIGH31), 31)) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


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


# --------------------------------------------------------------------------- writing


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
        H.pack_into(buf, p, len(pb))
        p += 2
        e = p + len(pb)
        buf[p:e] = pb
        return e


# --------------------------------------------------------------------------- reading


def record_properties(buf: Any, pos: int) -> tuple[str, dict[str, str]]:
    """(topic, properties) of the record at ``pos`` (used by filters and key lookups).

    Malformed bytes raise :class:`RecordError`, never another exception.
    """
    try:
        return _record_properties(buf, pos)
    except (struct.error, IndexError, ValueError) as e:
        raise RecordError(PutStatus.UNKNOWN_ERROR, f"malformed record at {pos}: {e}") from None


def _record_properties(buf: Any, pos: int) -> tuple[str, dict[str, str]]:
    (sys_flag,) = I32.unpack_from(buf, pos + 36)
    p = pos + 72
    if sys_flag & SysFlag.BORNHOST_V6:
        p += HOST_V6_EXTRA
    if sys_flag & SysFlag.STOREHOST_V6:
        p += HOST_V6_EXTRA
    (body_len,) = I32.unpack_from(buf, p + 12)
    if body_len < 0:
        raise ValueError("negative body length")
    p += 16 + body_len
    tl = buf[p]
    topic = bytes(buf[p + 1 : p + 1 + tl]).decode("utf-8", "replace")
    p += 1 + tl
    (pl,) = H.unpack_from(buf, p)
    props = decode_properties(bytes(buf[p + 2 : p + 2 + pl])) if pl > 0 else {}
    return topic, props


# Hot loop of the reput service: module constants bound as defaults.
def parse_for_dispatch(
    buf: Any,
    pos: int,
    limit: int,
    base: int,
    out: list[DispatchRequest],
    max_count: int,
    delay_levels: Sequence[int],
    _head2: Callable[..., tuple[int, int]] = HEAD2.unpack_from,
    _v44: Callable[..., tuple[Any, ...]] = HEADERS[(8, 8)].unpack_from,
    _h: Callable[..., tuple[int]] = H.unpack_from,
    _req: type[DispatchRequest] = DispatchRequest,
    _decode: Callable[[str], dict[str, str]] = decode_properties,
    _tags: Callable[[str | None], int] = tags_code,
) -> tuple[int, int]:
    """Append requests for the records in ``buf[pos:limit]`` (``base`` = physical offset of ``buf[0]``).

    Stops after ``max_count`` records, at ``limit``, at the end-of-file blank, or at
    an invalid record. Returns ``(pos, state)``: state 0 = stopped normally (more may
    follow in this file), 1 = blank reached (continue at the next file), -1 = an
    invalid record at ``pos`` (size unknown; the caller decides).
    """
    topics: dict[bytes, str] = {}
    n = 0
    if pos < 0:
        return pos, -1
    limit = min(limit, len(buf))
    while pos < limit and n < max_count:
        if pos + 88 > limit:  # only an end-of-file blank is that short
            if pos + 8 > limit:
                return pos, -1
            total, magic = _head2(buf, pos)
            return (pos, 1) if magic == MAGIC_BLANK else (pos, -1)
        (
            total,
            magic,
            _crc,
            qid,
            _fl,
            qoff,
            _ph,
            sys_flag,
            _bt,
            _bh,
            store_ts,
            _sh,
            _rc,
            prepared,
            body_len,
        ) = _v44(buf, pos)
        if magic != MAGIC_MESSAGE:
            if magic == MAGIC_BLANK:
                return pos, 1
            return pos, -1
        end = pos + total
        if total < RECORD_OVERHEAD or end > limit:
            return pos, -1
        if sys_flag & 0x30:  # an IPv6 host: fields after BORNHOST move
            head = HEADERS[(20 if sys_flag & 0x10 else 8, 20 if sys_flag & 0x20 else 8)]
            if pos + head.size > end:
                return pos, -1
            (_t, _m, _c, _q, _f, _o, _p, _s, _b, _x, store_ts, _y, _r, prepared, body_len) = head.unpack_from(
                buf, pos
            )
            p = pos + head.size + body_len
        else:
            p = pos + 88 + body_len
        if body_len < 0 or p + 3 > end:
            return pos, -1
        tl = buf[p]
        tb = buf[p + 1 : p + 1 + tl]
        topic = topics.get(tb)
        if topic is None:
            topic = topics[tb] = tb.decode("utf-8", "replace")
        p += 1 + tl
        if p + 2 > end:
            return pos, -1
        (pl,) = _h(buf, p)
        p += 2
        if p + pl != end:
            return pos, -1
        if pl:
            props = _decode(buf[p:end].decode("utf-8", "replace"))
            if topic == SCHEDULE_TOPIC and Prop.DELAY in props:
                tc = delay_tags_code(store_ts, props, delay_levels)
            else:
                tc = _tags(props.get("TAGS"))
            keys = props.get("KEYS")
            uniq = props.get("UNIQ_KEY")
        else:
            props = {}
            tc = 0
            keys = uniq = None
        out.append(
            _req(topic, qid, base + pos, total, tc, store_ts, qoff, sys_flag, prepared, keys, uniq, props)
        )
        n += 1
        pos = end
    return pos, 0
