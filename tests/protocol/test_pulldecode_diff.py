"""``_faststore.pull_decode`` (the per-request compiled pull's decoder) against the pure decoder, in process.

PULL_MESSAGE / LITE_PULL_MESSAGE headers as the clients write them (rmq's and Java's string fields, the C++
client's JSON numbers, ACL fields and newline), with fields left out, empty, signed, padded, too long or not
numbers, escaped, duplicated or non-ASCII, and those bytes mutated or cut, from any position of a read: what
the compiled decoder accepts must be a whole frame whose fields the pure path (``frame.decode`` and pull.py's
accessors) reads alike; the common shapes must be accepted (else the compiled path would serve nothing).
``make fuzz`` runs it with the fuzz profile, ``make fuzz-asan`` against the sanitizer build.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.protocol import storepath
from rmq.protocol.command import RemotingCommand
from rmq.protocol.frame import encode
from rmq.testing.fuzz import compiler_present, decoder_takes, fuzz_settings
from rmq.testing.fuzztargets_pull import _FIELDS, _frame, pure_pull_fields

FAST = storepath.compiled_store()
pytestmark = pytest.mark.skipif(FAST is None and not compiler_present(), reason="no C compiler: pure path only")

NUMBERS = ("queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset", "suspendTimeoutMillis", "subVersion")
value = st.one_of(st.sampled_from(["0", "1", "-1", "-0", "007", "+3", "", "x1", "2147483647", "2147483648",
                                   "999999999999999999", "9999999999999999999", "Pull\\T", "é", "TagA || TagB"]),
                  st.text(max_size=6))


@st.composite
def pull_frames(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A pull frame and whether it is in the common shape (the compiled decoder must take it)."""
    ext: dict[str, Any] = dict(_FIELDS)
    common = draw(st.booleans())
    if not common:
        for k in draw(st.lists(st.sampled_from([*_FIELDS, "other"]), max_size=3)):
            if draw(st.booleans()):
                ext.pop(k, None)
            else:
                ext[k] = draw(value)
    shape = draw(st.sampled_from(["rmq", "java", "cpp"] if common else ["rmq", "java", "cpp", "oneway", "body", "dup",
                                                                         "binary", "code", "space"]))
    code = draw(st.sampled_from([11, 361]))
    opaque = draw(st.integers(-(2**31), 2**31 - 1))
    if shape in ("rmq", "binary"):
        return encode(RemotingCommand.request(code, ext, opaque=opaque, serialize_type=1 if shape == "binary" else 0)), \
            common
    if shape == "cpp":
        ext = {k: int(v) if k in ("queueId", "maxMsgNums", "sysFlag") and v.lstrip("-").isdigit()
               and abs(int(v)) < 2**31 and v == str(int(v)) else v for k, v in ext.items()}
        ext |= {"AccessKey": "", "Signature": "krJQ75CNiuMQmieI+kuoT7R8fFc="}
    h = {"code": 10 if shape == "code" else code, "extFields": ext, "flag": 2 if shape == "oneway" else 0,
         "language": "CPP" if shape == "cpp" else "JAVA", "opaque": opaque, "version": 63 if shape == "cpp" else 409}
    head = json.dumps(h, separators=(", ", ":") if shape == "space" else (",", ":"), sort_keys=shape == "cpp").encode()
    if shape == "dup":
        head = head.replace(b'"extFields":{', b'"extFields":{"topic":"X",')
    return _frame(head + (b"\n" if shape == "cpp" else b""), b"b" if shape == "body" else b""), common


@given(data=st.data())
@fuzz_settings(300)
def test_what_the_compiled_decoder_takes_the_pure_one_reads_alike(data: st.DataObject) -> None:
    assert FAST is not None
    taken = decoder_takes(data, *data.draw(pull_frames()), FAST.pull_decode)
    if taken is not None:
        got, frame = taken
        assert got[1:] == pure_pull_fields(frame)


@given(st.binary(max_size=64), st.integers(-3, 80))
@fuzz_settings(200)
def test_garbage_and_any_position(data: bytes, pos: int) -> None:
    assert FAST is not None
    got = FAST.pull_decode(data, pos, 1 << 24)
    assert got is None or got[1:] == pure_pull_fields(data[pos:got[0]])


def test_a_read_shorter_than_its_frame_or_a_bad_position_is_left_alone() -> None:
    assert FAST is not None
    frame = encode(RemotingCommand.request(11, dict(_FIELDS), opaque=3))
    assert FAST.pull_decode(frame, 0, 1 << 24) is not None
    for cut in range(len(frame)):
        assert FAST.pull_decode(frame[:cut], 0, 1 << 24) is None
    for pos in (-1, 1, len(frame), 1 << 40):
        assert FAST.pull_decode(frame, pos, 1 << 24) is None
    with pytest.raises(TypeError):
        FAST.pull_decode("text", 0, 10)
    assert FAST.pull_decode(memoryview(frame), 0, 1 << 24) == FAST.pull_decode(bytearray(frame), 0, 1 << 24)

