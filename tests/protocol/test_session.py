"""The sans-IO protocol session: correlation, expiry, close and hostile input, all without sockets."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.protocol.codes import ResponseCode
from rmq.protocol.command import RemotingClosedError, RemotingCommand
from rmq.protocol.frame import FrameDecoder, encode
from rmq.protocol.session import (
    ANSWERED,
    CLOSED,
    EXPIRED,
    UNDECODABLE,
    WAITING,
    Oneway,
    ProtocolError,
    Request,
    Response,
    Session,
)
from rmq.testing.fuzz import fuzz_settings


def frame(header: bytes, serialize_type: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header), (serialize_type << 24) | len(header)) + header


def wire(parts: tuple[bytes, bytes]) -> bytes:
    return parts[0] + parts[1]


def peer_reads(data: bytes) -> list[RemotingCommand]:
    return FrameDecoder().feed(data)


def test_request_response_correlation() -> None:
    s = Session()
    p, head, body = s.send_request(RemotingCommand.request(10, ext={"a": "1"}, body=b"xyz"), 3.0, 100.0, token="t")
    sent = peer_reads(head + body)[0]
    assert sent.opaque == p.opaque == 0 and not sent.is_response and sent.body == b"xyz"
    assert p.deadline == 103.0 and p.token == "t" and p.state is WAITING and s.pending == 1
    [ev] = s.receive_data(encode(sent.response(0, ext={"r": "ok"})))
    assert type(ev) is Response and ev.pending is p and ev.cmd.ext == {"r": "ok"}
    assert p.state is ANSWERED and p.response is ev.cmd and s.pending == 0


def test_opaques_are_allocated_in_order_and_wrap() -> None:
    s = Session(first_opaque=0x7FFFFFFE)
    ops = [s.send_request(RemotingCommand.request(1), 1, 0)[0].opaque for _ in range(3)]
    assert ops == [0x7FFFFFFE, 0x7FFFFFFF, 0]
    head, _ = s.send_oneway(RemotingCommand.request(2))
    assert peer_reads(head)[0].opaque == 1 and peer_reads(head)[0].is_oneway


def test_out_of_order_responses_match_their_requests() -> None:
    s = Session()
    pendings = [s.send_request(RemotingCommand.request(100 + i), 3, 0)[0] for i in range(5)]
    answers = b"".join(encode(RemotingCommand(0, opaque=p.opaque, flag=1, ext={"i": str(p.code)}))
                       for p in reversed(pendings))
    events = []
    for i in range(0, len(answers), 7):  # arbitrary chunking
        events += s.receive_data(answers[i:i + 7])
    assert [type(e) for e in events] == [Response] * 5
    assert [e.pending for e in events] == list(reversed(pendings))
    assert all(e.cmd.ext["i"] == str(e.pending.code) for e in events)


def test_requests_and_oneways_from_the_peer() -> None:
    s = Session()
    req = RemotingCommand.request(34, opaque=7)
    one = RemotingCommand.request(40, opaque=8, oneway=True)
    events = s.receive_data(encode(req) + encode(one))
    assert [type(e) for e in events] == [Request, Oneway]
    assert events[0].cmd == req and events[1].cmd == one
    resp = s.send_response(RemotingCommand(0, ext={"k": "v"}), request=events[0].cmd)
    back = peer_reads(wire(resp))[0]
    assert back.is_response and back.opaque == 7 and back.ext == {"k": "v"}


def test_expiry_by_deadline() -> None:
    s = Session()
    a = s.send_request(RemotingCommand.request(1), 1.0, 10.0)[0]
    b = s.send_request(RemotingCommand.request(2), 5.0, 10.0)[0]
    c = s.send_request(RemotingCommand.request(3), 2.0, 10.0)[0]
    assert s.next_deadline == 11.0
    assert s.expire(10.5) == []
    assert s.expire(12.0) == [a, c] and a.state is EXPIRED and c.state is EXPIRED
    assert s.pending == 1 and s.next_deadline == 15.0
    late = RemotingCommand(0, opaque=a.opaque, flag=1)  # an answer after its request expired
    [ev] = s.receive_data(encode(late))
    assert type(ev) is ProtocolError and ev.recoverable and ev.kind == "unknown-opaque" and ev.cmd == late
    assert s.expire(20.0) == [b] and s.next_deadline is None


def test_answered_requests_do_not_expire_and_stale_heap_entries_are_skipped() -> None:
    s = Session()
    ps = [s.send_request(RemotingCommand.request(1), 1.0, 0.0)[0] for _ in range(3)]
    s.receive_data(encode(RemotingCommand(0, opaque=ps[1].opaque, flag=1)))
    assert s.expire(5.0) == [ps[0], ps[2]] and ps[1].state is ANSWERED


def test_discard_forgets_a_request_its_caller_gave_up_on() -> None:
    s = Session()
    p = s.send_request(RemotingCommand.request(1), 1.0, 0.0)[0]
    s.discard(p)
    s.discard(p)  # idempotent
    assert s.pending == 0 and s.expire(99.0) == []
    [ev] = s.receive_data(encode(RemotingCommand(0, opaque=p.opaque, flag=1)))
    assert type(ev) is ProtocolError and ev.kind == "unknown-opaque"


def test_unknown_opaque_response_is_recoverable() -> None:
    s = Session()
    p = s.send_request(RemotingCommand.request(1), 1.0, 0.0)[0]
    events = s.receive_data(encode(RemotingCommand(0, opaque=999, flag=1)) + encode(RemotingCommand(0, opaque=0, flag=1)))
    assert type(events[0]) is ProtocolError and events[0].recoverable and events[0].pending is None
    assert type(events[1]) is Response and events[1].pending is p


def test_bad_header_of_a_request_is_answered_and_the_session_goes_on() -> None:
    s = Session()
    events = s.receive_data(frame(b'{"code":2147483648,"opaque":41,"flag":0}') + encode(RemotingCommand.request(5, opaque=42)))
    err, req = events
    assert type(err) is ProtocolError and err.recoverable and err.pending is None
    assert err.response is not None and err.response.opaque == 41 and err.response.is_response
    assert err.response.code == ResponseCode.SYSTEM_ERROR and err.response.remark == err.reason
    assert type(req) is Request and req.cmd.opaque == 42


def test_bad_header_of_a_oneway_is_reported_not_answered() -> None:
    [err] = Session().receive_data(frame(b'{"code":2147483648,"opaque":41,"flag":2}'))
    assert type(err) is ProtocolError and err.recoverable and err.response is None and err.pending is None


def test_bad_header_of_a_response_fails_its_request() -> None:
    s = Session()
    p = s.send_request(RemotingCommand.request(1), 1.0, 0.0)[0]
    [err] = s.receive_data(frame(b'{"code":2147483648,"opaque":0,"flag":1}'))
    assert type(err) is ProtocolError and err.recoverable and err.pending is p and err.response is None
    assert p.state is UNDECODABLE and p.response is not None and p.response.remark and s.pending == 0


@pytest.mark.parametrize("data, kind", [
    (struct.pack(">i", 2), "length"),
    (struct.pack(">i", 64 * 1024 * 1024), "too-large"),
    (frame(b"{}", serialize_type=7), "serialize-type"),
    (frame(b'{"code":Infinity}'), "json"),
])
def test_malformed_frames_are_fatal_and_final(data: bytes, kind: str) -> None:
    s = Session()
    p = s.send_request(RemotingCommand.request(1), 1.0, 0.0)[0]
    [err] = s.receive_data(data)
    assert type(err) is ProtocolError and not err.recoverable and err.kind == kind and s.error is err
    assert s.receive_data(encode(RemotingCommand(0, opaque=p.opaque, flag=1))) == []  # nothing after a fatal error
    assert s.close() == [p] and p.state is CLOSED


def test_close_fails_every_pending_request() -> None:
    s = Session()
    ps = [s.send_request(RemotingCommand.request(i), 5.0, 0.0)[0] for i in range(4)]
    s.receive_data(encode(RemotingCommand(0, opaque=ps[2].opaque, flag=1)))
    failed = s.close()
    assert sorted(p.opaque for p in failed) == [0, 1, 3] and all(p.state is CLOSED for p in failed)
    assert ps[2].state is ANSWERED and s.pending == 0 and s.expire(99) == [] and s.close() == []
    with pytest.raises(RemotingClosedError):
        s.send_request(RemotingCommand.request(1), 1.0, 0.0)
    assert s.receive_data(encode(RemotingCommand(0, opaque=0, flag=1))) == []


def test_a_request_that_cannot_be_encoded_registers_nothing() -> None:
    s = Session()
    cmd = RemotingCommand.request(1, serialize_type=9)
    with pytest.raises(ValueError):
        s.send_request(cmd, 1.0, 0.0)
    assert s.pending == 0 and s.next_deadline is None


def test_heap_is_compacted_when_answered_entries_pile_up() -> None:
    s = Session()
    for _ in range(5000):
        p = s.send_request(RemotingCommand.request(1), 60.0, 0.0)[0]
        s.receive_data(encode(RemotingCommand(0, opaque=p.opaque, flag=1)))
    assert len(s._deadlines) <= 1025


# --------------------------------------------------------------------------- fuzz

_valid = st.builds(
    lambda code, opaque, flag, body: encode(RemotingCommand(code, opaque=opaque, flag=flag, body=body)),
    st.integers(-(2**31), 2**31 - 1), st.integers(0, 20), st.sampled_from([0, 1, 2, 3]), st.binary(max_size=20),
)


@fuzz_settings()
@given(
    st.lists(st.one_of(st.binary(max_size=64), _valid), max_size=8),
    st.lists(st.integers(1, 40), min_size=1, max_size=10),
    st.integers(0, 5),
)
def test_receive_data_never_raises_whatever_the_bytes_and_chunking(
    pieces: list[bytes], cuts: list[int], n_pending: int
) -> None:
    s = Session(max_frame_size=4096)
    pendings = [s.send_request(RemotingCommand.request(1), 1.0, 0.0)[0] for _ in range(n_pending)]
    data = b"".join(pieces)
    events = []
    pos = i = 0
    while pos < len(data):
        step = cuts[i % len(cuts)]
        events += s.receive_data(memoryview(data)[pos:pos + step] if i % 2 else data[pos:pos + step])
        pos += step
        i += 1
    fatal = [e for e in events if type(e) is ProtocolError and not e.recoverable]
    assert len(fatal) <= 1 and (not fatal or events[-1] is fatal[0])
    answered = set()
    for e in events:
        assert type(e) in (Request, Oneway, Response, ProtocolError)
        if type(e) is Response:
            assert e.pending in pendings and e.pending.opaque == e.cmd.opaque and e.pending.state is ANSWERED
            assert e.pending.opaque not in answered
            answered.add(e.pending.opaque)
        elif type(e) is ProtocolError and e.response is not None:
            assert e.response.is_response and e.response.code == ResponseCode.SYSTEM_ERROR
    left = s.close()
    assert len(left) + sum(p.state in (ANSWERED, UNDECODABLE) for p in pendings) == n_pending
