"""Fuzz: message-level and JSON-body decoders under any input return a value or raise their documented error.

Record decode (pull/view/query bodies, v4 and v6 hosts, compressed bodies), batch bodies,
properties, offset message ids, and ``jsonbody.loads``/``scan_object``; plus round trips of
valid values. ``make fuzz`` runs the same properties with the ``rmq-fuzz`` profile.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rmq.protocol import jsonbody
from rmq.protocol.common import SysFlag, decode_properties, encode_properties
from rmq.protocol.message import (
    BatchError,
    MessageDecodeError,
    MessageExt,
    decode_batch,
    decode_message,
    decode_messages,
    decode_offset_msg_id,
    decompress_body,
    encode_batch,
    encode_message,
    host_bytes,
    offset_msg_id,
)
from rmq.testing.fuzz import fuzz_settings


def mutate(data: bytes, draw: st.DrawFn) -> bytes:
    b = bytearray(data)
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "word"]))
        if op == "truncate":
            b = b[: draw(st.integers(0, len(b)))]
        elif op == "insert":
            i = draw(st.integers(0, len(b)))
            b[i:i] = draw(st.binary(min_size=1, max_size=4))
        elif op == "word" and len(b) >= 4:  # a length or size field replaced by an extreme value
            i = draw(st.integers(0, len(b) - 4))
            struct.pack_into(">i", b, i, draw(st.sampled_from([0, -1, 1, 2**31 - 1, -(2**31), 91, 127, 255])))
        elif b:
            i = draw(st.integers(0, len(b) - 1))
            if op == "flip":
                b[i] ^= 1 << draw(st.integers(0, 7))
            elif op == "set":
                b[i] = draw(st.integers(0, 255))
            else:
                del b[i]
    return bytes(b)


_prop_text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                     min_size=1, max_size=8)
_hosts = st.one_of(
    st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535)),
    st.tuples(st.ip_addresses(v=6).map(str), st.integers(0, 65535)),
)


@st.composite
def records(draw: st.DrawFn) -> bytes:
    body = draw(st.binary(max_size=64))
    sys_flag = draw(st.sampled_from([0, SysFlag.COMPRESSED, SysFlag.COMPRESSED | 0x300, SysFlag.COMPRESSED | 0x100]))
    if sys_flag & SysFlag.COMPRESSED and draw(st.booleans()):
        body = zlib.compress(body)
    return encode_message(
        draw(st.text(alphabet="abcXYZ%_-|", max_size=12)),
        body,
        queue_id=draw(st.integers(0, 64)),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        properties=draw(st.dictionaries(_prop_text, _prop_text, max_size=3)),
        sys_flag=sys_flag,
        queue_offset=draw(st.integers(0, 2**40)),
        commit_log_offset=draw(st.integers(0, 2**40)),
        born_host=draw(_hosts),
        store_host=draw(_hosts),
    )


@st.composite
def record_bodies(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 3)) == 0:
        return draw(st.binary(max_size=200))
    data = b"".join(draw(st.lists(records(), min_size=1, max_size=3)))
    return mutate(data, draw) if draw(st.booleans()) else data


def check_message(m: MessageExt) -> None:
    assert type(m.topic) is str and type(m.body) is bytes and type(m.properties) is dict
    assert all(type(k) is str and type(v) is str and k and v for k, v in m.properties.items())
    assert isinstance(m.born_host, str) and isinstance(m.store_host, str)
    decode_offset_msg_id(m.offset_msg_id)  # the id of a decoded record always decodes back


@fuzz_settings(300)
@given(record_bodies())
def test_record_decode_any_input(data: bytes) -> None:
    try:
        msgs = decode_messages(data)
    except MessageDecodeError:
        pass
    else:
        for m in msgs:
            check_message(m)
    try:
        check_message(decode_message(memoryview(data)))
    except MessageDecodeError:
        pass


@fuzz_settings(200)
@given(records())
def test_record_valid_decodes_and_is_stable(rec: bytes) -> None:
    try:
        (m,) = decode_messages(rec)
    except MessageDecodeError as exc:  # only a compressed body that is not zlib, or not zlib-typed
        (sys_flag,) = struct.unpack_from(">i", rec, 36)
        assert sys_flag & SysFlag.COMPRESSED, exc
        return
    (raw,) = decode_messages(rec, decompress=False)
    assert raw.store_size == len(rec) == m.store_size


@fuzz_settings(200)
@given(st.one_of(st.binary(max_size=64), st.binary(max_size=64).map(zlib.compress).flatmap(
    lambda c: st.builds(lambda cut: c[:cut], st.integers(0, len(c))))))
def test_decompress_any_input(data: bytes) -> None:
    try:
        assert type(decompress_body(data, max_size=1024)) is bytes
    except MessageDecodeError:
        pass


# --------------------------------------------------------------------------- batch bodies

_batch_items = st.lists(st.tuples(st.binary(max_size=40), st.integers(-(2**31), 2**31 - 1),
                                  st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)),
                        max_size=5)


@st.composite
def batch_bodies(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 3)) == 0:
        return draw(st.binary(max_size=120))
    return mutate(encode_batch(draw(_batch_items)), draw)


@fuzz_settings(300)
@given(batch_bodies())
def test_batch_decode_any_input(data: bytes) -> None:
    try:
        items = decode_batch(data)
    except BatchError:
        return
    normalized = bytearray(data)  # magic and crc are not kept: zero them, the rest must re-encode exactly
    pos = 0
    for body, flag, props in items:
        assert type(body) is bytes and type(flag) is int and type(props) is str
        props.encode()
        struct.pack_into(">ii", normalized, pos + 4, 0, 0)
        pos += struct.unpack_from(">i", data, pos)[0]
    assert pos == len(data) and encode_batch(items) == bytes(normalized)


@fuzz_settings(200)
@given(_batch_items)
def test_batch_round_trip(items: list[tuple[bytes, int, str]]) -> None:
    assert decode_batch(encode_batch(items)) == items


# --------------------------------------------------------------------------- properties


@fuzz_settings(300)
@given(st.one_of(st.binary(max_size=80), st.text(max_size=40),
                 st.lists(st.sampled_from(["K", "V", "\x01", "\x02", "", "é", "\udcff"]), max_size=12).map("".join)))
def test_properties_any_input(raw: Any) -> None:
    props = decode_properties(raw)
    for k, v in props.items():
        assert k and v and "\x01" not in k and "\x02" not in k and "\x02" not in v


@fuzz_settings(200)
@given(st.dictionaries(_prop_text, _prop_text, max_size=6), st.booleans())
def test_properties_round_trip(props: dict[str, str], trailing: bool) -> None:
    text = encode_properties(props) + ("\x02" if trailing and props else "")
    assert decode_properties(text) == props
    assert decode_properties(text.encode()) == props


# --------------------------------------------------------------------------- offset message ids


@fuzz_settings(300)
@given(st.one_of(st.text(max_size=60), st.text(alphabet="0123456789abcdefABCDEF \n", min_size=32, max_size=32),
                 st.text(alphabet="0123456789ABCDEFG", min_size=56, max_size=56)))
def test_msg_id_any_input(text: str) -> None:
    try:
        ip, port, offset = decode_offset_msg_id(text)
    except MessageDecodeError:
        return
    assert len(text) in (32, 56)
    assert offset_msg_id(host_bytes(ip, port), offset) == text.upper()


@fuzz_settings(200)
@given(_hosts, st.integers(-(2**63), 2**63 - 1))
def test_msg_id_round_trip(host: tuple[str, int], offset: int) -> None:
    ip, port = host
    mid = offset_msg_id(host_bytes(ip, port), offset)
    got_ip, got_port, got_off = decode_offset_msg_id(mid)
    assert (got_port, got_off) == (port, offset)
    assert host_bytes(got_ip, got_port) == host_bytes(ip, port)


# --------------------------------------------------------------------------- strict JSON bodies

json_docs = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(jsonbody.LONG_MIN, jsonbody.LONG_MAX),
              st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=10)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)
JSON_TOKENS = ["{", "}", "[", "]", ",", ":", '"a"', "0", "-1", "1e999", "NaN", "Infinity", "-Infinity", "true",
               "null", '"\\ud800"', "1" * 25, "1.5", " ", "\n", "{0:1}", "{-3:[]}", '"\\u0000"', "9223372036854775808"]


def check_strict(v: Any, depth: int = 0) -> None:
    assert depth <= jsonbody.MAX_DEPTH + 1
    if type(v) is float:
        assert math.isfinite(v)
    elif type(v) is int:
        assert jsonbody.LONG_MIN <= v <= jsonbody.LONG_MAX
    elif type(v) is list:
        for x in v:
            check_strict(x, depth + 1)
    elif type(v) is dict:
        for k, x in v.items():
            assert type(k) is str
            check_strict(x, depth + 1)
    else:
        assert v is None or type(v) in (str, bool)


@fuzz_settings(300)
@given(st.one_of(
    st.text(max_size=60),
    st.binary(max_size=60),
    st.lists(st.sampled_from(JSON_TOKENS), max_size=30).map("".join),
    st.integers(0, 3000).map(lambda n: "[" * n + "]" * n),
    st.integers(0, 3000).map(lambda n: '{"a":' * n + "1" + "}" * n),
))
def test_jsonbody_any_input(data: Any) -> None:
    try:
        v = jsonbody.loads(data)
    except jsonbody.JsonError:
        pass
    else:
        check_strict(v)
    if isinstance(data, str):
        try:
            obj = jsonbody.scan_object(data)
        except jsonbody.JsonError:
            pass
        else:
            assert type(obj) is dict
            check_strict(obj)


@fuzz_settings(200)
@given(json_docs)
def test_jsonbody_round_trip(doc: Any) -> None:
    text = json.dumps(doc)
    assert jsonbody.loads(text) == doc
    assert jsonbody.loads(text.encode()) == doc
    if type(doc) is dict:
        assert jsonbody.scan_object(text + "\n") == doc
