"""Property tests over the store's record readers: any bytes in, only documented outcomes out.

* the validators (``check_record``, ``record_fields``, ``indexed_keys_at``), the recovery
  walkers (``scan_segment``, ``resync``) and the reput parser (``parse_for_dispatch``) answer
  every input with a status, never an exception, and always move forward (the test would
  hang, and pytest-timeout fail it, if one looped);
* ``record_properties`` raises only ``RecordError``;
* records written by the store's own writer, with garbage spliced between them and bytes
  flipped inside some, are recovered exactly: every record left intact is found by the
  same walk recovery uses (validate, resync), at its own position, and nothing else is.
"""

from __future__ import annotations

import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.kernel.model import DispatchRequest, MessageRecord
from rmq.plugins.storage_mmap.codec import RecordError, RecordWriter, parse_for_dispatch, record_properties
from rmq.plugins.storage_mmap.scan import (
    MAGIC_MESSAGE_BYTES,
    check_record,
    indexed_keys_at,
    record_fields,
    record_tags_code,
    record_unit,
    resync,
    scan_segment,
    unit_agrees,
)

LEVELS = [1000, 5000, 10_000]
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Byte strings biased towards what a store file holds: magic numbers, lengths, zeros.
chunks = st.one_of(
    st.binary(max_size=64),
    st.just(MAGIC_MESSAGE_BYTES),
    st.just(b"\xcb\xd41\x94"),
    st.integers(-(2**31), 2**31 - 1).map(lambda n: n.to_bytes(4, "big", signed=True)),
    st.just(bytes(8)),
)
blobs = st.lists(chunks, max_size=40).map(b"".join)


def _writer() -> RecordWriter:
    return RecordWriter(64 * 1024, b"\x7f\x00\x00\x01\x00\x00\x2a\x9f")


def _record(i: int, body: bytes, props: str, phys: int, v6: bool = False) -> bytes:
    w = _writer()
    msg = MessageRecord(
        "T",
        i % 3,
        body,
        flag=i,
        properties=props,
        born_host=bytes(20) if v6 else b"\x0a\x00\x00\x01\x00\x00\x00\x01",
    )
    measured = w.measure(msg)
    buf = bytearray(measured[3])
    w.pack(buf, 0, msg, measured, i, phys, 1_700_000_000_000 + i)
    return bytes(buf)


@pytest.mark.timeout(120)
@FUZZ
@given(
    buf=blobs,
    pos=st.integers(-8, 600),
    extra=st.integers(-16, 16),
    crc=st.booleans(),
    base=st.integers(-1, 4096),
)
def test_readers_answer_any_bytes(buf: bytes, pos: int, extra: int, crc: bool, base: int) -> None:
    limit = max(0, len(buf) + extra)
    size, _ts = check_record(buf, pos, limit, crc, base)
    assert size >= -1
    rf = record_fields(buf, pos, limit)
    assert rf is None or rf[0] > 0
    if rf is not None:
        assert isinstance(record_tags_code(buf, rf[5], rf[6], rf[7], rf[4], LEVELS), int)
    assert indexed_keys_at(buf, pos, limit) is None or isinstance(indexed_keys_at(buf, pos, limit), tuple)
    cache: dict[bytes, int] = {}
    ru = record_unit(buf, pos, limit, LEVELS, cache)
    assert ru is None or ru[0] > 0
    unit = (ru[3], ru[0], ru[5]) if ru is not None else (base, extra + 100, 0)
    assert isinstance(unit_agrees(buf, pos, min(limit, len(buf)), unit, 0, 0, b"T", cache), bool)
    nxt = resync(buf, pos, limit, base, crc, span=256)
    assert nxt == -1 or (pos < nxt < max(limit, 0) and check_record(buf, nxt, limit, crc, base)[0] >= 0)
    seen: dict[tuple[bytes, int], list[int]] = {}
    stop, state, _last, _first = scan_segment(buf, max(pos, 0), limit, max(base, 0), crc, seen, 0)
    assert state in (1, -1) and stop >= max(pos, 0)
    out: list[DispatchRequest] = []
    end, pstate = parse_for_dispatch(buf, pos, limit, 0, out, 16, LEVELS)
    assert pstate in (0, 1, -1) and len(out) <= 16
    try:
        record_properties(buf, pos)
    except RecordError:
        pass


@pytest.mark.timeout(120)
@FUZZ
@given(
    bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=12),
    props=st.lists(
        st.sampled_from(["", "TAGS\x01a", "TAGS\x01x\x02KEYS\x01k1 k2", "UNIQ_KEY\x01U1\x02TAGS\x01"]),
        min_size=1,
    ),
    splices=st.lists(st.tuples(st.integers(0, 12), blobs), max_size=4),
    flips=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 400), st.integers(1, 255)), max_size=4),
)
def test_recovery_walk_keeps_every_intact_record(
    bodies: list[bytes],
    props: list[str],
    splices: list[tuple[int, bytes]],
    flips: list[tuple[int, int, int]],
) -> None:
    """Lay records out as a segment would hold them (each stores its own position), splice garbage
    between some and flip bytes inside some; the walk finds exactly the untouched ones."""
    garbage = dict(splices)
    parts: list[bytes] = []
    placed: list[tuple[int, int]] = []  # (position, index) of each record
    pos = 0
    for i, body in enumerate(bodies):
        if i in garbage:
            parts.append(garbage[i])
            pos += len(garbage[i])
        raw = bytearray(_record(i, body, props[i % len(props)], pos, v6=i % 4 == 3))
        for j, at, mask in flips:
            if j == i:
                raw[at % len(raw)] ^= mask
        parts.append(bytes(raw))
        placed.append((pos, i))
        pos += len(raw)
    buf = b"".join(parts) + bytes(512)
    flipped = {j for j, _a, _m in flips}
    intact = {p for p, i in placed if i not in flipped}
    found = []
    p = 0
    limit = len(buf)
    while True:
        size, _ts = check_record(buf, p, limit, True, 0)
        if size > 0:
            found.append(p)
            p += size
            continue
        p = resync(buf, p, limit, 0, True, span=1024)
        if p < 0:
            break
    assert intact <= set(found)
    for p in found:  # nothing but records written at that very position passes
        assert any(p == q for q, _i in placed)
        total = int.from_bytes(buf[p : p + 4], "big")
        body_len_at = p + 84 + (12 if buf[p + 39] & 0x10 else 0) + (12 if buf[p + 39] & 0x20 else 0)
        body_len = int.from_bytes(buf[body_len_at : body_len_at + 4], "big")
        body = buf[body_len_at + 4 : body_len_at + 4 + body_len]
        assert zlib.crc32(body) & 0x7FFFFFFF == int.from_bytes(buf[p + 8 : p + 12], "big") and total > 0


@FUZZ
@given(st.one_of(st.binary(max_size=4096), st.integers(0, 70_000).map(lambda n: bytes(range(256)) * (n // 256))))
def test_put_path_body_crc_is_zlibs(body: bytes) -> None:
    """The append path's CRC32 (ISA-L's when installed) gives zlib's value, which Java stores."""
    from rmq.plugins.storage_mmap import append

    assert append.crc32(body) == zlib.crc32(body)
    assert append.crc32(memoryview(body)) == zlib.crc32(body)


def test_put_path_uses_isal_when_installed() -> None:
    import importlib.util

    from rmq.plugins.storage_mmap import append

    want = "isal" if importlib.util.find_spec("isal") is not None else "zlib"
    assert append.crc32.__module__.split(".")[0] == want
