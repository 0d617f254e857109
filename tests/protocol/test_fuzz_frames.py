"""Fuzz: every frame and header decoder under any input yields a command or a FrameError, nothing else.

Covers the frame splitter (``FrameDecoder.feed`` with arbitrary chunking, both modes),
``decode``, JSON headers (hostile numbers, NaN/Infinity, nesting, mutations; the fast path
agrees with the strict parser), ROCKETMQ binary headers, and the range-checked header
accessors. ``make fuzz`` runs the same properties with the ``rmq-fuzz`` profile.
"""

from __future__ import annotations

import json
import struct
from contextlib import contextmanager
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rmq.protocol import headercodec
from rmq.protocol.codes import LanguageCode
from rmq.protocol.command import (
    JAVA_TYPES,
    CommandDecodeError,
    FrameError,
    HeaderError,
    RemotingCommand,
    UndecodableCommand,
    ext_i32,
    ext_int,
)
from rmq.protocol.frame import FrameDecoder, decode, encode
from rmq.testing.fuzz import fuzz_settings, mutate

LANGS = {m.name for m in LanguageCode}
I32 = (-(2**31), 2**31 - 1)


def frame(header: bytes, body: bytes = b"", st_: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (st_ << 24) | len(header)) + header + body


def check_command(cmd: RemotingCommand) -> None:
    """What every decoded command guarantees its consumers."""
    assert type(cmd) in (RemotingCommand, UndecodableCommand)
    for v in (cmd.code, cmd.opaque, cmd.flag, cmd.version):
        assert type(v) is int and I32[0] <= v <= I32[1]
    assert cmd.language in LANGS
    assert cmd.remark is None or type(cmd.remark) is str
    assert type(cmd.ext) is dict
    for k, v in cmd.ext.items():
        assert type(k) is str and type(v) is str
        k.encode()
        v.encode()  # no lone surrogates: every later .encode() works
    if cmd.remark:
        cmd.remark.encode()
    assert type(cmd.body) is bytes
    assert cmd.serialize_type in (0, 1)


def outcome(data: bytes) -> tuple[str, Any]:
    try:
        cmd = decode(data)
    except CommandDecodeError as exc:
        assert exc.serialize_type in (0, 1)
        return ("bad-header", (exc.opaque, exc.flag, exc.kind))
    except FrameError as exc:
        assert exc.kind
        return ("bad-frame", exc.kind)
    check_command(cmd)
    return ("ok", cmd)


@contextmanager
def strict_only() -> Any:
    saved = headercodec._FAST_MAX_CHARS
    headercodec._FAST_MAX_CHARS = -1
    try:
        yield
    finally:
        headercodec._FAST_MAX_CHARS = saved


# --------------------------------------------------------------------------- strategies

huge_ints = st.sampled_from([2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 10**30, 2**63 - 1, -(2**63)])
numbers = st.one_of(st.integers(), huge_ints, st.floats(), st.sampled_from([0.5, 1e308, -0.0, 5.0]))
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=12))
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)
field_values = st.one_of(st.integers(-5, 500), st.integers(*I32), json_values)
ext_values = st.one_of(st.text(max_size=12), st.integers(-(2**70), 2**70), st.booleans(), st.none(), json_values)
header_dicts = st.fixed_dictionaries(
    {},
    optional={
        "code": field_values,
        "opaque": field_values,
        "flag": field_values,
        "version": field_values,
        "language": st.one_of(st.sampled_from(sorted(LANGS)), st.text(max_size=6), field_values),
        "remark": st.one_of(st.none(), st.text(max_size=20), json_values),
        "extFields": st.one_of(st.dictionaries(st.text(max_size=8), ext_values, max_size=6), json_values),
        "serializeTypeCurrentRPC": st.one_of(st.just("JSON"), json_values),
        "unknownKey": json_values,
    },
)

# literals json.dumps cannot produce: what a hostile peer types by hand
HOSTILE_LITERALS = [
    "Infinity", "-Infinity", "NaN", "1E99511627776", "-1e400", "1" * 30, "-" + "9" * 25, "1" * 5000,
    "0." + "0" * 300 + "1", "1e-400", '"\\ud800"', '"\\udfff\\ud800"', '"\\ud83d\\ude00"', "[" * 100 + "]" * 100,
    "{" + '"a":{' * 70 + "}" * 71, "[" * 5000, "true", "null", '"\\u0000"', "2147483648", "-2147483649",
    "9223372036854775808", "-9223372036854775809", "9223372036854775807",
]  # fmt: skip


@st.composite
def json_header_texts(draw: st.DrawFn) -> str:
    h = draw(header_dicts)
    text = json.dumps(h, separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))
    # splice hostile literals into value positions
    for _ in range(draw(st.integers(0, 3))):
        keys = [k for k in ("code", "opaque", "flag", "version", "remark", "language") if f'"{k}": ' in text
                or f'"{k}":' in text]
        lit = draw(st.sampled_from(HOSTILE_LITERALS))
        if keys and draw(st.booleans()):
            key = draw(st.sampled_from(keys))
            text = text.replace(f'"{key}":', f'"{key}":{lit},"_{key}":', 1)
        else:
            text = text[:-1] + ("," if len(text) > 2 else "") + f'"x":{lit}' + "}"
    if draw(st.booleans()):
        text += draw(st.sampled_from(["", "\n", " ", "x", "}", "\x00"]))
    return text


@st.composite
def mutated_headers(draw: st.DrawFn) -> bytes:
    return mutate(draw(json_header_texts()).encode("utf-8", "surrogatepass"), draw)


# --------------------------------------------------------------------------- JSON headers


@fuzz_settings(300)
@given(st.one_of(json_header_texts().map(lambda t: t.encode("utf-8", "surrogatepass")), mutated_headers()),
       st.binary(max_size=8))
def test_json_header_any_input_and_fast_path_agrees_with_strict(header: bytes, body: bytes) -> None:
    data = frame(header, body)
    got = outcome(data)
    with strict_only():
        strict = outcome(data)
    assert got == strict, (header, got, strict)
    if got[0] == "bad-header":
        opaque, flag, _kind = got[1]
        assert (opaque is None) == (flag is None)


@fuzz_settings(200)
@given(st.text(max_size=200))
def test_json_header_arbitrary_text(text: str) -> None:
    outcome(frame(text.encode("utf-8", "surrogatepass")))


@fuzz_settings(100)
@given(st.sampled_from(HOSTILE_LITERALS), st.sampled_from(["code", "opaque", "flag", "version", "extFields"]))
def test_hostile_literals_never_escape(lit: str, key: str) -> None:
    for text in (f'{{"{key}":{lit}}}', f'{{"code":1,"opaque":7,"{key}":{lit}}}',
                 f'{{"code":1,"opaque":7,"extFields":{{"a":{lit}}}}}'):
        outcome(frame(text.encode()))


def test_json_header_examples() -> None:
    """The issue's sub-50-byte killers, answered or closed, never raised past the decoder."""
    for text, expect in [
        (b'{"code":Infinity,"opaque":1}', "bad-header"),
        (b'{"code":NaN,"opaque":1}', "bad-header"),
        (b'{"code":1E99511627776,"opaque":1}', "bad-header"),
        (b"[" * 5000 + b"]" * 5000, "bad-header"),
        (b'{"code":2147483648,"opaque":1}', "bad-header"),
        (b'{"code":10,"opaque":5,"flag":0,"extFields":{"k":"\\ud800"}}', "bad-header"),
    ]:
        assert outcome(frame(text))[0] == expect, text
    # opaque known: the connection can answer; opaque unknown: it must close
    assert outcome(frame(b'{"code":2147483648,"opaque":9,"flag":0}'))[1][:2] == (9, 0)
    assert outcome(frame(b'{"code":Infinity,"opaque":9}'))[1][:2] == (None, None)
    assert outcome(frame(b'{"code":1,"opaque":2147483648}'))[1][:2] == (None, None)
    ok = outcome(frame(b'{"code":10,"opaque":5,"extFields":{"q":4,"b":true,"n":null,"s":"\\ud83d\\ude00"}}\n'))
    assert ok[0] == "ok" and ok[1].ext == {"q": "4", "b": "true", "s": "\U0001f600"}


# --------------------------------------------------------------------------- binary headers


@st.composite
def binary_headers(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return draw(st.binary(max_size=64))
    remark = draw(st.binary(max_size=8))
    entries = b""
    for _ in range(draw(st.integers(0, 3))):
        k, v = draw(st.binary(max_size=6)), draw(st.binary(max_size=6))
        entries += struct.pack(">H", len(k)) + k + struct.pack(">i", len(v)) + v
    head = struct.pack(">hbhii", draw(st.integers(-(2**15), 2**15 - 1)), draw(st.integers(-128, 127)),
                       draw(st.integers(-(2**15), 2**15 - 1)), draw(st.integers(*I32)), draw(st.integers(*I32)))
    rlen = draw(st.one_of(st.just(len(remark)), st.integers(*I32)))
    elen = draw(st.one_of(st.just(len(entries)), st.integers(*I32)))
    hdr = head + struct.pack(">i", rlen) + remark + struct.pack(">i", elen) + entries
    return mutate(hdr, draw) if draw(st.booleans()) else hdr


@fuzz_settings(300)
@given(binary_headers(), st.binary(max_size=8))
def test_binary_header_any_input(header: bytes, body: bytes) -> None:
    kind, detail = outcome(frame(header, body, st_=1))
    if kind == "bad-header":
        opaque, flag, _ = detail
        assert (opaque is not None) == (len(header) >= 13)
        if opaque is not None:
            assert (opaque, flag) == struct.unpack_from(">ii", header, 5)


# --------------------------------------------------------------------------- the frame splitter


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    """Valid frames, frames with bad headers, bad length words and garbage, back to back."""
    parts = []
    for _ in range(draw(st.integers(0, 6))):
        choice = draw(st.integers(0, 5))
        if choice == 0:
            parts.append(encode(RemotingCommand.request(draw(st.integers(0, 400)), {"k": draw(st.text(max_size=5))},
                                                        body=draw(st.binary(max_size=20)), opaque=draw(st.integers(0, 99)),
                                                        serialize_type=draw(st.integers(0, 1)))))
        elif choice == 1:
            parts.append(frame(draw(json_header_texts()).encode("utf-8", "surrogatepass"), draw(st.binary(max_size=5))))
        elif choice == 2:
            parts.append(frame(draw(binary_headers()), st_=1))
        elif choice == 3:
            parts.append(struct.pack(">i", draw(st.integers(*I32))) + draw(st.binary(max_size=12)))
        elif choice == 4:
            parts.append(draw(st.binary(max_size=16)))
        else:
            word = draw(st.integers(0, 2**32 - 1))
            payload = draw(st.binary(max_size=16))
            parts.append(struct.pack(">iI", 4 + len(payload), word) + payload)
    data = b"".join(parts)
    return mutate(data, draw) if draw(st.booleans()) else data


def model(data: bytes, limit: int, recover: bool) -> tuple[list[RemotingCommand], bool, int]:
    """Reference splitter: (commands, failed, bytes left buffered)."""
    out: list[RemotingCommand] = []
    pos = 0
    while len(data) - pos >= 4:
        (length,) = struct.unpack_from(">i", data, pos)
        if length < 4 or length + 4 > limit:
            return out, True, 0
        if pos + 4 + length > len(data):
            break
        try:
            out.append(decode(data[pos : pos + 4 + length]))
        except CommandDecodeError as exc:
            if not recover or exc.opaque is None:
                return out, True, 0
            out.append(UndecodableCommand.from_error(exc))
        except FrameError:
            return out, True, 0
        pos += 4 + length
    return out, False, len(data) - pos


@fuzz_settings(300)
@given(streams(), st.lists(st.integers(1, 40), max_size=20), st.booleans(), st.sampled_from([64, 4096, 1 << 24]))
def test_frame_splitter_any_stream_any_chunking(data: bytes, cuts: list[int], recover: bool, limit: int) -> None:
    dec = FrameDecoder(limit, recover=recover)
    got: list[RemotingCommand] = []
    failed = False
    pos = 0
    try:
        for c in [*cuts, len(data)]:
            chunk = data[pos : pos + c]
            pos += c
            if chunk:
                got.extend(dec.feed(chunk if len(got) % 2 else memoryview(chunk)))
    except FrameError:
        failed = True
    want, want_failed, left = model(data, limit, recover)
    assert failed == want_failed
    if failed:
        assert got == want[: len(got)]
    else:
        assert got == want and dec.buffered == left
    for cmd in got:
        check_command(cmd)


def test_trickled_length_word_allocates_nothing_up_front() -> None:
    dec = FrameDecoder(recover=True)
    assert dec.feed(struct.pack(">i", 16 * 1024 * 1024 - 4)) == []
    assert dec.buffered == 4
    for _ in range(100):
        dec.feed(b"x")
    assert dec.buffered == 104  # grows with what arrived, not with what was announced


def test_buffer_released_after_a_large_frame() -> None:
    import sys

    dec = FrameDecoder(recover=True)
    big = encode(RemotingCommand.request(10, body=b"y" * (4 * 1024 * 1024)))
    out = []
    for i in range(0, len(big), 65536):
        out += dec.feed(big[i : i + 65536])
    assert len(out) == 1 and dec.buffered == 0
    assert sys.getsizeof(dec._buf) < 64 * 1024  # an idle connection holds no big buffer


# --------------------------------------------------------------------------- header accessors

java_int_texts = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.integers().map(lambda n: f"+{n}"),
    st.text(alphabet="+-0123456789 _\u0663x.e", max_size=25),
    st.text(max_size=10),
    st.sampled_from(["", "-", "+", "00012", "-0", "٣", "1_000", " 7", "7 ", "9" * 5000]),
)


@fuzz_settings(300)
@given(java_int_texts, st.sampled_from(sorted(JAVA_TYPES)))
def test_ext_int_is_java_parse_with_range(text: str, bits: int) -> None:
    cmd = RemotingCommand(10, ext={"f": text})
    _name, lo, hi = JAVA_TYPES[bits]
    digits = text[1:] if text[:1] in "+-" and text else text
    java_ok = bool(digits) and digits.isascii() and digits.isdigit() and len(digits) < 30 and lo <= int(text) <= hi
    try:
        v = ext_int(cmd, "f", -1, bits=bits)
    except HeaderError as exc:
        assert not java_ok and text != ""
        assert exc.field == "f" and exc.code == 1 and f"Java {JAVA_TYPES[bits][0]}" in str(exc)
        return
    if text == "":
        assert v == -1
    else:
        assert java_ok and v == int(text) and type(v) is int
    if bits == 32:
        try:
            assert ext_i32(cmd, "f", -1) == v
        except HeaderError:
            raise AssertionError("ext_i32 disagrees with ext_int(bits=32)") from None


@fuzz_settings(300)
@given(st.one_of(json_header_texts().map(lambda t: t.encode("utf-8", "surrogatepass")), mutated_headers()),
       st.binary(max_size=8))
def test_json_header_scanner_path_agrees_with_strict_without_orjson(header: bytes, body: bytes) -> None:
    """The same property with the optional orjson parser switched off (installs without the extra)."""
    data = frame(header, body)
    saved = headercodec._orjson_loads
    headercodec._orjson_loads = None
    try:
        got = outcome(data)
        with strict_only():
            strict = outcome(data)
    finally:
        headercodec._orjson_loads = saved
    assert got == strict, (header, got, strict)


def test_orjson_is_the_fast_parser_when_installed() -> None:
    import importlib.util

    assert (headercodec._orjson_loads is not None) == (importlib.util.find_spec("orjson") is not None)
