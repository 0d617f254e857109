"""``_faststore.beat_decode`` (the decoder of heartbeats answered per read, fastbeat) against the pure decoder, in process.

HEART_BEAT headers as the clients write them (Java's and rmq's, the C++ client's remark, ext numbers and
newline), with language or version left out, unknown languages, escapes, oneway, other codes, the binary
(ROCKETMQ) serialization, spaces, duplicate keys, and those bytes mutated or cut, from any position of a
read, bodies of any bytes: what the compiled decoder accepts must be a whole frame the pure path
(``frame.decode``) reads alike (opaque, version, body; the language when it is a known name), and the
common shapes must be accepted; fastbeat's answer is the Python path's ``cmd.response()`` byte for byte.
``make fuzz`` runs it with the fuzz profile, ``make fuzz-asan`` against the sanitizer build.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.plugins.broker.fastbeat import answer
from rmq.protocol import storepath
from rmq.protocol.command import RemotingCommand
from rmq.protocol.frame import encode
from rmq.testing.fuzz import compiler_present, decoder_takes, fuzz_settings
from rmq.testing.fuzztargets_beat import _BODY, _frame, beat_agrees

FAST = storepath.compiled_store()
pytestmark = pytest.mark.skipif(FAST is None and not compiler_present(), reason="no C compiler: pure path only")


@st.composite
def beat_frames(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A heartbeat frame and whether it is in the common shape (the compiled decoder must take it)."""
    common = draw(st.booleans())
    body = draw(st.sampled_from([_BODY, b"", b"{}"]) if common else st.one_of(st.just(_BODY), st.binary(max_size=40)))
    shape = draw(st.sampled_from(["rmq", "java", "cpp"] if common else [
        "rmq", "java", "cpp", "oneway", "nolang", "noversion", "lang", "escape", "binary", "code", "space", "dup"]))
    opaque = draw(st.integers(-(2**31), 2**31 - 1))
    if shape in ("rmq", "binary"):
        cmd = RemotingCommand.request(34, None, body, opaque=opaque, serialize_type=1 if shape == "binary" else 0)
        return encode(cmd), common
    h: dict[str, Any] = {"code": 11 if shape == "code" else 34, "flag": 2 if shape == "oneway" else 0,
                         "language": "JAVA", "opaque": opaque, "serializeTypeCurrentRPC": "JSON", "version": 409}
    if shape == "cpp":
        h |= {"language": "CPP", "remark": "", "version": 63, "extFields": {"AccessKey": "", "n": 1}}
    elif shape == "nolang":
        del h["language"]
    elif shape == "noversion":
        del h["version"]
    elif shape == "lang":
        h["language"] = draw(st.sampled_from(["NOPE", "java", "", "PYTHON", "GO"]))
    elif shape == "escape":
        h["remark"] = "é"  # json.dumps writes \u00e9
    head = json.dumps(h, separators=(", ", ":") if shape == "space" else (",", ":"), sort_keys=shape == "cpp").encode()
    if shape == "dup":
        head = head.replace(b'"flag":0', b'"flag":0,"flag":0')
    return _frame(head + (b"\n" if shape == "cpp" else b""), body), common


@given(data=st.data())
@fuzz_settings(300)
def test_what_the_compiled_decoder_takes_the_pure_one_reads_alike(data: st.DataObject) -> None:
    assert FAST is not None
    taken = decoder_takes(data, *data.draw(beat_frames()), FAST.beat_decode)
    if taken is not None:
        got, frame = taken
        assert beat_agrees(got, frame)
        assert answer(got[1]) == encode(RemotingCommand(34, opaque=got[1]).response())


@given(st.binary(max_size=64), st.integers(-3, 80))
@fuzz_settings(200)
def test_garbage_and_any_position(data: bytes, pos: int) -> None:
    assert FAST is not None
    got = FAST.beat_decode(data, pos, 1 << 24)
    assert got is None or beat_agrees(got, data[pos:got[0]])


def test_a_read_shorter_than_its_frame_or_a_bad_position_is_left_alone() -> None:
    assert FAST is not None
    frame = encode(RemotingCommand.request(34, None, _BODY, opaque=3))
    assert FAST.beat_decode(frame, 0, 1 << 24) == (len(frame), 3, "PYTHON", 409, _BODY)
    for cut in range(len(frame)):
        assert FAST.beat_decode(frame[:cut], 0, 1 << 24) is None
    for pos in (-1, 1, len(frame), 1 << 40):
        assert FAST.beat_decode(frame, pos, 1 << 24) is None
    assert FAST.beat_decode(frame, 0, len(frame) - 1) is None
    with pytest.raises(TypeError):
        FAST.beat_decode("text", 0, 10)
    assert FAST.beat_decode(memoryview(frame), 0, 1 << 24) == FAST.beat_decode(bytearray(frame), 0, 1 << 24)
