"""Reading commitlog bytes that may be damaged: validation, resynchronisation, record fields (recovery).

Every function here takes any bytes and answers with a status or None; none raises
on malformed input (a property test feeds them random bytes), and every loop moves
strictly forward, so none can spin.

A record is accepted only when all of its structure agrees (reference §1.4, plus two
checks RocketMQ does not make): magic, TOTALSIZE within the segment, body/topic/
properties lengths adding up to TOTALSIZE, the body CRC, **PHYSICALOFFSET equal to
the record's own position** (every 4.9 writer stores it, so a record read from the
wrong place, or a stale one, cannot pass), and **properties not ending in a zero
byte** (the tail of a record torn by a crash is zeros; a properties string never
ends in NUL). Header fields outside the CRC (flag, queue id and offset, timestamps)
cannot be verified from the record alone; the consume-queue checks cover them.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any, Final

from rmq.plugins.storage_mmap.codec import (
    HEAD2,
    HEADERS,
    HOST_V6_EXTRA,
    I32,
    MASK31,
    RECORD_OVERHEAD,
    SCHEDULE_TOPIC,
    H,
    Q,
    java_hash_fast,
    message_tags_code,
)
from rmq.protocol.common import MAGIC_BLANK, MAGIC_MESSAGE, decode_properties

MIN_RECORD: Final = RECORD_OVERHEAD + 1  # a topic has at least one byte
MAGIC_MESSAGE_BYTES: Final = MAGIC_MESSAGE.to_bytes(4, "big", signed=True)
MAGIC_BLANK_BYTES: Final = MAGIC_BLANK.to_bytes(4, "big", signed=True)
RESYNC_WINDOW: Final = 1 << 20
_TAGS_KEY: Final = b"TAGS\x01"
_SCHEDULE: Final = SCHEDULE_TOPIC.encode()


def check_record(buf: Any, pos: int, limit: int, check_crc: bool, base: int = -1) -> tuple[int, int]:
    """Validate the record at ``pos`` without building anything.

    Returns ``(size, store_ts)``: size > 0 a valid message, 0 the end-of-file blank
    (it must fill the segment to ``limit``), -1 invalid (torn, corrupt, or zeros).
    ``base`` is the physical offset of ``buf[0]``; when >= 0 the record's
    PHYSICALOFFSET field must equal ``base + pos``.
    """
    limit = min(limit, len(buf))
    if pos < 0 or pos + 8 > limit:
        return -1, 0
    total, magic = HEAD2.unpack_from(buf, pos)
    if magic == MAGIC_BLANK:
        return (0, 0) if total == limit - pos else (-1, 0)
    if magic != MAGIC_MESSAGE or total < MIN_RECORD or total > limit - pos:
        return -1, 0
    (sys_flag,) = I32.unpack_from(buf, pos + 36)
    if base >= 0 and Q.unpack_from(buf, pos + 28)[0] != base + pos:
        return -1, 0
    end = pos + total
    p = pos + 56
    if sys_flag & 0x10:
        p += HOST_V6_EXTRA
    (store_ts,) = Q.unpack_from(buf, p)
    p += 16
    if sys_flag & 0x20:
        p += HOST_V6_EXTRA
    if p + 16 > end:
        return -1, 0
    (body_len,) = I32.unpack_from(buf, p + 12)
    p += 16
    if body_len < 0 or p + body_len + 3 > end:
        return -1, 0
    if check_crc:
        (crc,) = I32.unpack_from(buf, pos + 8)
        if zlib.crc32(buf[p : p + body_len]) & MASK31 != crc:
            return -1, 0
    p += body_len
    tl = buf[p]
    p += 1 + tl
    if tl == 0 or p + 2 > end:
        return -1, 0
    (pl,) = H.unpack_from(buf, p)
    if pl < 0 or p + 2 + pl != end or (pl and buf[end - 1] == 0):
        return -1, 0
    return total, store_ts


def resync(buf: Any, pos: int, limit: int, base: int, check_crc: bool, span: int) -> int:
    """Position of the next valid record (or end-of-file blank) after the invalid bytes at ``pos``; -1.

    Searches forward for either magic and accepts the first candidate that passes
    :func:`check_record` in full (CRC and PHYSICALOFFSET included, so a match is a
    real record written at that position). It gives up at ``limit`` or after a run
    of ``span`` zero bytes: no record or batch is that long, so such a run is the end
    of the written data, not a gap inside it. Reads the bytes once, a window at a time.
    """
    limit = min(limit, len(buf))
    a = max(pos + 1, 0)
    run_start = a  # just after the last non-zero byte seen
    while a < limit:
        b = min(limit, a + RESYNC_WINDOW)
        chunk = bytes(buf[a : min(limit, b + 3)])
        cands = []
        for magic in (MAGIC_MESSAGE_BYTES, MAGIC_BLANK_BYTES):
            j = chunk.find(magic)
            while 0 <= j < b - a:
                if a + j - 4 > pos:
                    cands.append(a + j - 4)
                j = chunk.find(magic, j + 1)
        for c in sorted(cands):
            size, _ts = check_record(buf, c, limit, check_crc, base)
            if size >= 0:
                return c
        stripped = len(chunk[: b - a].rstrip(b"\x00"))
        if stripped:
            run_start = a + stripped
        if b - run_start >= span:
            return -1
        a = b
    return -1


def scan_segment(
    buf: Any,
    pos: int,
    limit: int,
    base: int,
    check_crc: bool,
    seen: dict[tuple[bytes, int], list[int]],
    after_ts: int,
    _v44: Callable[..., tuple[Any, ...]] = HEADERS[(8, 8)].unpack_from,
    _h: Callable[..., tuple[int]] = H.unpack_from,
    _crc: Callable[[Any], int] = zlib.crc32,
) -> tuple[int, int, int, int]:
    """Walk valid records from ``pos``: ``(stop position, state, last store ts, first phys stored after after_ts)``.

    state 1 = the end-of-file blank was reached (the segment is complete), -1 = an
    invalid record (or the end of data) at the stop position. For each NOT/COMMIT
    record ``seen[(topic bytes, queue id)]`` keeps ``[first phys, first queue offset,
    last phys, last end]``: what the store uses to find consume queues that are
    missing or behind their commitlog records. The last value is -1 if no record
    was stored after ``after_ts``.

    The checks are :func:`check_record`'s, inlined for the common layout (two IPv4
    hosts, one header unpack per record): recovery reads every record through here.
    """
    limit = min(limit, len(buf))
    last_ts = 0
    first_after = -1
    unpack_i, unpack_q = I32.unpack_from, Q.unpack_from
    while True:
        if pos + 88 <= limit:
            total, magic, crc, qid, _f, qoff, phys, sys_flag, _b, _bh, ts, _sh, _r, _p, body_len = _v44(
                buf, pos
            )
        else:
            magic = sys_flag = 0
        if magic == MAGIC_MESSAGE and not sys_flag & 0x30 and MIN_RECORD <= total <= limit - pos:
            end = pos + total
            p = pos + 88 + body_len
            if phys != base + pos or body_len < 0 or p + 3 > end:
                return pos, -1, last_ts, first_after
            if check_crc and _crc(buf[pos + 88 : p]) & MASK31 != crc:
                return pos, -1, last_ts, first_after
            tl = buf[p]
            q = p + 1 + tl
            if tl == 0 or q + 2 > end:
                return pos, -1, last_ts, first_after
            (pl,) = _h(buf, q)
            if pl < 0 or q + 2 + pl != end or (pl and buf[end - 1] == 0):
                return pos, -1, last_ts, first_after
            size = total
            topic = buf[p + 1 : q]
        else:  # the blank, an IPv6 host, or damage: the general validator decides
            size, ts = check_record(buf, pos, limit, check_crc, base)
            if size <= 0:
                return pos, (1 if size == 0 else -1), last_ts, first_after
            (sys_flag,) = unpack_i(buf, pos + 36)
            (qid,) = unpack_i(buf, pos + 12)
            (qoff,) = unpack_q(buf, pos + 20)
            p = pos + 72
            if sys_flag & 0x10:
                p += HOST_V6_EXTRA
            if sys_flag & 0x20:
                p += HOST_V6_EXTRA
            p += 16 + unpack_i(buf, p + 12)[0]
            topic = buf[p + 1 : p + 1 + buf[p]]
        last_ts = ts
        if first_after < 0 and ts > after_ts:
            first_after = base + pos
        tx = sys_flag & 0xC
        if tx == 0 or tx == 8:
            key = (bytes(topic), qid)
            phys = base + pos
            entry = seen.get(key)
            if entry is None:
                seen[key] = [phys, qoff, phys, phys + size]
            else:
                entry[2] = phys
                entry[3] = phys + size
        pos += size


def record_fields(buf: Any, pos: int, limit: int) -> tuple[int, int, int, int, int, bytes, int, int] | None:
    """``(total, queue id, queue offset, phys, store ts, topic bytes, props start, props end)`` of a
    structurally sound record at ``pos`` (no CRC), or None."""
    limit = min(limit, len(buf))
    if pos < 0 or pos + MIN_RECORD > limit:
        return None
    total, magic = HEAD2.unpack_from(buf, pos)
    if magic != MAGIC_MESSAGE or total < MIN_RECORD or total > limit - pos:
        return None
    end = pos + total
    (sys_flag,) = I32.unpack_from(buf, pos + 36)
    p = pos + 56 + (HOST_V6_EXTRA if sys_flag & 0x10 else 0)
    (store_ts,) = Q.unpack_from(buf, p)
    p += 16 + (HOST_V6_EXTRA if sys_flag & 0x20 else 0)
    if p + 16 > end:
        return None
    (body_len,) = I32.unpack_from(buf, p + 12)
    p += 16 + body_len
    if body_len < 0 or p + 3 > end:
        return None
    tl = buf[p]
    topic = bytes(buf[p + 1 : p + 1 + tl])
    p += 1 + tl
    if p + 2 > end:
        return None
    (pl,) = H.unpack_from(buf, p)
    if pl < 0 or p + 2 + pl != end:
        return None
    (qid,) = I32.unpack_from(buf, pos + 12)
    (qoff,) = Q.unpack_from(buf, pos + 20)
    (phys,) = Q.unpack_from(buf, pos + 28)
    return total, qid, qoff, phys, store_ts, topic, p + 2, end


def record_tags_code(
    buf: Any, topic: bytes, props_start: int, props_end: int, store_ts: int, delay_levels: Sequence[int]
) -> int:
    """The consume-queue tagsCode the record's own bytes call for (reference §2.2)."""
    raw = bytes(buf[props_start:props_end])
    if topic == _SCHEDULE:
        return message_tags_code(SCHEDULE_TOPIC, decode_properties(raw), store_ts, delay_levels)
    i = len(raw)
    while True:  # the last non-empty pair wins, as when the properties are decoded into a dict
        i = raw.rfind(_TAGS_KEY, 0, i)
        if i < 0:
            return 0
        if i > 0 and raw[i - 1] != 2:
            continue
        j = raw.find(b"\x02", i + 5)
        value = raw[i + 5 : j if j >= 0 else len(raw)]
        if value:
            return java_hash_fast(value.decode("utf-8", "replace"))


def indexed_keys_at(buf: Any, pos: int, limit: int) -> tuple[int, bool] | None:
    """``(size, whether the key index holds entries for it)`` of the record at ``pos``: size 0 is the
    end-of-file blank; None when there is no readable record there."""
    limit = min(limit, len(buf))
    if pos < 0 or pos + 8 > limit:
        return None
    total, magic = HEAD2.unpack_from(buf, pos)
    if magic == MAGIC_BLANK:
        return (0, False) if total == limit - pos else None
    rf = record_fields(buf, pos, limit)
    if rf is None:
        return None
    (sys_flag,) = I32.unpack_from(buf, pos + 36)
    if sys_flag & 0xC == 0xC:  # rollbacks are not indexed
        return rf[0], False
    raw = bytes(buf[rf[6] : rf[7]])
    keyed = any(
        (i == 0 or raw[i - 1] == 2) and i + len(k) < len(raw) and raw[i + len(k)] != 2
        for k in (b"UNIQ_KEY\x01", b"KEYS\x01")
        for i in _all(raw, k)
    )
    return rf[0], keyed


def _all(raw: bytes, sub: bytes) -> list[int]:
    out = []
    i = raw.find(sub)
    while i >= 0:
        out.append(i)
        i = raw.find(sub, i + 1)
    return out


def record_unit(
    buf: Any,
    pos: int,
    limit: int,
    delay_levels: Sequence[int],
    cache: dict[bytes, int],
    _v44: Callable[..., tuple[Any, ...]] = HEADERS[(8, 8)].unpack_from,
    _h: Callable[..., tuple[int]] = H.unpack_from,
) -> tuple[int, int, int, int, bytes, int] | None:
    """``(total, queue id, queue offset, phys, topic bytes, tags code)`` of a structurally sound record
    at ``pos`` (no CRC), or None: what a consume-queue unit is checked against. ``cache`` maps TAGS
    values to their codes (tags repeat); one header unpack for the common layout."""
    limit = min(limit, len(buf))
    if pos < 0 or pos + 88 > limit:
        return None
    total, magic, _c, qid, _f, qoff, phys, sys_flag, _b, _bh, ts, _sh, _r, _p, body_len = _v44(buf, pos)
    if magic != MAGIC_MESSAGE:
        return None
    if sys_flag & 0x30:
        rf = record_fields(buf, pos, limit)
        if rf is None:
            return None
        return (
            rf[0],
            rf[1],
            rf[2],
            rf[3],
            rf[5],
            record_tags_code(buf, rf[5], rf[6], rf[7], rf[4], delay_levels),
        )
    if total < MIN_RECORD or total > limit - pos or body_len < 0:
        return None
    end = pos + total
    p = pos + 88 + body_len
    if p + 3 > end:
        return None
    tl = buf[p]
    q = p + 1 + tl
    if q + 2 > end:
        return None
    (pl,) = _h(buf, q)
    if pl < 0 or q + 2 + pl != end:
        return None
    topic = bytes(buf[p + 1 : q])
    if pl == 0:
        return total, qid, qoff, phys, topic, 0
    raw = bytes(buf[q + 2 : end])
    i = raw.rfind(_TAGS_KEY)
    if topic != _SCHEDULE and (i == 0 or (i > 0 and raw[i - 1] == 2)):
        j = raw.find(b"\x02", i + 5)
        value = raw[i + 5 : j if j >= 0 else len(raw)]
        if value:
            tags = cache.get(value)
            if tags is None:
                if len(cache) > 10_000:
                    cache.clear()
                tags = cache[value] = java_hash_fast(value.decode("utf-8", "replace"))
            return total, qid, qoff, phys, topic, tags
    elif i < 0 and topic != _SCHEDULE:
        return total, qid, qoff, phys, topic, 0
    return total, qid, qoff, phys, topic, record_tags_code(buf, topic, q + 2, end, ts, delay_levels)


_H40: Final = struct.Struct(">iiiiiqqi")  # total, magic, crc, queue id, flag, queue offset, phys, sysflag


def unit_agrees(
    buf: Any,
    pos: int,
    limit: int,
    unit: tuple[int, int, int],
    qid: int,
    qoff: int,
    topic: bytes,
    cache: dict[bytes, int],
    _h40: Callable[..., tuple[int, ...]] = _H40.unpack_from,
    _i: Callable[..., tuple[int]] = I32.unpack_from,
) -> bool:
    """True when the record at ``pos`` is exactly what the consume-queue ``unit`` at (``topic``,
    ``qid``, ``qoff``) says (the common case, checked with one small unpack and no allocation but
    the properties); False means "look closer" (:func:`record_unit`), not necessarily damage."""
    phys, size, tags = unit
    if pos < 0 or pos + size > limit or size < MIN_RECORD:  # limit <= len(buf): the caller's segment
        return False
    total, magic, _c, rqid, _f, rqoff, rphys, sys_flag = _h40(buf, pos)
    if (
        magic != MAGIC_MESSAGE
        or total != size
        or rphys != phys
        or rqid != qid
        or rqoff != qoff
        or sys_flag & 0x30
    ):
        return False
    p = pos + 88 + _i(buf, pos + 84)[0]
    tl = len(topic)
    end = pos + total
    if p + 3 + tl > end or buf[p] != tl or buf[p + 1 : p + 1 + tl] != topic or topic == _SCHEDULE:
        return False
    start = p + 3 + tl
    i = buf.rfind(_TAGS_KEY, start, end)
    if i < 0:
        return tags == 0
    if i > start and buf[i - 1] != 2:
        return False
    j = buf.find(b"\x02", i + 5, end)
    value = buf[i + 5 : j if j >= 0 else end]
    return bool(value) and cache.get(value) == tags
