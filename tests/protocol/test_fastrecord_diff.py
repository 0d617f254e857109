"""The compiled record decoder (``_fastframe.decode_records``) against the pure one, pull body by pull body.

Both paths get the same bodies -- records from the pure encoder with random fields (every int field over
its whole range, IPv4 and IPv6 hosts, non-ASCII topics, properties or none, COMPRESSED bodies of every
type, inflatable or not), several back to back, then mutated, truncated or garbage -- and must agree on
every slot of every MessageExt (types included) or on the exception (type and message). ``make fuzz``
runs these properties with a million inputs, ``make fuzz-asan`` against an AddressSanitizer/UBSan build.
"""

from __future__ import annotations

import os
import sys
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.protocol import message
from rmq.protocol.common import SysFlag, decode_properties
from rmq.protocol.message import MessageExt, decode_messages_pure, encode_message
from rmq.testing.fuzz import compiler_present, fuzz_settings, mutate

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
_text = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                min_size=1, max_size=6)
_hosts = st.tuples(st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str), st.integers(-(2**31), 2**31 - 1))


def _codec() -> Any:
    codec = message._records_codec or message.compiled_records()
    if codec is None:
        pytest.fail("the compiled record decoder was not built: run make install-test")
    return codec


def _compiled() -> Any:
    return _codec().decode_records


pytestmark = pytest.mark.skipif(not compiler_present() and message.compiled_records() is None,
                                reason="no C compiler: pure path only")


def test_compiled_records_serve_unless_rmq_pure() -> None:
    if os.getenv("RMQ_PURE"):
        assert message.RECORDS == "pure (RMQ_PURE set)" and message._decode_records is None
        assert message._decode_props is decode_properties
    else:
        assert message.RECORDS == "compiled", "the compiled record decoder was not built: run make install-test"
    alt = os.getenv("RMQ_FASTFRAME")  # make fuzz-asan: the sanitizer build must be the one tested
    if alt:
        assert sys.modules[_compiled().__module__].__file__ == alt


@st.composite
def records(draw: st.DrawFn) -> bytes:
    body = draw(st.binary(max_size=48))
    sys_flag = draw(st.integers(0, 0x7FF)) if draw(st.booleans()) else draw(I32)
    if sys_flag & SysFlag.COMPRESSED and draw(st.booleans()):
        body = zlib.compress(body)
    return encode_message(
        draw(st.one_of(st.just("TopicA"), st.text(max_size=12).filter(lambda t: len(t.encode()) <= 127))),
        body,
        queue_id=draw(I32), flag=draw(I32),
        properties=draw(st.dictionaries(_text, _text, max_size=3)),
        sys_flag=sys_flag, queue_offset=draw(I64), commit_log_offset=draw(I64),
        born_timestamp=draw(I64), born_host=draw(_hosts), store_timestamp=draw(I64),
        store_host=draw(st.one_of(st.just(("10.0.0.9", 10911)), _hosts)),
        reconsume_times=draw(I32), prepared_transaction_offset=draw(I64),
        crc=draw(st.one_of(st.none(), I32)),
    )


@st.composite
def mutated(draw: st.DrawFn, data: st.SearchStrategy[bytes]) -> bytes:
    return mutate(draw(data), draw)


_joined = st.lists(records(), min_size=1, max_size=4).map(b"".join)
bodies = st.one_of(st.binary(max_size=300), _joined, mutated(_joined))


def outcome(fn: Any, data: Any, decompress: bool) -> Any:
    """Every slot of every message with its type, or the exception's type and text."""
    try:
        msgs = fn(data, decompress)
    except Exception as exc:  # noqa: BLE001 - the comparison is the point
        return type(exc), str(exc)
    assert type(msgs) is list
    return [tuple((s, type(getattr(m, s)), getattr(m, s)) for s in MessageExt.__slots__) + (type(m),) for m in msgs]


def both(data: bytes, decompress: bool = True) -> Any:
    compiled = _compiled()
    pure = outcome(decode_messages_pure, data, decompress)
    assert outcome(compiled, data, decompress) == pure
    return pure


@fuzz_settings(300)
@given(bodies, st.booleans())
def test_same_messages_or_same_error(data: bytes, decompress: bool) -> None:
    both(data, decompress)


@fuzz_settings(100)
@given(st.lists(records(), min_size=1, max_size=3))
def test_valid_bodies_cut_anywhere(recs: list[bytes]) -> None:
    data = b"".join(recs)
    for cut in sorted({0, 1, 90, 91, len(recs[0]) - 1, len(recs[0]), len(data) - 1, len(data)}):
        if 0 <= cut <= len(data):
            both(data[:cut])


def test_the_shapes_by_hand() -> None:
    v4 = encode_message("T", b"body", properties={"TAGS": "a"}, born_host="1.2.3.4:5", store_host="6.7.8.9:10")
    v6 = encode_message("T\u00e9", b"", born_host=("::1", 1), store_host=("fe80::2", 2))
    bad_topic = bytearray(v4)
    bad_topic[v4.index(b"\x01T") + 1] = 0xFF  # topic byte not UTF-8
    z = encode_message("Z", zlib.compress(b"zz" * 100), sys_flag=SysFlag.COMPRESSED)
    bomb = encode_message("Z", b"not zlib", sys_flag=SysFlag.COMPRESSED)
    for data in (b"", v4, v6, v4 + v6 + v4, bytes(bad_topic), v4 + bytes(bad_topic), z + v4, v4 + bomb, v4[:-1],
                 v4 + b"\0" * 90, v4 + b"\xff" * 200):
        for decompress in (True, False):
            both(data, decompress)
    got = message.decode_messages(v4 + v6)
    assert got[0].store_host == "6.7.8.9:10" and got[1].born_host == "::1:1"
    assert got[0].properties == {"TAGS": "a"} and got[1].properties == {} and got[1].topic == "T\u00e9"
    assert message.decode_messages(bytearray(v4)) == message.decode_messages(memoryview(v4)) == decode_messages_pure(v4)


def test_unexpected_class_layouts_are_refused() -> None:
    """configure_records binds only a MessageExt laid out as the C decoder writes it; compiled_records then
    says None and the pure path serves."""
    codec = _codec()

    class Other:
        __slots__ = MessageExt.__slots__[:-1] + ("other",)

    class Wider(MessageExt):
        __slots__ = ("extra",)

    class WithDict:
        topic = 1

    for cls in (Other, Wider, WithDict):
        with pytest.raises(TypeError):
            codec.configure_records(cls, message._decode_one, message._host_str)
    with pytest.raises(TypeError):
        codec.decode_records("not bytes", True)
    codec.configure_records(MessageExt, message._decode_one, message._host_str)  # as it was
    assert message.decode_messages(encode_message("T", b"x"))[0].body == b"x"


_prop_bytes = st.lists(st.sampled_from([b"\x01", b"\x02", b"TAGS", b"a", b"\xc3\xa9", b"\xe2\x82", b"\xff", b"\xf0\x9f",
                                        b"\xed\xa0\x80", b"\x00"]), max_size=24).map(b"".join)


@fuzz_settings(300)
@given(st.one_of(_prop_bytes, st.binary(max_size=64)))
def test_compiled_properties_decode_as_the_pure(raw: bytes) -> None:
    """decode_props (what a decoded record's ``properties`` parse with) against decode_properties: the
    same pairs in the same order, invalid UTF-8 replaced the same way."""
    want = list(decode_properties(raw).items())
    got = list(_codec().decode_props(raw).items())
    assert got == want
