"""The compiled send path's decoder and packer (``_faststore.send_serve``) on hostile bytes, in process.

Streams of send requests as producers write them (Java's shape and the C++ client's, some oneway), mutated (bit flips, inserts, deletes, truncation),
cut anywhere, or plain garbage, go to ``send_serve`` with a small segment (a bytearray exactly the
mapping's size, so an AddressSanitizer build catches a byte written past it) and a write position
anywhere in it. Whatever it takes must be whole frames from the start, every record it writes lies in
[wrote, size - 8) and reads back by the reference layout (rmq.testing.storage.decode_record: length,
magic, CRC) with the request's topic, queue, body, flag and born timestamp and the next queue offsets,
and every answer decodes with the pure decoder as SUCCESS for its request's opaque with the record's
offsets. Not a byte outside the records changes. That the compiled path answers and stores exactly as
send.py does is tests/plugins/broker/test_fastsend_diff.py's (against rmqd with RMQ_PURE=1).
``make fuzz`` runs it with the fuzz profile, ``make fuzz-asan`` against the sanitizer build.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rmq.protocol import storepath
from rmq.protocol.command import DEFAULT_VERSION, RemotingCommand
from rmq.protocol.frame import FrameDecoder, decode, encode
from rmq.protocol.message import decode_batch, encode_batch
from rmq.testing.fuzz import compiler_present, fuzz_settings, mutate
from rmq.testing.storage import decode_record

FAST = storepath.compiled_store()
pytestmark = pytest.mark.skipif(FAST is None and not compiler_present(), reason="no C compiler: pure path only")


class _Topic:
    def __init__(self, perm: int, queues: int) -> None:
        self.perm = perm
        self.writeQueueNums = self.readQueueNums = queues


TABLE = {"FastT": _Topic(6, 4), "RO": _Topic(4, 4), "rmq_sys_T": _Topic(6, 4), "Odd": _Topic(6, 2)}
PREFIXES = {t: bytes((len(t),)) + t.encode() for t in TABLE}


def _send(draw: st.DrawFn, opaque: int) -> bytes:
    topic = draw(st.sampled_from(["FastT"] * 6 + ["RO", "Odd", "Nope", "rmq_sys_T", "%RETRY%g"]))
    v2 = draw(st.booleans())
    props = draw(st.sampled_from(["", "TAGS\x01a", "WAIT\x01true", "TAGS\x01a\x02WAIT\x01true\x02KEYS\x01k",
                                  "WAIT\x01true\x02", "a\x01b\x02", "DELAY\x013", "x"] + ["TAGS\x01a\x02WAIT\x01true"] * 4))
    vals = [topic, str(draw(st.integers(0, 4) if draw(st.booleans()) else st.integers(0, 1))), draw(st.sampled_from(["0"] * 6 + ["8", "1"])),
            str(draw(st.integers(0, 2**40))), str(draw(st.integers(0, 9))), props]
    keys = ["b", "e", "f", "g", "h", "i"] if v2 else ["topic", "queueId", "sysFlag", "bornTimestamp", "flag",
                                                      "properties"]
    ext = dict(zip(keys, vals, strict=True))
    ext["a" if v2 else "producerGroup"] = "pg"
    body = draw(st.binary(max_size=300))
    code = 310 if v2 else 10
    if draw(st.integers(0, 2)) == 0:  # a batch (SEND_BATCH_MESSAGE, or batch=true), its body mutated at times
        code = draw(st.sampled_from([320, code]))
        if code != 320:
            ext["m" if v2 else "batch"] = draw(st.sampled_from(["true", "1"]))
        members = st.tuples(st.binary(max_size=60), st.integers(-(2**31), 2**31 - 1),
                            st.sampled_from(["", "TAGS\x01a\x02", "UNIQ_KEY\x01u\x02WAIT\x01true", "UNIQ_KEY\x01u\x02WAIT\x01false",
                                             "é\x01ü", "x"]))
        body = encode_batch(draw(st.lists(members, max_size=5)))
        if draw(st.integers(0, 3)) == 0:
            body = mutate(body, draw)
    oneway = draw(st.sampled_from([0, 0, 0, 2]))
    if draw(st.booleans()):  # the C++ client's shape: sorted keys, numbers, CPP, a newline after the header
        ext = {k: int(v) if k in ("e", "f", "h", "queueId", "sysFlag", "flag") else v for k, v in ext.items()}
        head = json.dumps({"code": code, "extFields": ext, "flag": oneway, "language": "CPP",
                           "opaque": opaque, "remark": "", "version": 63}, separators=(",", ":"), sort_keys=True)
        raw = head.encode() + b"\n"
        return struct.pack(">iI", 4 + len(raw) + len(body), len(raw)) + raw + body
    cmd = RemotingCommand.request(code, ext, body, opaque=opaque, language="JAVA")
    cmd.flag = oneway
    return encode(cmd)


@st.composite
def inputs(draw: st.DrawFn) -> bytes:
    data = b"".join(_send(draw, i) for i in range(draw(st.integers(0, 6))))
    kind = draw(st.sampled_from(["valid"] * 4 + ["mutated", "mutated", "cut", "garbage"]))
    if kind == "mutated":
        data = mutate(data, draw)
    elif kind == "cut":
        data = data[: draw(st.integers(0, len(data)))]
    elif kind == "garbage":
        data = draw(st.binary(max_size=200))
    return data


def _frames(src: bytes, end: int) -> list[bytes]:
    """The whole frames of src[:end]; AssertionError when they do not end exactly at ``end``."""
    out, pos = [], 0
    while pos < end:
        (length,) = struct.unpack_from(">i", src, pos)
        out.append(src[pos:pos + 4 + length])
        pos += 4 + length
    assert pos == end, "the compiled path stopped inside a frame"
    return out


def test_compiled_store_present() -> None:
    assert FAST is not None and hasattr(FAST, "send_serve"), "the compiled store was not built: make install-test"
    alt = os.getenv("RMQ_FASTSTORE")  # make fuzz-asan: the sanitizer build must be the one tested
    if alt:
        assert sys.modules[FAST.__name__].__file__ == alt


@settings(fuzz_settings(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(inputs(), st.integers(256, 8192), st.data())
def test_send_serve_on_hostile_bytes(src: bytes, fsize: int, data: st.DataObject) -> None:
    wrote0 = data.draw(st.sampled_from([0, 0, 0, fsize // 2]) | st.integers(0, fsize))
    store_host = data.draw(st.sampled_from([b"\x7f\x00\x00\x01\x00\x00\x27\x10", bytes(range(20))]))
    limit = data.draw(st.sampled_from([1 << 62] * 3 + [5600]))  # the reput back-log bound
    held = data.draw(st.booleans())  # SYNC_FLUSH: a send with a WAIT left (WAIT=false) is not taken
    mm = bytearray(data.draw(st.binary(min_size=fsize, max_size=fsize)))
    before = bytes(mm)
    tq: dict[str, dict[int, int]] = {"FastT": {0: 0, 1: 7, 2: 0, 3: 2**40}, "Odd": {0: 0, 1: 0}, "RO": {0: 0}}
    start_q = {t: dict(q) for t, q in tq.items()}
    handoff: list[Any] = []
    born = b"\x0a\x00\x00\x02\x00\x00\x30\x39"
    pos, wrote, answers, counts = FAST.send_serve(
        src, 0, 1 << 24, TABLE, PREFIXES, tq, frozenset({"TBW102"}), mm, wrote0, fsize, 5000, limit, born,
        store_host, 0x20 if len(store_host) == 20 else 0, 1_700_000_000_123, handoff, 1024, b"CLUSTER\x01C1",
        b"0A0B0C0D00002710", b"DefaultRegion", b"true", DEFAULT_VERSION, held)
    frames = _frames(src, pos)
    event(f"frames served: {min(len(frames), 3)}{'+' if len(frames) > 2 else ''}")
    assert len(handoff) == sum(n for _, n, _, _ in counts) and len(frames) == sum(c for _, _, _, c in counts)
    assert wrote0 <= wrote and (wrote == wrote0 or wrote + 8 <= fsize)
    assert bytes(mm[:wrote0]) == before[:wrote0] and bytes(mm[wrote:]) == before[wrote:]
    got = FrameDecoder().feed(answers) if answers is not None else []
    reqs = [decode(raw) for raw in frames]
    assert [a.opaque for a in got] == [r.opaque for r in reqs if not r.is_oneway]  # a oneway send: no answer
    answered = iter(got)
    hands = iter(handoff)
    at = wrote0
    for req in reqs:
        v2 = req.code != 10
        topic = req.ext["b" if v2 else "topic"]
        qid = int(req.ext["e" if v2 else "queueId"])
        batch = req.code == 320 or req.ext.get("m" if v2 else "batch") in ("true", "1")
        head_props = req.ext.get("i" if v2 else "properties", "")
        if batch:  # every member, the header's properties (WAIT kept) and CLUSTER appended
            stored = _joined(head_props, "CLUSTER\x01C1")
            members = [(b, f, _joined(p, stored)) for b, f, p in decode_batch(req.body)]
            event("a batch served")
        else:
            members = [(req.body, int(req.ext["h" if v2 else "flag"]), None)]
        ids, first = [], None
        for body, flag, props in members:
            h = next(hands)
            rec = decode_record(mm[at:at + h[1]])
            assert (h[0], h[2], h[3], h[4], h[6]) == (5000 + at, topic, qid, rec["queue_offset"], 1_700_000_000_123)
            assert (rec["phys_offset"], rec["topic"], rec["queue_id"], rec["body"]) == (5000 + at, topic, qid, body)
            assert rec["flag"] == flag
            assert rec["born_host"] == born and rec["store_host"] == store_host
            assert rec["queue_offset"] == start_q[topic][qid]
            first = rec["queue_offset"] if first is None else first
            start_q[topic][qid] += 1
            if props is None:
                assert "WAIT" not in rec["properties"] and rec["properties"]["CLUSTER"] == "C1"
            else:
                assert h[8] == props and bytes(mm[at + h[1] - len(props.encode()):at + h[1]]) == props.encode()
            ids.append(f"0A0B0C0D00002710{5000 + at:016X}")
            at += h[1]
        if not req.is_oneway:
            ans = next(answered)
            assert (ans.code, ans.flag, ans.ext["queueOffset"], ans.ext["msgId"]) == (0, 1, str(first), ",".join(ids))
    assert at == wrote and tq == start_q


def _joined(props: str, tail: str) -> str:
    """send.py's join of a member's properties and the header's (or the header's and CLUSTER)."""
    return f"{props}{tail}" if not props or props.endswith("\x02") else f"{props}\x02{tail}"
