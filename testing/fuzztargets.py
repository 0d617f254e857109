"""The compiled entry points :mod:`rmq.testing.fuzzdrive` fuzzes, each with its seeds and invariants.

Every target reads its few parameters (a limit, a segment size, a write position...) from the first
byte(s) of the input, so a saved input replays alone. ``run`` checks what must hold on every input
(positions within bounds, nothing written outside the region given, counts that agree, no exception
but the documented ones); ``check``, on a sample, compares with the pure-Python reference: the pure
frame decoder and encoder, IndexFile.put_many's loop, the mmap store's pure scan loop, the reput's
decode_properties / tags_code, and the reference record layout (rmq.testing.storage.decode_record).
"""

from __future__ import annotations

import random
import struct
import types
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from rmq.kernel.model import DispatchRequest, MessageRecord
from rmq.protocol import frame as frame_mod
from rmq.protocol import storepath
from rmq.protocol.command import DEFAULT_VERSION, FrameError, RemotingCommand, UndecodableCommand
from rmq.protocol.common import decode_properties, tags_code
from rmq.testing.fuzzdrive import Breach, Target
from rmq.testing.fuzztargets_pull import PullDecode
from rmq.testing.fuzztargets_record import DecodeRecords
from rmq.testing.storage import decode_record

__all__ = ["make_targets", "target_names"]

_I32 = struct.Struct(">i")
_FRAME = struct.Struct(">iI")
_JSON_TOKENS = (b'"code":', b'"extFields":{', b'"flag":', b'"language":"JAVA"', b'"opaque":', b'"remark":',
                b'"serializeTypeCurrentRPC":"JSON"', b'"version":', b'"a":"', b'"b":"', b'"e":"', b'"f":"',
                b'"g":"', b'"h":"', b'"i":"', b'"m":"', b'"topic":"', b'"queueId":"', b'"properties":"',
                b'"batch":"true"', b"WAIT\\u0001true", b"TAGS\\u0001", b"DELAY\\u0001", b"CLUSTER\\u0001",
                b"TRAN_MSG\\u0001", b"TIMER_", b"\\u0002", b"%RETRY%", b"rmq_sys_")
_PROP_TOKENS = (b"TAGS\x01", b"KEYS\x01", b"UNIQ_KEY\x01", b"DELAY\x01", b"WAIT\x01true", b"\x01", b"\x02",
                b"SCHEDULE_TOPIC_XXXX", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80")


def _frame(header: bytes, body: bytes = b"", st: int = 0) -> bytes:
    return _FRAME.pack(4 + len(header) + len(body), (st << 24) | len(header)) + header + body


def _frames(src: bytes | bytearray, end: int) -> int:
    """How many whole frames src[:end] holds; Breach when they do not end exactly at ``end``."""
    pos = k = 0
    while pos < end:
        pos += 4 + _I32.unpack_from(src, pos)[0]
        k += 1
    if pos != end:
        raise Breach(f"stopped at {end}, inside a frame (frames end at {pos})")
    return k


def _oneway(src: bytes) -> int:
    """How many of the whole frames in ``src`` are oneway requests (by the pure decoder)."""
    return sum(1 for c in frame_mod.FrameDecoder(compiled=False).feed(src) if c.flag & 2)


def _describe(cmd: RemotingCommand) -> tuple[Any, ...]:
    fields = tuple((type(getattr(cmd, s)), getattr(cmd, s)) for s in RemotingCommand.__slots__ if s != "ext")
    err = None
    if isinstance(cmd, UndecodableCommand):
        e = cmd.error
        err = (type(e), str(e), getattr(e, "kind", None), e.opaque, e.flag)
    return type(cmd), fields, list(cmd.ext.items()), err


def _decode_all(data: bytes, limit: int, recover: bool, compiled: bool) -> Any:
    dec = frame_mod.FrameDecoder(limit, recover=recover, compiled=compiled)
    try:
        return [_describe(c) for c in dec.feed(data)], dec.buffered
    except FrameError as exc:
        return type(exc), str(exc), getattr(exc, "kind", None)


def _encoded(encode: Callable[[RemotingCommand], Any], cmd: RemotingCommand) -> Any:
    try:
        return encode(cmd)
    except (ValueError, TypeError, OverflowError, UnicodeError, struct.error) as exc:
        return type(exc), str(exc)


# ------------------------------------------------------------------ _fastframe


class Split(Target):
    """_fastframe.split: byte streams of frames (JSON and binary headers, valid and not), any limit."""

    name = "split"
    weight = 3
    tokens = _JSON_TOKENS
    LIMITS = (1 << 24, 64, 4096, 1 << 24)

    def __init__(self, codec: Any) -> None:
        self.split = codec.split
        self.bodies = [b"", b"x" * 40, bytes(range(256))]

    def seeds(self) -> list[bytes]:
        out = []
        for st in (0, 1):
            for ext in ({}, {"a": "pg", "b": "TopicTest", "e": "1", "i": "TAGS\x01a\x02WAIT\x01true"},
                        {"k\u00e9": "\U0001f600", "n": "\x00\x1f\""}):
                for remark in (None, "r\u00e9mark"):
                    cmd = RemotingCommand(310, language="CPP", opaque=7, flag=st, remark=remark, ext=dict(ext),
                                          body=b"body", serialize_type=st)
                    out.append(bytes([st]) + frame_mod.encode(cmd) * (1 + st))
        # what C++ writes: numbers, booleans and nulls in extFields, whitespace
        hdr = b'{"code":10, "extFields":{"a":1,"b":true,"c":null,"d":-0,"e":"\\u00e9"},"flag":0,"opaque":3}\n'
        out.append(b"\x02" + _frame(hdr, b"b"))
        return out

    def reframe(self, rng: random.Random, mutate: Callable[[bytes], bytes]) -> bytes:
        """One to three frames whose header is a mutated valid one, framed with true lengths."""
        parts = [bytes([rng.getrandbits(8)])]
        for _ in range(1 + rng.getrandbits(1) + rng.getrandbits(1)):
            st = rng.getrandbits(1)
            cmd = RemotingCommand(rng.choice((10, 310, 11, 34)), language=rng.choice(("JAVA", "CPP", "GO")),
                                  opaque=rng.getrandbits(31), flag=rng.getrandbits(2), remark=rng.choice((None, "r")),
                                  ext={"b": "T", "e": str(rng.getrandbits(3)), "i": "TAGS\x01a"}, serialize_type=st)
            head, _ = frame_mod.encode_parts(cmd)
            parts.append(_frame(mutate(head[8:]), rng.choice(self.bodies), st if rng.getrandbits(3) else rng.getrandbits(8)))
        return b"".join(parts)

    def run(self, data: bytes) -> Any:
        c = data[0] if data else 0
        src = data[1:]
        try:
            cmds, pos = self.split(src, self.LIMITS[c & 3], bool(c & 12))
        except FrameError:  # CommandDecodeError included: the pure decoder's own refusal of a frame
            return "error"
        if not 0 <= pos <= len(src) or _frames(src, pos) != len(cmds):
            raise Breach(f"split returned {len(cmds)} commands up to {pos} of {len(src)} bytes")
        return min(len(cmds), 3), pos == len(src), cmds[-1].serialize_type if cmds else -1, type(cmds[-1]).__name__ if cmds else ""

    def check(self, data: bytes) -> None:
        c = data[0] if data else 0
        args = (data[1:], self.LIMITS[c & 3], bool(c & 12))
        want, got = _decode_all(*args, False), _decode_all(*args, True)
        if want != got:
            raise Breach(f"compiled decode {got!r} != pure {want!r}")


def _ints(data: bytes, n: int) -> tuple[list[int], bytes]:
    """n integers from 5-byte groups: a signed 32-bit word, or (marker byte 0xFF) one far outside it."""
    out, data = [], data.ljust(5 * n, b"\0")
    for k in range(n):
        g = data[5 * k : 5 * k + 5]
        v = _I32.unpack_from(g, 1)[0]
        out.append(v if g[0] != 0xFF else (v << 33) + v)
    return out, data[5 * n :]


def _text(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")  # invalid bytes become lone surrogates: the pure path's case


class EncodeParts(Target):
    """_fastframe.encode_parts: commands of any field values (code points, lone surrogates, big ints)."""

    name = "encode_parts"
    weight = 1
    tokens = _PROP_TOKENS + (b"\xfe",)

    def __init__(self, codec: Any) -> None:
        self.encode = codec.encode_parts

    def seeds(self) -> list[bytes]:
        ints = b"".join(b"\0" + _I32.pack(v) for v in (310, 7, 0, 399, 0))
        return [ints + b"JAVA\xferemark\xfeb\xfeTopicTest\xfei\xfeTAGS\x01a\x02\xfe\xe4\xb8\xad\xfe\xf0\x9f\x98\x80\xfebody",
                ints + b"CPP\xfe\xfe\xfe", b"\xff" * 20 + b"\0" * 5 + b"\xfe\xfe"]

    def command(self, data: bytes) -> RemotingCommand:
        (code, opaque, flag, version, st), rest = _ints(data, 5)
        parts = rest.split(b"\xfe")
        lang = _text(parts[0])
        remark = None if len(parts) < 2 or not parts[1] else _text(parts[1])
        kv = parts[2:-1] if len(parts) > 3 else []
        ext = {_text(kv[k]): _text(kv[k + 1]) for k in range(0, len(kv) - 1, 2)}
        return RemotingCommand(code, language=lang, version=version, opaque=opaque, flag=flag, remark=remark, ext=ext,
                               body=parts[-1] if len(parts) > 2 else b"", serialize_type={1: 1, 15: st}.get(st % 16, 0))

    def run(self, data: bytes) -> Any:
        cmd = self.command(data)
        try:
            head, body = self.encode(cmd)
        except (ValueError, UnicodeError, OverflowError, struct.error) as exc:  # the pure encoder's refusals
            return type(exc).__name__
        n, word = _FRAME.unpack_from(head, 0)
        if n != len(head) - 4 + len(body) or word & 0xFFFFFF != len(head) - 8 or body is not cmd.body:
            raise Breach(f"frame words {n}, {word:#x} for {len(head)} + {len(body)} bytes")
        return word >> 24, len(cmd.ext) > 0, cmd.remark is None

    def check(self, data: bytes) -> None:
        cmd = self.command(data)
        want, got = _encoded(frame_mod.encode_parts_pure, cmd), _encoded(self.encode, cmd)
        if want != got:
            raise Breach(f"compiled encode {got!r} != pure {want!r}")


# ------------------------------------------------------------------ _faststore: the send path


# the topic table send_serve reads (perm, writeQueueNums, readQueueNums): a read-only topic, a system one
_TABLE = {t: SimpleNamespace(perm=p, writeQueueNums=q, readQueueNums=q)
          for t, p, q in (("FastT", 6, 4), ("RO", 4, 4), ("rmq_sys_T", 6, 4), ("Odd", 6, 2))}
_PREFIXES = {t: bytes((len(t),)) + t.encode() for t in _TABLE}
_TQ = {"FastT": {0: 0, 1: 7, 2: 0, 3: 2**40}, "Odd": {0: 0, 1: 0}, "RO": {0: 0}}
_BORN = b"\x0a\x00\x00\x02\x00\x00\x30\x39"
_HOSTS = (b"\x7f\x00\x00\x01\x00\x00\x27\x10", bytes(range(20)))
_TS = 1_700_000_000_123
_GOOD_PROPS = ("", "TAGS\x01a", "WAIT\x01true", "TAGS\x01a\x02WAIT\x01true\x02KEYS\x01k", "WAIT\x01true\x02", "a\x01b\x02",
               "TAGS\x01a\x02WAIT\x01true", "UNIQ_KEY\x01u\x02TAGS\x01\u00e9")


class SendServe(Target):
    """_faststore.send_serve: SEND_MESSAGE(_V2) streams into a segment exactly the mapping's size."""

    name = "send_serve"
    weight = 3
    tokens = _JSON_TOKENS
    SIZES = (1024, 4096, 8192, 8192)

    def __init__(self, store: Any) -> None:
        self.serve = store.send_serve
        self.mms = {n: bytearray(random.Random(n).randbytes(n)) for n in self.SIZES}

    def _send(self, rng: random.Random, opaque: int, good: bool = False) -> bytes:
        """A send as producers write it; ``good``: one the compiled path takes (a known writable topic...)."""
        topic = "FastT" if good else rng.choice(["FastT"] * 6 + ["RO", "Odd", "Nope", "rmq_sys_T", "%RETRY%g"])
        v2 = rng.getrandbits(1)
        props = rng.choice(_GOOD_PROPS if good else _GOOD_PROPS + ("DELAY\x013", "x", "WAIT\x01false", "CLUSTER\x01x"))
        vals = [topic, str(rng.randrange(4 if good else 5)), "0" if good else rng.choice("00008"), str(rng.getrandbits(40)),
                str(rng.randrange(9)), props]
        keys = ["b", "e", "f", "g", "h", "i"] if v2 else ["topic", "queueId", "sysFlag", "bornTimestamp", "flag", "properties"]
        ext = dict(zip(keys, vals, strict=True))
        ext["a" if v2 else "producerGroup"] = "pg"
        if rng.getrandbits(3) == 0:
            ext["m" if v2 else "batch"] = rng.choice(("false",) if good else ("true", "false", "1"))
        cmd = RemotingCommand.request(310 if v2 else 10, ext, rng.randbytes(rng.randrange(200)), opaque=opaque,
                                      language="JAVA")
        return frame_mod.encode(cmd)

    def seeds(self) -> list[bytes]:
        rng = random.Random(30)
        return [bytes([rng.getrandbits(8) & 0xBF]) + b"".join(self._send(rng, i, good=i < k) for i in range(rng.randrange(1, 5)))
                for k in range(40)]

    def reframe(self, rng: random.Random, mutate: Callable[[bytes], bytes]) -> bytes:
        """Sends the compiled path takes, then one whose header or body is mutated (framed with true lengths)."""
        out = [bytes([rng.getrandbits(8) & 0xBF])]  # (not the small back-log bound: most sends fit)
        n = rng.getrandbits(2)
        for i in range(n + 1):
            f = self._send(rng, i, good=i < n or not rng.getrandbits(2))
            hl = _FRAME.unpack_from(f, 0)[1] & 0xFFFFFF
            head, body = f[8 : 8 + hl], f[8 + hl :]
            if i == n:
                head, body = (mutate(head), body) if rng.getrandbits(2) else (head, mutate(body))
            out.append(_frame(head, body))
        return b"".join(out)

    def _call(self, data: bytes) -> tuple[Any, ...]:
        c = data[0]
        fsize = self.SIZES[c & 3]
        wrote0 = (0, 0, fsize // 2, fsize - 700)[(c >> 2) & 3]
        mm = self.mms[fsize]
        host = _HOSTS[(c >> 5) & 1]
        tq = {t: dict(q) for t, q in _TQ.items()}
        handoff: list[Any] = []
        before = bytes(mm)
        res = self.serve(data, 1, 1 << 24, _TABLE, _PREFIXES, tq, frozenset({"TBW102"}), mm, wrote0, fsize, 5000,
                         5600 if c & 64 else 1 << 62, _BORN, host, 0x20 if len(host) == 20 else 0, _TS, handoff, 1024,
                         b"CLUSTER\x01C1", b"0A0B0C0D00002710", b"DefaultRegion", b"true", DEFAULT_VERSION, bool(c & 16))
        return res, wrote0, fsize, mm, before, handoff, tq, host

    def run(self, data: bytes) -> Any:
        data = data or b"\0"  # the first byte is the configuration
        (pos, wrote, answers, counts), wrote0, fsize, mm, before, handoff, tq, _ = self._call(data)
        served = _frames(data[1:], pos - 1) if pos >= 1 else -1
        # a batch frame stores one record (hand-off) per member; the counts say sends and messages apart
        if not (1 <= pos <= len(data) and served == sum(c[3] for c in counts) and served <= len(handoff)
                and len(handoff) == sum(c[1] for c in counts)):
            raise Breach(f"served up to {pos} of {len(data)}: {served} frames, {len(handoff)} hand-offs, {counts}")
        if not (wrote0 <= wrote and (wrote == wrote0 or wrote + 8 <= fsize)):
            raise Breach(f"wrote {wrote0} -> {wrote} in a {fsize}-byte segment")
        if mm[:wrote0] != before[:wrote0] or mm[wrote:] != before[wrote:]:
            raise Breach(f"bytes outside [{wrote0}, {wrote}) changed")
        n_answers = _frames(answers, len(answers)) if answers else 0
        if n_answers != served and n_answers != served - _oneway(data[1:pos]):  # oneway sends get no answer
            raise Breach(f"{served} sends served, answers {answers!r:.80}")
        return min(served, 3), pos == len(data), wrote == wrote0

    def check(self, data: bytes) -> None:
        """Each served send's record by the reference layout, its answer by the pure decoder."""
        data = data or b"\0"
        (pos, wrote, answers, _), wrote0, _, mm, _, handoff, _, host = self._call(data)
        reqs = frame_mod.FrameDecoder(compiled=False).feed(data[1:pos])
        got = frame_mod.FrameDecoder(compiled=False).feed(answers) if answers else []
        at = wrote0
        if not len(reqs) == len(handoff) == len(got):  # batches or oneway sends: the records' extent only
            if wrote0 + sum(h[1] for h in handoff) != wrote:
                raise Breach(f"hand-offs cover {sum(h[1] for h in handoff)} bytes, wrote {wrote0} -> {wrote}")
            return
        q = {t: dict(v) for t, v in _TQ.items()}
        for req, h, ans in zip(reqs, handoff, got, strict=True):
            v2 = req.code == 310
            topic, qid = req.ext["b" if v2 else "topic"], int(req.ext["e" if v2 else "queueId"])
            rec = decode_record(mm[at : at + h[1]])
            props = decode_properties(rec["properties"]) if isinstance(rec["properties"], str) else rec["properties"]
            want = (5000 + at, topic, qid, req.body, int(req.ext["h" if v2 else "flag"]), _BORN, host, q[topic][qid])
            have = (rec["phys_offset"], rec["topic"], rec["queue_id"], rec["body"], rec["flag"], rec["born_host"],
                    rec["store_host"], rec["queue_offset"])
            if have != want or props.get("WAIT") == "true" or props.get("CLUSTER") != "C1":
                raise Breach(f"record {have!r:.300} {props!r} != {want!r:.300}")
            if (ans.code, ans.opaque, ans.ext["queueOffset"], ans.ext["msgId"]) != (
                    0, req.opaque, str(q[topic][qid]), f"0A0B0C0D00002710{5000 + at:016X}"):
                raise Breach(f"answer {ans!r} for {req!r}")
            q[topic][qid] += 1
            at += h[1]
        if at != wrote:
            raise Breach(f"records end at {at}, wrote says {wrote}")


# ------------------------------------------------------------------ _faststore: append, reput, pulls


_V4 = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
_TOPICS = ("TopicA", "Topic\u00e9", "", "T" * 200)


class MeasurePack(Target):
    """_faststore.measure and pack: messages of any field values into a region of a larger buffer."""

    name = "measure_pack"
    weight = 2
    tokens = _PROP_TOKENS + (b"\xfe",)

    def __init__(self, store: Any) -> None:
        self.fast = store

    def seeds(self) -> list[bytes]:
        ints = b"".join(b"\0" + _I32.pack(v) for v in (1, 0, 0, 1_700_000, 0, 0, 5))
        return [b"\x00\x00" + ints + b"body\xfeTAGS\x01a\x02KEYS\x01k\x02",
                b"\x07\x13" + ints + b"\xfe", b"\x01\x22" + ints + b"x" * 300 + b"\xfe\xc3\xa9" * 40]

    def batch(self, data: bytes) -> tuple[list[MessageRecord], bytes, int, bool, int, bytes]:
        c0, c1 = (data + b"\0\0")[:2]
        (qid, flag, sys_flag, born_ts, reconsume, prepared, store_ts), rest = _ints(data[2:], 7)
        body, _, props = rest.partition(b"\xfe")
        topic = _TOPICS[c0 & 3]
        born = (_V4, bytes(20), b"1234567")[(c0 >> 2) % 3]
        msgs = [MessageRecord(topic, qid, bytearray(body) if c1 & 128 else body, flag=flag, properties=_text(props),
                              sys_flag=sys_flag, born_timestamp=born_ts, born_host=born, reconsume_times=reconsume,
                              prepared_tx_offset=prepared, store_timestamp=store_ts) for _ in range(1 + (c1 & 3))]
        prefix = bytes((len(topic.encode()) & 0xFF,)) + topic.encode()
        return msgs, prefix, c1, bool(c1 & 4), (c1 >> 3) & 7, _HOSTS[(c0 >> 4) & 1]

    def run(self, data: bytes) -> Any:
        msgs, prefix, c1, is_batch, mode, host = self.batch(data)
        head = 64 + len(host) + 16
        total = self.fast.measure(msgs, prefix, head, 1024, is_batch)
        if total < 0:
            if total != -1:
                raise Breach(f"measure returned {total}")
            return "refused"
        want = sum(head + len(m.body) + len(prefix) + 2 + len(m.properties.encode()) for m in msgs)
        if total != want:
            raise Breach(f"measure {total} != {want}")
        region = total + (0, -1, 1, -head, 7, 0, 0, 0)[mode]
        pad = 32
        buf = bytearray(b"\xee" * (total + 2 * pad + 8))
        handoff: list[Any] = [("earlier",)]
        try:
            self.fast.pack(buf, pad, region, msgs, prefix, host, 0x20 if len(host) == 20 else 0, 1000, msgs[0].queue_id,
                           7, 1, 5, handoff, msgs[0].topic)
        except (ValueError, OverflowError) as exc:  # refused before anything outside the region is written
            if buf[:pad] != b"\xee" * pad or any(buf[pad + max(region, 0) :].strip(b"\xee")):
                raise Breach(f"a refused pack wrote outside its region ({exc})") from None
            if handoff != [("earlier",)]:
                raise Breach(f"a refused pack left hand-offs {handoff[1:]!r:.200}") from None
            return "pack refused", region == total
        if region != total or len(handoff) != 1 + len(msgs) or buf[:pad] != b"\xee" * pad or any(buf[pad + total :].strip(b"\xee")):
            raise Breach(f"pack into a {region}-byte region for {total} bytes: wrote outside it or wrong hand-offs")
        return "packed", len(msgs), is_batch

    def check(self, data: bytes) -> None:
        msgs, prefix, _, is_batch, _, host = self.batch(data)
        head = 64 + len(host) + 16
        total = self.fast.measure(msgs, prefix, head, 1 << 20, is_batch)
        if total < 0:
            return
        buf = bytearray(total)
        self.fast.pack(buf, 0, total, msgs, prefix, host, 0x20 if len(host) == 20 else 0, 1000, msgs[0].queue_id, 7, 1,
                       5, [], msgs[0].topic)
        at = 0
        for k, m in enumerate(msgs):
            rec = decode_record(buf[at : at + head + len(m.body) + len(prefix) + 2 + len(m.properties.encode())])
            have = (rec["queue_id"], rec["flag"], rec["queue_offset"], rec["phys_offset"], rec["born_ts"], rec["body"],
                    rec["store_host"], rec["reconsume_times"], rec["prepared_tx_offset"])
            want = (m.queue_id, m.flag, 7 + k, 1000 + at, m.born_timestamp, bytes(m.body), host, m.reconsume_times,
                    m.prepared_tx_offset)
            if have != want:
                raise Breach(f"record {have!r} != {want!r}")
            at += rec["total"]


_PROPS_POOL = ("TAGS\x01a", "KEYS\x01k1 k2", "UNIQ_KEY\x01u", "DELAY\x013", "TAGS\x01\U0001f600", "x\x01y\x01z", "")


class Requests(Target):
    """_faststore.requests: the reput's DispatchRequests from hand-off tuples with any properties."""

    name = "requests"
    weight = 1
    tokens = _PROP_TOKENS

    def __init__(self, store: Any) -> None:
        self.requests = store.requests

    def seeds(self) -> list[bytes]:
        return [b"\x00\x00" + "\x02".join(_PROPS_POOL).encode() + b"\xfeTAGS\x01b\xfe", b"\x01\x01DELAY\x011\xfe\xfe"]

    def take(self, data: bytes) -> list[tuple[Any, ...]]:
        c0, c1 = (data + b"\0\0")[:2]
        out, at = [], 1000
        for k, props in enumerate(data[2:].split(b"\xfe")[:16]):
            topic = "SCHEDULE_TOPIC_XXXX" if (c0 >> (k & 7)) & 1 else "TopicA"
            if (c1 >> (k & 7)) & 1 and k == c1 & 7:
                at += 1  # out of step: the reput's pure loop decides from here
            out.append((at, 100 + k, topic, k & 3, k, 0, _TS, 0, _text(props)))
            at += 100 + k
        return out

    def run(self, data: bytes) -> Any:
        take = self.take(data)
        out: list[DispatchRequest] = []
        n = self.requests(take, 1000, out)
        if not 0 <= n <= len(take) or len(out) != n:
            raise Breach(f"took {n} of {len(take)}, made {len(out)} requests")
        expected = 1000
        for h, r in zip(take, out, strict=False):
            props = decode_properties(h[8])
            tags = props.get("TAGS")
            want = (h[2], h[3], h[0], h[1], tags_code(tags), h[6], h[4], h[5], h[7], props.get("KEYS"),
                    props.get("UNIQ_KEY"), props)
            have = (r.topic, r.queue_id, r.commit_log_offset, r.msg_size, r.tags_code, r.store_timestamp,
                    r.consume_queue_offset, r.sys_flag, r.prepared_tx_offset, r.keys, r.uniq_key, r.properties)
            if have != want or h[0] != expected:
                raise Breach(f"request {have!r} != {want!r}")
            expected = h[0] + h[1]
        if n < len(take):  # it stopped: only where the pure loop has more to decide
            h = take[n]
            props = decode_properties(h[8])
            tags = props.get("TAGS", "")
            if h[0] == expected and not (h[2] == "SCHEDULE_TOPIC_XXXX" and "DELAY" in props) and not any(
                    0xD800 <= ord(ch) <= 0xDFFF for ch in tags):
                raise Breach(f"stopped at {h!r} without a reason")
        return n == len(take), min(n, 4)


class _MF:
    """A mapped segment's fields as the compiled scan reads them."""

    def __init__(self, mm: bytes | bytearray, start: int, wrote: int, size: int = 0, reserved: int = 0) -> None:
        self.mm, self.start, self.wrote, self.size, self.reserved = mm, start, wrote, size, reserved


class _Reader:
    """The mmap store reader's pure scan loop, run on fuzzed units over two segments."""

    def __init__(self, files: list[_MF], units: bytes) -> None:
        from rmq.plugins.storage_mmap.reads import StoreReader

        self.scan = StoreReader._scan
        self._units = types.MethodType(StoreReader._units, self)  # (the scope step _scan calls)
        self.units = units
        self.commitlog = self
        self.files, self.file_size = files, 4096
        self.fast_scan: Any = None

    def slice(self, offset: int) -> tuple[Any, int, int]:
        return _MF(self.units, 0, 0), 0, len(self.units)


class _Odd:
    needs_properties = False

    @staticmethod
    def match_tags_code(code: int) -> bool:
        return code % 2 == 1


class Scan(Target):
    """_faststore.scan: consume-queue units of any value over two commitlog segments."""

    name = "scan"
    weight = 1
    tokens = (b"\x7f\xff\xff\xff\xff\xff\xff\xff", b"\x7f\xff\xff\xff\xff\xff\xf0\x00", b"\x80" + bytes(7),
              b"\xff" * 8, bytes(8), b"\x00\x00\x00\x00\x00\x00\x10\x00", b"\x7f\xff\xff\xff", b"\xff\xff\xff\xf0")

    def __init__(self, store: Any) -> None:
        self.fast = store
        rng = random.Random(7)
        self.recs = [(p, s) for p, s in ((0, 120), (120, 300), (420, 91), (4096, 200), (4296, 1000))]
        self.files = [_MF(rng.randbytes(4096), 0, 2000), _MF(rng.randbytes(3000), 4096, 1296)]

    def seeds(self) -> list[bytes]:
        units = b"".join(struct.pack(">qiq", p, s, p % 3) for p, s in self.recs)
        return [b"\x00" + units, b"\x11" + units * 3, b"\x26" + struct.pack(">qiq", 0, 0x7FFFFFFF, 0) + units]

    def args(self, data: bytes) -> tuple[Any, ...]:
        c = data[0] if data else 0
        return (data[1:], c & 3, (1, 3, 32, 1000)[(c >> 2) & 3], (64, 400, 1 << 20, 1 << 20)[(c >> 4) & 3],
                _Odd() if c & 64 else None)

    def run(self, data: bytes) -> Any:
        units, first, count, limit, flt = self.args(data)
        got = self.fast.scan(units, self.files, first, 4096, 0, count, limit, flt.match_tags_code if flt else None)
        if got is None:
            return None
        i, msgs, qoffs, total, removing = got
        if not (0 <= i <= len(units) // 20 and len(msgs) == len(qoffs) <= count and total == sum(map(len, msgs))
                and qoffs == sorted(set(qoffs)) and all(0 <= q < i for q in qoffs)):
            raise Breach(f"scan returned {i}, {len(msgs)} messages, offsets {qoffs[:8]}, {total} bytes")
        return min(len(msgs), 3), removing, i == len(units) // 20

    def check(self, data: bytes) -> None:
        units, first, count, limit, flt = self.args(data)
        if len(units) % 20:
            return
        files = self.files[first:]  # a first segment index past 0 means the list starts later
        reader = _Reader(files, units)
        res = []
        for fast in (None, self.fast.scan):
            reader.fast_scan = fast
            r = reader.scan(reader, reader, 0, count, flt, limit, 0, 0)
            res.append((r.status, r.next_begin_offset, [bytes(m) for m in r.messages], r.queue_offsets, r.total_size))
        if res[0] != res[1]:
            raise Breach(f"compiled scan {res[1]!r:.300} != pure {res[0]!r:.300}")


class PullJoin(Scan):
    """_faststore.pull_join: the same units and segments, TAG codes matched in C, the records in one body;
    compared with the pure scan under the TAG filter on every input."""

    name = "pull_join"

    def args(self, data: bytes) -> tuple[Any, ...]:
        from rmq.plugins.filters.tag import TagFilter

        units, first, count, limit, odd = super().args(data)
        flt = None
        if odd is not None:  # codes as the units carry them: small, negative, 32-bit edges (and wider ones)
            flt = TagFilter("a")
            flt.code_set = frozenset((1, 2) if data[0] & 128 else (0, -1, 0x7FFFFFFF, -(1 << 31)))
        return units, first, count, limit, flt

    def run(self, data: bytes) -> Any:
        units, first, count, limit, flt = self.args(data)
        codes = flt.compiled_codes if flt is not None else None
        got = self.fast.pull_join(units, self.files, first, 4096, 0, count, limit, codes)
        if got is None:
            return None
        i, body, n, total, removing, last = got
        if not (0 <= i <= len(units) // 20 and 0 <= n <= count and total == len(body) and (n > 0 or total == 0)):
            raise Breach(f"pull_join returned {i}, {n} messages, {total} bytes, body of {len(body)}")
        return min(n, 3), removing, i == len(units) // 20

    def check(self, data: bytes) -> None:
        units, first, count, limit, flt = self.args(data)
        if len(units) % 20:
            return
        reader = _Reader(self.files[first:], units)
        pure = reader.scan(reader, reader, 0, count, flt, limit, 0, 0)
        got = self.fast.pull_join(units, self.files[first:], first, 4096, 0, count, limit,
                                  flt.compiled_codes if flt is not None else None)
        if got is None:
            return
        i, body, n, total, removing, _ = got
        if (pure.next_begin_offset, b"".join(map(bytes, pure.messages)), len(pure.messages), pure.total_size) != (
                i, bytes(body), n, total):
            raise Breach(f"pull_join {got!r:.300} != pure {pure!r:.300}")


class _CQ:
    def __init__(self, files: list[_MF]) -> None:
        self.max_phys = 0
        self.files = files


class CqPut(Target):
    """_faststore.cq_put: DispatchRequests of any field values into consume-queue files' mappings."""

    name = "cq_put"
    weight = 1
    UNIT = struct.Struct(">BBBBqii")

    def __init__(self, store: Any) -> None:
        self.cq_put = store.cq_put

    def seeds(self) -> list[bytes]:
        return [b"".join(self.UNIT.pack(0, q, 0, 1, 100 * k, 100, 0) for k in range(6) for q in range(2)),
                self.UNIT.pack(1, 0, 4, 0, 0, 10, 3) + self.UNIT.pack(0, 0, 0, 2, -5, -1, -1)]

    def run(self, data: bytes) -> Any:
        mms = [bytearray(b"\xee" * n) for n in (200, 100, 60)]
        files = [_MF(mms[0], 0, 0, 200, 200), _MF(mms[1], 200, 0, 100, 100), _MF(mms[2], 0, 0, 80, 40)]
        queues = {"A": {0: _CQ([files[0], files[1]]), 1: _CQ([files[2]])}, "B": {0: _CQ([])}}
        reqs: list[Any] = []
        next_q = {0: 10, 1: 0}
        for k in range(min(len(data) // self.UNIT.size, 64)):
            t, q, sf, mode, phys, size, tags = self.UNIT.unpack_from(data, k * self.UNIT.size)
            qoff = next_q.get(q & 1, 0) if mode & 1 else (tags & 0xFFFF)
            next_q[q & 1] = qoff + 1
            r = DispatchRequest("AB"[t & 1] if t < 200 else "C", q & 1 if q < 200 else q, phys, size, tags, k, qoff,
                                sf & 12 if mode & 2 else sf)
            reqs.append(r if t != 255 else ("not a request",))
        i, last = self.cq_put(reqs, 0, queues, -1)
        if not 0 <= i <= len(reqs) or not (last == -1 or last in range(len(reqs))):
            raise Breach(f"cq_put stopped at {i} of {len(reqs)}, last timestamp {last}")
        for f, mm in zip(files, mms, strict=True):
            if not 0 <= f.wrote <= min(f.size, f.reserved, len(mm)) or f.wrote % 20 or any(mm[f.wrote :].strip(b"\xee")):
                raise Breach(f"a queue file wrote {f.wrote} of {f.size} (reserved {f.reserved}, mapped {len(mm)})")
        return i == len(reqs), min(i, 4)


class IndexPut(Target):
    """_faststore.index_put (behind IndexFile.put_many) against the pure loop, keys of any code points."""

    name = "index_put"
    weight = 1
    tokens = (b"\xed\xa0\x80", b"\xf0\x9f\x98\x80", b"\xfe", b"T#")

    def __init__(self, store: Any) -> None:
        self.fast = store

    def seeds(self) -> list[bytes]:
        return [b"\x01\x05T#k\xfeT#\xc3\xa9\xfeT#\xf0\x9f\x98\x80\xfe" + b"k" * 300, b"\x40\x00\xfe\xfe"]

    def files(self, data: bytes) -> tuple[list[Any], list[tuple[Any, ...]]]:
        from rmq.plugins.storage_mmap.index import IndexFile, index_file_size

        c0, c1 = (data + b"\0\0")[:2]
        slots, entries = (1, 3, 64, 7)[c0 & 3], 1 + (c1 & 31)
        out = []
        for _ in range(2):
            mf = _MF(bytearray(index_file_size(slots, entries)), 0, 0, 0, 1 << 30)
            out.append(IndexFile(mf, slots, entries))  # type: ignore[arg-type]
        items: list[tuple[Any, ...]] = []
        for k, key in enumerate(data[2:].split(b"\xfe")[:40]):  # "topic#key", as the dispatcher builds them
            ts = (1_700_000_000_000 + k * 1000, -1, 2**63 - 1, 0)[(c0 >> 2 + (k & 3)) & 3]
            items.append(("T#" + _text(key), k * 100 if (c1 >> 5) != 7 else -k, ts) if c0 < 250 else (k, k, k))
        return out, items

    def run(self, data: bytes) -> Any:
        (pure, fast), items = self.files(data)
        res = []
        for f, mod in ((pure, None), (fast, self.fast)):
            try:
                res.append(f.put_many(items, 0, mod))
            except Exception as exc:  # the pure loop's error for an item it cannot take: the same both ways
                res.append((type(exc), str(exc)))
        if res[0] != res[1] or pure.mm != fast.mm or (pure.count, pure.slot_count) != (fast.count, fast.slot_count):
            raise Breach(f"index: compiled {res[1]!r} != pure {res[0]!r}, or the files differ")
        return res[0] if isinstance(res[0], int) else res[0][0].__name__


_ALL: tuple[tuple[type[Target], str], ...] = (
    (Split, "codec"), (EncodeParts, "codec"), (DecodeRecords, "codec"), (SendServe, "store"), (MeasurePack, "store"),
    (Requests, "store"), (Scan, "store"), (PullJoin, "store"), (CqPut, "store"), (IndexPut, "store"), (PullDecode, "store"))


def _all() -> tuple[tuple[type[Target], str], ...]:
    """The targets here and those in the modules beside this one (which import from it: loaded late)."""
    from rmq.testing.fuzztargets_beat import BeatDecode
    from rmq.testing.fuzztargets_reput import ReputPut

    return (*_ALL, (ReputPut, "store"), (BeatDecode, "store"))


def target_names() -> list[str]:
    return [cls.name for cls, _ in _all()]


def make_targets(only: list[str] | None = None) -> list[Target]:
    """The targets (those named in ``only``, else all) bound to the builds RMQ_FASTFRAME / RMQ_FASTSTORE
    name, else the installed ones; RuntimeError when an extension was not built."""
    codec = frame_mod._codec or frame_mod.compiled_codec()  # the one serving, else loaded anyway (RMQ_PURE)
    store = storepath.FAST or storepath.compiled_store()
    if codec is None or store is None:
        raise RuntimeError("rmq's C extensions were not built: make install-test")
    unknown = set(only or ()) - set(target_names())
    if unknown:
        raise ValueError(f"no fuzz target {sorted(unknown)}; there are {target_names()}")
    return [cls(codec if kind == "codec" else store) for cls, kind in _all() if not only or cls.name in only]
