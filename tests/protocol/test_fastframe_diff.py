"""The compiled frame decoder (``rmq.protocol._fastframe``) against the pure one, byte stream by byte stream.

Both paths get the same streams -- valid commands of every shape in both serialize types, the
header shapes real clients write (C++'s numbers, booleans and nulls in extFields, whitespace, a
trailing newline), malformed and hostile frames, garbage -- cut into the same chunks, and must
agree on every command field by field (types and extFields order included), on every error (type,
message, kind, opaque, flag) and on the bytes left buffered. Valid streams are also split at every
byte offset. ``make fuzz`` runs these properties with a million inputs, ``make fuzz-asan`` against
an AddressSanitizer/UBSan build of the extension.
"""

from __future__ import annotations

import json
import os
import random
import struct
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.protocol import frame as frame_mod
from rmq.protocol.codes import LanguageCode, SerializeType
from rmq.protocol.command import FrameError, HeldAnswer, RemotingCommand, UndecodableCommand
from rmq.protocol.frame import FrameDecoder, encode
from rmq.testing.fuzz import compiler_present, fuzz_settings, fuzzing, mutate

LANGS = sorted(m.name for m in LanguageCode)
I32 = (-(2**31), 2**31 - 1)
I16 = (-(2**15), 2**15 - 1)
LIMITS = [64, 4096, 1 << 24]


def test_compiled_codec_serves_unless_rmq_pure() -> None:
    """Where a compiler exists the extension must have been built (so CI proves both paths run)."""
    if os.getenv("RMQ_PURE"):
        assert frame_mod.CODEC == "pure (RMQ_PURE set)" and frame_mod._split is None
    elif compiler_present():
        assert frame_mod.CODEC == "compiled", "the compiled codec was not built: run make install-test"
    assert FrameDecoder(compiled=True)._split is not None or not compiler_present()
    alt = os.getenv("RMQ_FASTFRAME")  # make fuzz-asan: the sanitizer build must be the one tested
    if alt:
        split = FrameDecoder(compiled=True)._split
        assert split is not None and sys.modules[split.__module__].__file__ == alt


def frame(header: bytes, body: bytes = b"", st_: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (st_ << 24) | len(header)) + header + body


# --------------------------------------------------------------------------- running both paths


def describe_error(exc: BaseException) -> tuple[Any, ...]:
    return (type(exc), str(exc), getattr(exc, "kind", None), getattr(exc, "serialize_type", None),
            getattr(exc, "opaque", None), getattr(exc, "flag", None), getattr(exc, "code", None))


def describe(cmd: RemotingCommand) -> tuple[Any, ...]:
    """Every field with its exact type, extFields in order; an UndecodableCommand's error too."""
    fields = tuple((type(getattr(cmd, s)), getattr(cmd, s)) for s in RemotingCommand.__slots__ if s != "ext")
    ext = [(type(k), k, type(v), v) for k, v in cmd.ext.items()]
    err = describe_error(cmd.error) if isinstance(cmd, UndecodableCommand) else None
    return (type(cmd), fields, type(cmd.ext), ext, err)


def run(chunks: list[bytes | bytearray | memoryview], compiled: bool, limit: int, recover: bool) -> Any:
    dec = FrameDecoder(limit, recover=recover, compiled=compiled)
    out: list[tuple[Any, ...]] = []
    for chunk in chunks:
        try:
            out += [describe(c) for c in dec.feed(chunk)]
        except FrameError as exc:
            return out, describe_error(exc), dec.buffered
    return out, None, dec.buffered


def same(chunks: list[bytes], limit: int = 1 << 24, recover: bool = True) -> Any:
    want = run(chunks, False, limit, recover)
    got = run(chunks, True, limit, recover)
    assert got == want, chunks
    return got


def cut(data: bytes, cuts: list[int]) -> list[bytes]:
    chunks, pos = [], 0
    for c in cuts:
        chunks.append(data[pos : pos + c])
        pos += c
    chunks.append(data[pos:])
    return [c for c in chunks if c]


# --------------------------------------------------------------------------- strategies

texts = st.one_of(st.text(max_size=12), st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
                  st.sampled_from(["", "TopicTest", "\u4e2d\u6587", "\U0001f600", "a\"b", "\\", "\x00\x1f\x7f"]))
ext_dicts = st.dictionaries(texts, texts, max_size=8)


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    st_ = draw(st.sampled_from([0, 1]))
    binary = st_ == 1
    huge = draw(st.integers(0, 15)) == 0  # a remark or body past 64 KiB, now and then
    remark = draw(st.one_of(st.none(), texts, st.just("\u00e9" * 3000)) if not huge
                  else st.sampled_from(["r" * 70000, None]))
    return RemotingCommand(
        draw(st.integers(*I16) if binary else st.one_of(st.integers(0, 400), st.integers(*I32))),
        language=draw(st.sampled_from(LANGS)),
        version=draw(st.integers(*I16) if binary else st.one_of(st.integers(0, 500), st.integers(*I32))),
        opaque=draw(st.integers(*I32)),
        flag=draw(st.sampled_from([0, 1, 2, 3]) | st.integers(*I32)),
        remark=remark,
        ext=draw(ext_dicts),
        body=draw(st.one_of(st.binary(max_size=40), st.just(b"")) if not huge else st.just(b"x" * 70000)),
        serialize_type=st_,
    )


# JSON values and literals for hand-written headers: what C++ and hostile peers write
ext_json_values = st.one_of(
    texts.map(json.dumps),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["true", "false", "null", "0", "-0", "007", "1.0", "1e3", "-1", "9223372036854775807",
                     "9223372036854775808", "123456789012345678", "1234567890123456789", '"\\u00e9"', '"\\n"',
                     "[]", "{}", '{"a":1}', "NaN", '"\x01"', "tru", '"\\ud800"']),
)
int_literals = st.one_of(st.integers(-600, 600).map(str), st.integers(*I32).map(str),
                         st.sampled_from(["2147483648", "-2147483649", "-0", "01", "1.5", "1e2", '"10"', "null",
                                          "true", "99999999999", "-", ""]))
ws = st.sampled_from(["", "", "", " ", "\n", "\t", "\r\n  "])


# what real clients write: every value of a shape the compiled path decodes itself (or nearly: -0)
plain_texts = st.one_of(
    st.text(alphabet=st.characters(codec="utf-8", min_codepoint=0x20, exclude_characters='"\\'), max_size=30),
    st.sampled_from(["", "TopicTest", "\u4e2d\u6587", "\U0001f600", "\x7f"]),
).map(lambda t: json.dumps(t, ensure_ascii=False))
plain_ext_values = st.one_of(
    plain_texts,
    st.integers(-(10**18) + 1, 10**18 - 1).map(str),
    st.sampled_from(["true", "false", "null", "0", "-0", "-1"]),
)
plain_int_literals = st.one_of(st.integers(-600, 600).map(str), st.integers(*I32).map(str))


@st.composite
def json_headers(draw: st.DrawFn) -> bytes:
    """A JSON header object written by hand: known keys in any order; when hostile, values of every kind,
    repeated and unknown keys, trailing junk."""
    hostile = draw(st.booleans())
    ints = int_literals if hostile else plain_int_literals
    values = ext_json_values if hostile else plain_ext_values
    members: list[tuple[str, str]] = []
    for key in ("code", "opaque", "flag", "version"):
        if key == "code" and not hostile or draw(st.integers(0, 9)):
            members.append((key, draw(ints)))
    if draw(st.booleans()):
        lang = draw(st.one_of(st.sampled_from(LANGS).map(json.dumps), st.sampled_from(['"java"', "3", "null", '"X"'])
                              if hostile else st.sampled_from(LANGS).map(json.dumps)))
        members.append(("language", lang))
    if draw(st.booleans()):
        members.append(("remark", draw(st.one_of(texts.map(json.dumps), st.sampled_from(["null", "1", "[]"]))
                                       if hostile else st.one_of(plain_texts, st.just("null")))))
    if draw(st.integers(0, 4)):
        keys = texts.map(json.dumps) if hostile else plain_texts
        entries = [(draw(keys), draw(values)) for _ in range(draw(st.integers(0, 8)))]
        if entries and hostile and draw(st.integers(0, 5)) == 0:
            entries.append(draw(st.sampled_from(entries)))  # a repeated key
        w = draw(ws)
        members.append(("extFields", "{" + w + ("," + w).join(f"{k}{w}:{w}{v}" for k, v in entries) + w + "}"))
    if draw(st.booleans()):
        members.append(("serializeTypeCurrentRPC",
                        draw(st.sampled_from(['"JSON"', '"ROCKETMQ"', "null", "0", '"\u00e9"'] if hostile else ['"JSON"']))))
    if hostile and draw(st.integers(0, 9)) == 0:
        members.append((draw(st.sampled_from(["unknown", "code", "extFields", "remark"])), draw(ext_json_values)))
    members = draw(st.permutations(members))
    w = draw(ws)
    text = "{" + w + ("," + w).join(f'"{k}"{w}:{w}{v}' for k, v in members) + w + "}"
    text += draw(st.sampled_from(["", "", "\n", " ", "x", "}", ","] if hostile else ["", "\n", " "]))
    return text.encode("utf-8", "surrogatepass")


@st.composite
def binary_headers(draw: st.DrawFn) -> bytes:
    if draw(st.integers(0, 4)) == 0:
        return draw(st.binary(max_size=64))
    remark = draw(st.one_of(st.binary(max_size=8), texts.map(lambda t: t.encode())))
    entries = b""
    for _ in range(draw(st.integers(0, 4))):
        k = draw(st.one_of(st.binary(max_size=6), texts.map(lambda t: t.encode()), st.just(b"")))
        v = draw(st.one_of(st.binary(max_size=6), texts.map(lambda t: t.encode()), st.just(b"")))
        entries += struct.pack(">H", len(k)) + k + struct.pack(">i", len(v)) + v
    head = struct.pack(">hbhii", draw(st.integers(*I16)), draw(st.integers(-128, 127)),
                       draw(st.integers(*I16)), draw(st.integers(*I32)), draw(st.integers(*I32)))
    rlen = draw(st.one_of(st.just(len(remark)), st.integers(*I32)))
    elen = draw(st.one_of(st.just(len(entries)), st.integers(*I32)))
    hdr = head + struct.pack(">i", rlen) + remark + struct.pack(">i", elen) + entries
    return mutate(hdr, draw) if draw(st.booleans()) else hdr


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    choice = draw(st.integers(0, 7))
    if choice <= 1:
        return encode(draw(commands()))
    if choice == 2:
        return frame(draw(json_headers()), draw(st.binary(max_size=8)))
    if choice == 3:
        return frame(mutate(draw(json_headers()), draw), draw(st.binary(max_size=8)))
    if choice == 4:
        return frame(draw(binary_headers()), draw(st.binary(max_size=8)), st_=1)
    if choice == 5:  # a bad length word: negative, below 4, oversized, or lying about the header length
        return struct.pack(">i", draw(st.one_of(st.integers(*I32), st.integers(-4, 8),
                                                 st.sampled_from([1 << 24, (1 << 24) - 3, 2**31 - 1]))))
    if choice == 6:  # any header word: unknown serialize type, header length past the frame
        payload = draw(st.binary(max_size=16))
        return struct.pack(">iI", 4 + len(payload), draw(st.integers(0, 2**32 - 1))) + payload
    return draw(st.binary(max_size=16))


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    data = b"".join(draw(st.lists(frames(), max_size=6)))
    return mutate(data, draw) if draw(st.integers(0, 3)) == 0 else data


# --------------------------------------------------------------------------- properties


@fuzz_settings(100)
@given(streams(), st.lists(st.integers(1, 64), max_size=12), st.booleans(), st.sampled_from(LIMITS),
       st.sampled_from(["bytes", "bytearray", "memoryview"]))
def test_any_stream_any_chunking_same_outcome(data: bytes, cuts: list[int], recover: bool, limit: int,
                                              kind: str) -> None:
    chunks: list[Any] = cut(data, cuts)
    if kind != "bytes":
        chunks = [bytearray(c) if kind == "bytearray" else memoryview(c) for c in chunks]
    want = run(chunks, False, limit, recover)
    got = run(chunks, True, limit, recover)
    assert got == want, data


_SPLIT = fuzz_settings(25)


@settings(_SPLIT, max_examples=min(_SPLIT.max_examples, 1000))  # each example is hundreds of inputs
@given(st.lists(commands(), min_size=1, max_size=3))
def test_valid_commands_decode_identically_split_at_every_byte(cmds: list[RemotingCommand]) -> None:
    data = b"".join(encode(c) for c in cmds)
    whole = same([data])
    assert len(whole[0]) == len(cmds) and whole[1] is None and whole[2] == 0
    # every offset of the first 1 KiB (all of a usual frame) and of the last 64 bytes; in between every 1/256th
    offsets = sorted({*range(1, min(len(data), 1024)), *range(max(1, len(data) - 64), len(data)),
                      *range(1, len(data), max(1, len(data) // 256))})
    for k in offsets:
        assert same([data[:k], data[k:]]) == whole


@fuzz_settings(100)
@given(json_headers(), st.binary(max_size=8), st.booleans())
def test_hand_written_json_headers(header: bytes, body: bytes, recover: bool) -> None:
    same([frame(header, body)], recover=recover)


@fuzz_settings(100)
@given(binary_headers(), st.binary(max_size=8), st.booleans())
def test_binary_headers(header: bytes, body: bytes, recover: bool) -> None:
    same([frame(header, body, st_=1)], recover=recover)


@fuzz_settings(100)
@given(st.binary(max_size=200), st.sampled_from(LIMITS), st.booleans())
def test_garbage(data: bytes, limit: int, recover: bool) -> None:
    same([data], limit, recover)


# --------------------------------------------------------------------------- examples


def cpp_send() -> bytes:
    header = (b'{"code":10,"extFields":{"AccessKey":"","batch":"0","bornTimestamp":"1700000000000",'
              b'"defaultTopicQueueNums":4,"flag":0,"producerGroup":"g","properties":"TAGS\\u0001A\\u0002",'
              b'"queueId":1,"reconsumeTimes":0,"sysFlag":0,"topic":"T","unitMode":"0","n":null,"b":true},'
              b'"flag":0,"language":"CPP","opaque":12345,"remark":"","version":63}\n')
    return frame(header, b"x" * 100)


@pytest.mark.parametrize("data", [
    encode(RemotingCommand.request(310, {"a": "g", "b": "T", "c": "TBW102", "d": "4", "e": "1"}, body=b"x" * 1024)),
    encode(RemotingCommand.request(310, {"a": "g"}, body=b"x", serialize_type=1)),
    cpp_send(),
    frame(b'{"code":10,"opaque":1,"extFields":{"k":"v","n":null,"k2":"w"}}'),
    frame(b'{"code":10,"opaque":1,"extFields":{"k":null,"k":"v"}}'),
    frame(b'{"code":10,"opaque":1,"extFields":{"k":"v","k":1}}'),
    frame(b'{"code":10,"opaque":1,"extFields":{"k":"\\u00e9"}}'),
    frame(b'{"code":10,"opaque":1,"remark":"\xff"}'),
    frame(b'{"code":10,"opaque":1,"flag":-0}'),
    frame(b'{"code":10,"opaque":1,"extFields":{"z":-0}}'),
    frame(b'{"code":10,"opaque":7,"flag":0,"extFields":{"q":1.5}}'),
    frame(b'{"code":2147483648,"opaque":9,"flag":0}'),
    frame(b'{"opaque":9,"flag":0}'),
    frame(b"{}"),
    frame(b""),
    frame(b"\x00" * 21, st_=1),
    frame(b"\x00" * 12, st_=1),
    frame(b"\x00" * 13, st_=1),
    frame(b"x", st_=7),
    struct.pack(">i", 3),
    struct.pack(">i", -1),
    struct.pack(">i", 1 << 24) + b"\x00" * 8,
    struct.pack(">iI", 8, 100) + b"abcd",
], ids=lambda d: d[:24].hex())
def test_examples(data: bytes) -> None:
    for recover in (False, True):
        same([data], recover=recover)
        same([data + data], recover=recover)
        same([data[:5], data[5:]], recover=recover)


# --------------------------------------------------------------------------- a mutation loop (volume)

INTERESTING = [0, 1, 3, 4, 5, 8, 21, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0xFFFFFF, 1 << 24, 2**31 - 1, 2**31,
               2**32 - 1]


def seed_frames(rng: random.Random) -> list[bytes]:
    """Valid frames of the shapes the compiled path decodes itself, and a few it hands back."""
    words = ["", "a", "TopicTest", "\u00e9", "\u4e2d", "\U0001f600", "x" * 300, "k\"q", "TAGS\x01A\x02KEYS\x01k\x02", "\\/\t"]
    out = [cpp_send()]
    for i in range(40):
        ext = {rng.choice(words) + str(j): rng.choice(words) for j in range(rng.randint(0, 6))}
        cmd = RemotingCommand(rng.choice([10, 310, 11, 34, -1, 2**31 - 1]) if i % 2 == 0 else rng.randint(-300, 300),
                              language=rng.choice(LANGS), version=rng.randint(-5, 500), opaque=rng.randint(*I32),
                              flag=rng.choice([0, 1, 2, 3]), remark=rng.choice([None, "", "r", "\u00e9t\u00e9"]),
                              ext=ext, body=bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 9]))),
                              serialize_type=i % 2)
        out.append(encode(cmd))
    out += [frame(b'{"code":10,"opaque":1,"extFields":{"k":"v","n":null,"k2":"w","i":-12,"b":false}}\n'),
            frame(b'{ "code" : 10 , "flag" : 1 , "language" : "JAVA" , "serializeTypeCurrentRPC" : "JSON" }'),
            frame(b'{"code":10,"opaque":0,"extFields":{"a":0,"b":-0,"c":123456789012345678,"d":"-0"}}'),
            frame('{"code":10,"remark":"\u00e9\u4e2d","extFields":{"\u00e9":"\U0001f600"}}'.encode())]
    return out


def mutate_rng(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:
            b[min(i, len(b) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif op == 2:
            del b[i : i + rng.randint(1, 8)]
        elif op == 3:
            del b[i:]
        elif op == 4:  # an interesting number over a length word, a header word or a field
            b[i : i + 4] = struct.pack(">I", rng.choice(INTERESTING) & 0xFFFFFFFF)
        elif op == 5:  # a JSON token swapped for another
            b[i:i] = rng.choice([b'"', b"\\", b",", b":", b"{", b"}", b"null", b"-0", b"1.5", b"\xff", b"\xed\xa0\x80",
                                 b'"code":1', b'"extFields":{}', b" "])
        else:
            j = rng.randrange(len(b) + 1)
            b[i:i] = b[min(i, j) : max(i, j)][:64]
    return bytes(b)


def test_mutation_loop(capsys: pytest.CaptureFixture[str]) -> None:
    """Random mutations of valid frames (cheap inputs, a million under make fuzz), both decoders compared,
    and what decodes encoded again by both encoders."""
    n = int(os.environ.get("RMQ_FUZZ_EXAMPLES", "50000")) * 20 if fuzzing() else 2000
    seed = int(os.environ.get("RMQ_FUZZ_SEED", "0")) or random.randrange(1 << 30)
    rng = random.Random(seed)
    corpus = seed_frames(rng)
    codec = frame_mod.compiled_codec()
    for i in range(n):
        data = b"".join(rng.choice(corpus) for _ in range(rng.randint(1, 3)))
        if i % 8:
            data = mutate_rng(data, rng)
        k = rng.randrange(len(data) + 1)
        chunks = [c for c in (data[:k], data[k:]) if c]
        limit, recover = rng.choice(LIMITS), rng.random() < 0.8
        want = run(chunks, False, limit, recover)
        got = run(chunks, True, limit, recover)
        assert got == want, (seed, i, data)
        if codec is not None:  # whatever decoded is encoded again by both encoders
            try:
                cmds = FrameDecoder(limit, recover=True, compiled=True).feed(data)
            except FrameError:
                continue
            for cmd in cmds:
                assert encoded(codec.encode_parts, cmd) == encoded(frame_mod.encode_parts_pure, cmd), (seed, i, data)
    with capsys.disabled():  # the count, in the form make fuzz adds up
        print(f"\ntest_mutation_loop (seed {seed}):\n  - during generate phase\n    - {n} passing, 0 failing")


# --------------------------------------------------------------------------- the encoder


def encoded(fn: Any, cmd: Any) -> Any:
    try:
        head, body = fn(cmd)
    except Exception as exc:  # noqa: BLE001 - the pure encoder's refusals, compared by type and text
        return ("error", type(exc), str(exc))
    return ("ok", type(head), head, type(body), body)


odd_values = st.one_of(st.integers(-(2**70), 2**70), st.booleans(), st.none(), st.floats(allow_nan=False),
                       st.just(SerializeType.JSON), st.text(max_size=5))


@st.composite
def commands_to_encode(draw: st.DrawFn) -> Any:
    cmd = draw(commands())
    if draw(st.booleans()):
        cmd.flag |= 1  # a response: extFields always written
    if draw(st.integers(0, 3)) == 0:  # odd slot values: the pure encoder converts or refuses them
        name = draw(st.sampled_from(["code", "flag", "opaque", "version", "serialize_type", "remark", "language"]))
        setattr(cmd, name, draw(odd_values))
    if draw(st.integers(0, 3)) == 0:
        cmd.ext = {**cmd.ext, draw(texts): draw(odd_values)}
    if draw(st.integers(0, 5)) == 0:  # lone surrogates, DEL, every control character
        cmd.ext = {**cmd.ext, "s": draw(st.sampled_from(["\ud800", "\udfff x", "\x7f", "".join(map(chr, range(32)))]))}
    if draw(st.integers(0, 7)) == 0:
        held = HeldAnswer.__new__(HeldAnswer)
        for s in RemotingCommand.__slots__:
            setattr(held, s, getattr(cmd, s))
        return held
    return cmd


@fuzz_settings(100)
@given(commands_to_encode())
def test_encoder_writes_the_pure_bytes(cmd: RemotingCommand) -> None:
    codec = frame_mod.compiled_codec()
    assert codec is not None or not compiler_present()
    if codec is not None:
        assert encoded(codec.encode_parts, cmd) == encoded(frame_mod.encode_parts_pure, cmd)


def test_encoder_serves_unless_rmq_pure() -> None:
    if not os.getenv("RMQ_PURE") and compiler_present():
        assert frame_mod.encode_parts is not frame_mod.encode_parts_pure
    cmd = RemotingCommand.request(310, {"a": "g", "p": "TAGS\x01A\x02"}, body=b"x", opaque=3).response(
        remark="\u00e9\U0001f600", ext={"msgId": "7F", "queueOffset": "12"})
    assert frame_mod.encode_parts(cmd) == frame_mod.encode_parts_pure(cmd)
