"""The optional orjson paths of the JSON header codec write and read exactly what the plain paths do.

Encode: ``encode_json_header`` (orjson for ``extFields`` when installed) against the escaping
path ``_encode_json_header`` on hostile commands: non-ASCII, DEL, control characters, lone
surrogates, int subclasses, non-string ext values. Byte-identical output, or the same exception.
Decode: the inline plain-shape check against the field-by-field one, on real clients' headers.
"""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.protocol import headercodec
from rmq.protocol.codes import LanguageCode
from rmq.protocol.command import RESPONSE_FLAG, RemotingCommand
from rmq.protocol.headercodec import _encode_json_header, decode_json_header, encode_json_header
from rmq.testing.fuzz import fuzz_settings

LANGS = sorted(m.name for m in LanguageCode)


class Color(enum.IntEnum):
    RED = 7


class Tag(str, enum.Enum):  # noqa: UP042 - str() gives "Tag.A", not the value: the case to get right
    A = "a"


class Sub(str):
    pass


hostile_text = st.one_of(
    st.text(max_size=12),
    st.text(alphabet="\x00\x01\x02\x1f\x7f\"\\/é\u2028\ud800\udfff\U0001f600aZ", max_size=8),
    st.sampled_from(["", "DefaultRegion", "true", "\x7f", "\ud800", "é"]),
)
ints = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([0, 1, 310, Color.RED, True]))
ext_values = st.one_of(hostile_text, st.integers(-(2**70), 2**70), st.booleans(), st.none(),
                       st.sampled_from([Tag.A, Sub("x"), 5.0, 2.5, [1], {"k": "v"}]))
ext_keys = st.one_of(hostile_text, st.sampled_from([Sub("k"), 3]))


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    cmd = RemotingCommand(0)
    cmd.code = draw(ints)
    cmd.opaque = draw(ints)
    cmd.version = draw(ints)
    cmd.flag = draw(st.one_of(ints, st.sampled_from([RESPONSE_FLAG, 2, 3])))
    cmd.language = draw(st.one_of(st.sampled_from(LANGS), hostile_text))
    cmd.remark = draw(st.one_of(st.none(), hostile_text))
    cmd.ext = draw(st.dictionaries(ext_keys, ext_values, max_size=6))
    return cmd


def encoded(fn: Any, cmd: RemotingCommand) -> tuple[str, Any]:
    try:
        return ("ok", fn(cmd))
    except Exception as exc:  # noqa: BLE001 - both paths must fail alike
        return ("error", type(exc).__name__)


@fuzz_settings(400)
@given(commands())
def test_orjson_encode_path_writes_the_escaping_paths_bytes(cmd: RemotingCommand) -> None:
    got = encoded(encode_json_header, cmd)
    assert got == encoded(_encode_json_header, cmd), cmd
    if got[0] == "ok" and bool not in {type(cmd.code), type(cmd.opaque), type(cmd.flag), type(cmd.version)}:
        json.loads(got[1])  # and it is JSON (a bool field is written as Python spells it, by both paths)


def test_encode_examples() -> None:
    resp = RemotingCommand(0, language="JAVA", opaque=9, flag=RESPONSE_FLAG,
                           ext={"msgId": "7F0000010000", "queueId": "3", "MSG_REGION": "DefaultRegion"})
    assert encode_json_header(resp) == (
        b'{"code":0,"extFields":{"msgId":"7F0000010000","queueId":"3","MSG_REGION":"DefaultRegion"},"flag":1,'
        b'"language":"JAVA","opaque":9,"serializeTypeCurrentRPC":"JSON","version":409}'
    ).replace(b"409", str(resp.version).encode())
    for ext in ({"k": "é"}, {"k": "\x7f"}, {"k": "\ud800"}, {"k": 5}, {"k": None}):
        cmd = RemotingCommand(10, ext=ext, remark="ok", opaque=1)
        assert encode_json_header(cmd) == _encode_json_header(cmd)


# --------------------------------------------------------------------------- decode


def client_headers() -> list[bytes]:
    """SEND and PULL headers as Java, rmq and C++ clients write them, plus near misses of the plain shape."""
    props = "TAGS\x01TagA\x02UNIQ_KEY\x017F0000014A75FAF31A487722B1790000\x02WAIT\x01true"
    send = {"a": "group", "b": "Topic", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1795489962361",
            "h": "0", "i": props, "j": "0", "k": "false", "m": "false"}
    out = []
    cpp = {"queueId": 1, "flag": 0, "batch": False, "AccessKey": "", "n": None}
    for ext in (send, {**send, "i": "é\u2028"}, cpp, {**cpp, "big": 2**63}, {**cpp, "f": 1.5}, {**cpp, "l": [1]},
                {**cpp, "neg": -(2**63)}, {}, None):
        for extra in ({}, {"remark": "r"}, {"remark": ""}, {"remark": 5}, {"language": "CPP"}, {"language": "KLINGON"}, {"language": 3},
                      {"version": 2**31}, {"opaque": -1}, {"serializeTypeCurrentRPC": 1}, {"flag": 1.0}):
            h: dict[str, Any] = {"code": 310, "flag": 0, "language": "JAVA", "opaque": 7, "version": 409}
            if ext is not None:
                h["extFields"] = ext
            h.update(extra)
            out.append(json.dumps(h).encode())
            out.append(json.dumps(h, ensure_ascii=False).encode())
    out.append(b'{"code":10,"opaque":5,"extFields":{"k":"\\ud800"}}')
    out.append(b'{"code":10,"opaque":5,"extFields":{"k":"\\ud83d\\ude00","q":4}}')
    return out


@pytest.mark.parametrize("header", client_headers())
def test_plain_shape_path_decodes_what_the_checked_path_does(header: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    def outcome() -> tuple[str, Any]:
        try:
            return ("ok", decode_json_header(header, b"body"))
        except Exception as exc:  # noqa: BLE001 - compared, not raised
            return ("error", (type(exc).__name__, getattr(exc, "opaque", None), getattr(exc, "kind", None)))

    got = outcome()
    monkeypatch.setattr(headercodec, "_INT_MAX", -(2**40))  # the inline check never passes: field by field
    assert got == outcome()
    monkeypatch.setattr(headercodec, "_FAST_MAX_CHARS", -1)  # and the strict parser agrees
    assert got == outcome()
