"""Frame codec tests, without sockets: reference worked examples, streaming, errors, round trips."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.protocol.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from rmq.protocol.command import (
    FrameError,
    HeaderError,
    RemotingCommand,
    ext_bool,
    ext_int,
    ext_str,
    normalize_ext,
)
from rmq.protocol.frame import FrameDecoder, decode, encode, encode_parts

REF_JSON_HEADER = (
    b'{"code":0,"extFields":{"offset":"5"},"flag":1,"language":"JAVA","opaque":7,'
    b'"serializeTypeCurrentRPC":"JSON","version":409}'
)
REF_BINARY_HEADER = bytes.fromhex("0000 00 0199 00000007 00000001 00000000 0000000d 0006 6f6666736574 00000001 35")


def ref_response(serialize_type: int = SerializeType.JSON) -> RemotingCommand:
    req = RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, opaque=7, serialize_type=serialize_type)
    return req.response(ext={"offset": "5"})


def frame(header: bytes, body: bytes = b"", st: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (st << 24) | len(header)) + header + body


# --------------------------------------------------------------------------- reference examples


def test_reference_json_frame_bytes() -> None:
    data = encode(ref_response())
    assert len(REF_JSON_HEADER) == 122
    assert data[:8] == bytes.fromhex("0000007e0000007a")
    assert data[8:] == REF_JSON_HEADER


def test_reference_binary_frame_bytes() -> None:
    data = encode(ref_response(SerializeType.ROCKETMQ))
    assert len(REF_BINARY_HEADER) == 34
    assert data[4:8] == bytes.fromhex("01000022")
    assert data[8:] == REF_BINARY_HEADER
    assert struct.unpack(">i", data[:4])[0] == 4 + 34


@pytest.mark.parametrize("st", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_reference_frames_decode(st: int) -> None:
    cmd = decode(encode(ref_response(st)))
    assert cmd.code == ResponseCode.SUCCESS
    assert cmd.opaque == 7
    assert cmd.flag == 1 and cmd.is_response and not cmd.is_oneway
    assert cmd.language == "JAVA"
    assert cmd.version == 409
    assert cmd.ext == {"offset": "5"}
    assert cmd.remark is None
    assert cmd.serialize_type == st
    assert cmd.body == b""


def test_decode_reference_header_given_as_bytes() -> None:
    cmd = decode(frame(REF_JSON_HEADER))
    assert (cmd.code, cmd.opaque, cmd.ext) == (0, 7, {"offset": "5"})
    cmd = decode(frame(REF_BINARY_HEADER, st=1))
    assert (cmd.code, cmd.opaque, cmd.ext, cmd.language) == (0, 7, {"offset": "5"}, "JAVA")


# --------------------------------------------------------------------------- command semantics


def test_request_and_response_defaults() -> None:
    req = RemotingCommand.request(RequestCode.HEART_BEAT, body=b"{}", opaque=3)
    assert req.language == "PYTHON" and req.version == 409 and req.flag == 0
    assert not req.is_response and not req.is_oneway
    ow = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {"a": "b"}, oneway=True)
    assert ow.is_oneway and ow.flag == 2
    resp = req.response(ResponseCode.SYSTEM_ERROR, remark="boom", body=b"x")
    assert resp.opaque == 3 and resp.flag == 1 and resp.language == "JAVA" and resp.code == 1
    assert resp.is_response and resp.remark == "boom" and resp.body == b"x"
    assert RemotingCommand.request(40, {"consumerGroup": "G"}, oneway=True, language="JAVA").language == "JAVA"
    breq = RemotingCommand.request(10, serialize_type=SerializeType.ROCKETMQ)
    assert breq.response().serialize_type == SerializeType.ROCKETMQ


def test_request_without_ext_omits_extfields_response_keeps_it() -> None:
    req = RemotingCommand.request(RequestCode.HEART_BEAT, opaque=1)
    hdr = json.loads(encode(req)[8:])
    assert "extFields" not in hdr and "remark" not in hdr
    assert hdr["serializeTypeCurrentRPC"] == "JSON"
    resp = req.response()
    hdr = json.loads(encode(resp)[8:])
    assert hdr["extFields"] == {}


def test_json_keys_alphabetical_like_fastjson() -> None:
    req = RemotingCommand.request(10, {"b": "1", "a": "2"}, body=b"body")
    req.remark = "r"
    text = encode(req)[8:-4].decode()
    keys = list(json.loads(text))
    assert keys == sorted(keys)
    assert encode(req).endswith(b"body")


def test_encoded_ext_values_are_strings() -> None:
    resp = RemotingCommand.request(14, opaque=1).response(ext={"offset": 5, "ok": True, "none": None})  # type: ignore[dict-item]
    hdr = json.loads(encode(resp)[8:])
    assert hdr["extFields"] == {"offset": "5", "ok": "true"}


def test_enum_codes_are_plain_ints() -> None:
    cmd = RemotingCommand(RequestCode.PULL_MESSAGE)
    assert type(cmd.code) is int and cmd.code == 11
    assert b'"code":11' in encode(cmd)


def test_non_ascii_strings_escape_and_round_trip() -> None:
    cmd = RemotingCommand.request(10, {"topic": "主题", "k": 'quote" back\\slash\n'}, body=b"\x00\xff")
    cmd.remark = "ошибка"
    data = encode(cmd)
    assert data[8:].split(b"}", 1)[0].isascii()
    assert decode(data) == cmd
    cmd.serialize_type = SerializeType.ROCKETMQ
    assert decode(encode(cmd)) == cmd


# --------------------------------------------------------------------------- ext normalisation


def test_ext_normalisation_of_cpp_and_client_a_types() -> None:
    header = {
        "code": 11,
        "flag": 0,
        "language": "CPP",
        "opaque": 9,
        "remark": "",
        "version": 63,
        "extFields": {
            "queueId": 3,
            "queueOffset": "12",
            "unitMode": "0",
            "batch": "1",
            "k": False,
            "t": True,
            "skip": None,
            "big": 9007199254740993,
            "f": 2.0,
        },
    }
    cmd = decode(frame(json.dumps(header).encode() + b"\n"))
    assert cmd.ext == {
        "queueId": "3",
        "queueOffset": "12",
        "unitMode": "0",
        "batch": "1",
        "k": "false",
        "t": "true",
        "big": "9007199254740993",
        "f": "2",
    }
    assert cmd.remark == "" and cmd.language == "CPP" and cmd.version == 63
    assert ext_int(cmd, "queueId") == 3
    assert ext_int(cmd, "big") == 9007199254740993
    assert ext_bool(cmd, "batch") is True
    assert ext_bool(cmd, "unitMode") is False
    assert ext_bool(cmd, "t") is True and ext_bool(cmd, "k") is False
    assert ext_bool(cmd, "missing", False) is False
    assert ext_str(cmd, "queueOffset") == "12"


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("TRUE", True), ("1", True), ("True", True),
                                                 ("false", False), ("0", False), ("yes", False)])
def test_ext_bool_lenient(value: str, expected: bool) -> None:
    assert ext_bool(RemotingCommand(1, ext={"b": value}), "b") is expected


def test_header_errors_name_the_field() -> None:
    cmd = RemotingCommand(11, ext={"queueId": "x1", "topic": "t"})
    with pytest.raises(HeaderError, match="'queueId' is not an integer") as ei:
        ext_int(cmd, "queueId")
    assert ei.value.code == ResponseCode.SYSTEM_ERROR and ei.value.field == "queueId"
    with pytest.raises(HeaderError, match="'consumerGroup' is missing"):
        ext_str(cmd, "consumerGroup")
    with pytest.raises(HeaderError, match="'sysFlag' is missing"):
        ext_int(cmd, "sysFlag")
    with pytest.raises(HeaderError, match="'batch' is missing"):
        ext_bool(cmd, "batch")
    assert ext_int(cmd, "sysFlag", 0) == 0
    assert ext_str(cmd, "x", None) is None


def test_normalize_ext_keeps_identity_for_string_dicts() -> None:
    d = {"a": "1"}
    assert normalize_ext(d) is d
    assert normalize_ext({"a": 1, 2: "x"}) == {"a": "1", "2": "x"}  # type: ignore[dict-item]
    assert normalize_ext(None) == {}


# --------------------------------------------------------------------------- streaming


def sample_commands() -> list[RemotingCommand]:
    return [
        RemotingCommand.request(10, {"topic": "T", "queueId": "1"}, body=b"hello", opaque=1),
        RemotingCommand.request(34, body=b'{"clientID":"x"}', opaque=2),
        RemotingCommand.request(15, {"commitOffset": "7"}, oneway=True, opaque=3),
        RemotingCommand.request(11, {"a": "b"}, body=b"\x00" * 1000, opaque=4, serialize_type=1),
        RemotingCommand.request(14, opaque=5).response(ext={"offset": "5"}),
    ]


def test_byte_by_byte_feed() -> None:
    cmds = sample_commands()
    stream = b"".join(encode(c) for c in cmds)
    dec = FrameDecoder()
    out: list[RemotingCommand] = []
    for i in range(len(stream)):
        out.extend(dec.feed(stream[i : i + 1]))
    assert out == cmds
    assert dec.buffered == 0


def test_many_frames_in_one_chunk_and_split_points() -> None:
    cmds = sample_commands() * 20
    stream = b"".join(encode(c) for c in cmds)
    assert FrameDecoder().feed(stream) == cmds
    for cut in (1, 3, 4, 7, 8, 50, len(stream) // 2, len(stream) - 1):
        dec = FrameDecoder()
        got = dec.feed(stream[:cut]) + dec.feed(stream[cut:])
        assert got == cmds, cut


def test_feed_accepts_memoryview_and_bytearray() -> None:
    data = encode(sample_commands()[0])
    assert FrameDecoder().feed(memoryview(data)) == [sample_commands()[0]]
    dec = FrameDecoder()
    assert dec.feed(bytearray(data[:10])) == []
    assert dec.feed(bytearray(data[10:])) == [sample_commands()[0]]


def test_body_is_bytes_even_from_buffer() -> None:
    data = encode(sample_commands()[0])
    dec = FrameDecoder()
    dec.feed(data[:5])
    (cmd,) = dec.feed(data[5:])
    assert type(cmd.body) is bytes and cmd.body == b"hello"


def test_encode_parts_matches_encode() -> None:
    for c in sample_commands():
        head, body = encode_parts(c)
        assert head + body == encode(c)


# --------------------------------------------------------------------------- malformed input


def test_length_below_minimum() -> None:
    with pytest.raises(FrameError, match="frame length 3 is below the 4-byte minimum"):
        FrameDecoder().feed(b"\x00\x00\x00\x03abc")
    with pytest.raises(FrameError, match="below"):
        FrameDecoder().feed(b"\xff\xff\xff\xff")


def test_oversized_detected_from_length_word_alone() -> None:
    dec = FrameDecoder(max_frame_size=1024)
    with pytest.raises(FrameError, match="frame of 20971524 bytes exceeds the 1024-byte limit"):
        dec.feed(struct.pack(">i", 20 * 1024 * 1024))
    default = FrameDecoder()
    with pytest.raises(FrameError, match="exceeds the 16777216-byte limit"):
        default.feed(struct.pack(">i", 16 * 1024 * 1024 - 3))


def test_frame_at_limit_accepted() -> None:
    """The limit counts the length word too, as Java's LengthFieldBasedFrameDecoder does."""
    data = encode(RemotingCommand(1, body=b"x" * 100))
    assert len(FrameDecoder(max_frame_size=len(data)).feed(data)) == 1
    with pytest.raises(FrameError, match="exceeds"):
        FrameDecoder(max_frame_size=len(data) - 1).feed(data)


def test_header_length_exceeds_frame() -> None:
    bad = struct.pack(">iI", 10, 100) + b"{}" + b"\x00" * 4
    with pytest.raises(FrameError, match="header length 100 exceeds the 10-byte frame"):
        FrameDecoder().feed(bad)


@pytest.mark.parametrize(
    ("header", "error"),
    [
        (b"{not json", "bad JSON header"),
        (b"[1,2]", "expected an object, got list"),
        (b'{"opaque":1}', "lacks 'code'"),
        (b'{"code":"x"}', "not an integer"),
        (b'{"code":1,"extFields":[]}', "extFields is a list"),
        (b'{"code":1,"remark":"\xff\xfe"}', "bad JSON header"),
    ],
)
def test_bad_json(header: bytes, error: str) -> None:
    with pytest.raises(FrameError, match=error):
        FrameDecoder().feed(frame(header))


def test_json_header_whitespace_around_object() -> None:
    assert decode(frame(b'{"code":1}\n')).code == 1  # C++ 1.2.3 style
    assert decode(frame(b' \t{"code":2} ')).code == 2
    with pytest.raises(FrameError, match="bad JSON header"):
        decode(frame(b'{"code":1} x'))
    with pytest.raises(FrameError, match="bad JSON header"):
        decode(frame(b""))


def test_unknown_serialize_type() -> None:
    with pytest.raises(FrameError, match="unknown serialize type 7"):
        FrameDecoder().feed(frame(b"{}", st=7))


def test_bad_binary_headers() -> None:
    with pytest.raises(FrameError, match="shorter than the 21-byte minimum"):
        FrameDecoder().feed(frame(b"\x00" * 10, st=1))
    good = REF_BINARY_HEADER
    with pytest.raises(FrameError, match="remark length"):
        FrameDecoder().feed(frame(good[:13] + b"\x00\x00\x10\x00" + good[17:], st=1))
    with pytest.raises(FrameError, match="ext length"):
        FrameDecoder().feed(frame(good[:17] + b"\x00\x00\x00\x0e" + good[21:], st=1))
    with pytest.raises(FrameError, match="ext value length"):
        FrameDecoder().feed(frame(good[:29] + b"\x00\x00\x00\x09" + good[33:], st=1))
    with pytest.raises(FrameError, match="invalid UTF-8"):
        FrameDecoder().feed(frame(good[:23] + b"\xff" + good[24:], st=1))


def test_binary_zero_lengths_mean_null() -> None:
    # entry with an empty value is dropped; empty remark is None
    entries = struct.pack(">H", 1) + b"k" + struct.pack(">i", 0) + struct.pack(">H", 1) + b"a" + struct.pack(
        ">i", 1
    ) + b"b"
    hdr = struct.pack(">hbhiii", 10, 1, 63, 5, 0, 0) + struct.pack(">i", len(entries)) + entries
    cmd = decode(frame(hdr, b"payload", st=1))
    assert cmd.ext == {"a": "b"} and cmd.remark is None and cmd.language == "CPP"
    assert cmd.body == b"payload" and cmd.code == 10 and cmd.version == 63


def test_garbage_and_truncation() -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    data = encode(sample_commands()[0])
    dec = FrameDecoder()
    assert dec.feed(data[:-1]) == []
    assert dec.buffered == len(data) - 1
    with pytest.raises(FrameError, match="exactly one frame"):
        decode(data[:-1])
    with pytest.raises(FrameError, match="exactly one frame"):
        decode(data + data)


# --------------------------------------------------------------------------- property-based

_text = st.text(max_size=20)
_ext = st.dictionaries(st.text(min_size=1, max_size=10), _text, max_size=6)
_lang = st.sampled_from([m.name for m in LanguageCode])


def _commands(serialize_type: int) -> st.SearchStrategy[RemotingCommand]:
    return st.builds(
        lambda code, lang, version, opaque, flag, remark, ext, body: RemotingCommand(
            code,
            language=lang,
            version=version,
            opaque=opaque,
            flag=flag,
            remark=remark,
            ext=ext,
            body=body,
            serialize_type=serialize_type,
        ),
        st.integers(-(2**15), 2**15 - 1),
        _lang,
        st.integers(-(2**15), 2**15 - 1),
        st.integers(-(2**31), 2**31 - 1),
        st.integers(0, 3),
        st.none() | _text,
        _ext,
        st.binary(max_size=200),
    )


@given(_commands(SerializeType.JSON))
@settings(max_examples=300)
def test_json_round_trip(cmd: RemotingCommand) -> None:
    assert decode(encode(cmd)) == cmd


@given(_commands(SerializeType.ROCKETMQ))
@settings(max_examples=300)
def test_binary_round_trip(cmd: RemotingCommand) -> None:
    got = decode(encode(cmd))
    # binary: an empty remark or value has no null/empty distinction on the wire (length 0 = null)
    cmd.remark = cmd.remark or None
    cmd.ext = {k: v for k, v in cmd.ext.items() if v}
    assert got == cmd


@given(st.lists(_commands(SerializeType.JSON) | _commands(SerializeType.ROCKETMQ), max_size=8),
       st.lists(st.integers(1, 64), max_size=30))
@settings(max_examples=150)
def test_stream_round_trip_any_chunking(cmds: list[RemotingCommand], cuts: list[int]) -> None:
    stream = b"".join(encode(c) for c in cmds)
    dec = FrameDecoder()
    out: list[RemotingCommand] = []
    pos = 0
    for c in cuts:
        out.extend(dec.feed(stream[pos : pos + c]))
        pos += c
    out.extend(dec.feed(stream[pos:]))
    for c in cmds:
        if c.serialize_type == SerializeType.ROCKETMQ:  # length 0 = null on the binary wire
            c.remark = c.remark or None
            c.ext = {k: v for k, v in c.ext.items() if v}
    assert out == cmds
