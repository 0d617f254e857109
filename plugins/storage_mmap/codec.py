"""The mmap store's record codec (reference §1.1).

Writing is :mod:`rmq.protocol.recordwriter` (shared with the ``memory`` store); the
names are re-exported here for the store's modules.

Reading: :func:`parse_for_dispatch` turns stored bytes into ``DispatchRequest``s
(what the reput loop feeds to dispatchers), written against offsets inside any
buffer (mmap, bytearray, bytes). Validating possibly damaged bytes (recovery) is
``scan``'s job.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

from rmq.kernel import DispatchRequest
from rmq.protocol.common import (
    MAGIC_BLANK,
    MAGIC_MESSAGE,
    Prop,
    SysFlag,
    decode_properties,
    java_hash,
    tags_code,
)
from rmq.protocol.record import HEAD2, HEADERS, MIN_RECORD, store_timestamp_at
from rmq.protocol.recordwriter import (
    HOST_V6_EXTRA,
    MASK31,
    SCHEDULE_TOPIC,
    RecordError,
    RecordWriter,
    delay_tags_code,
    message_tags_code,
    record_properties,
)

__all__ = [
    "HEAD2",
    "HEADERS",
    "HOST_V6_EXTRA",
    "MASK31",
    "RECORD_OVERHEAD",
    "SCHEDULE_TOPIC",
    "RecordError",
    "RecordWriter",
    "delay_tags_code",
    "message_tags_code",
    "record_properties",
    "store_timestamp_at",
]

RECORD_OVERHEAD: Final = MIN_RECORD  # fixed bytes of a record with two IPv4 hosts (91)
BLANK_LEN: Final = 8  # TOTALSIZE + MAGIC of the end-of-file filler
TX_MASK: Final = SysFlag.TX_MASK
TX_PREPARED: Final = SysFlag.TX_PREPARED
TX_ROLLBACK: Final = SysFlag.TX_ROLLBACK
INT_MAX: Final = 0x7FFFFFFF

# the layout itself is declared once, in rmq.protocol.record
Q: Final = struct.Struct(">q")
I32: Final = struct.Struct(">i")
H: Final = struct.Struct(">h")
BLANK: Final = HEAD2


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


# --------------------------------------------------------------------------- reading


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
