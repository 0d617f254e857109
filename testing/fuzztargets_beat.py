"""The fuzz target of ``_faststore.beat_decode`` (the decoder of heartbeats answered per read, fastbeat), registered
with the others in :mod:`rmq.testing.fuzztargets` (kept apart: that module is at its size limit).

Its reference: a frame the compiled decoder accepts must decode on the pure path (``frame.decode``) to a
HEART_BEAT request (not oneway, JSON) with the same opaque, version and body, and the same language when the
decoded one is a language name the pure decoder knows (fastbeat compares it with the Python path's, which
is always one); and the answer fastbeat writes for its opaque is the Python path's ``cmd.response()``.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable
from typing import Any

from rmq.plugins.broker.fastbeat import answer
from rmq.protocol import frame as frame_mod
from rmq.protocol.codes import LanguageCode
from rmq.protocol.command import CommandDecodeError, FrameError
from rmq.testing.fuzzdrive import Breach
from rmq.testing.fuzztargets_pull import PullDecode

__all__ = ["BeatDecode", "beat_agrees", "pure_beat_fields"]

_FRAME = struct.Struct(">iI")
_LANGS = frozenset(m.name for m in LanguageCode)
_BODY = json.dumps({"clientID": "127.0.0.1@1", "producerDataSet": [{"groupName": "pg"}], "consumerDataSet": [{
    "groupName": "cg", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING", "subscriptionDataSet": [{
        "topic": "T", "subString": "*", "tagsSet": [], "subVersion": 1}]}]}, separators=(",", ":")).encode()


def _frame(header: bytes, body: bytes = b"") -> bytes:
    return _FRAME.pack(4 + len(header) + len(body), len(header)) + header + body


def pure_beat_fields(frame: bytes) -> tuple[Any, ...] | None:
    """(opaque, language, version, body) of ``frame`` (one whole frame) by the pure decoder; None when it is
    not a HEART_BEAT request in a JSON header."""
    try:
        cmd = frame_mod.decode(frame)
    except (FrameError, CommandDecodeError):
        return None
    if cmd.code != 34 or cmd.flag != 0 or cmd.serialize_type != 0:
        return None
    return cmd.opaque, cmd.language, cmd.version, cmd.body


def beat_agrees(got: tuple[Any, ...], frame: bytes) -> bool:
    """Whether beat_decode's ``got`` for ``frame`` (the whole frame it ended) is what the pure path reads:
    the same opaque, version and body, the same language when ``got``'s is a name the pure decoder knows."""
    want = pure_beat_fields(frame)
    if want is None:
        return False
    opaque, language, version, body = got[1:]
    return (opaque, version, body) == (want[0], want[2], want[3]) and (language not in _LANGS or language == want[1])


class BeatDecode(PullDecode):
    """_faststore.beat_decode: a read's bytes from a position, HEART_BEAT headers of every shape (its reads and
    their checks as pull_decode's)."""

    name = "beat_decode"
    weight = 1
    tokens = (b'"code":34', b'"flag":0', b'"language":"JAVA"', b'"language":"CPP"', b'"language":"NOPE"',
              b'"version":409', b'"version":-1', b'"remark":"', b'"extFields":{}', b"\\u0041", b"\n", b"-")
    def __init__(self, store: Any) -> None:
        self.decode = store.beat_decode

    def seeds(self) -> list[bytes]:
        def head(**top: Any) -> bytes:
            h = {"code": 34, "flag": 0, "language": "JAVA", "opaque": 9, "serializeTypeCurrentRPC": "JSON",
                 "version": 409} | top
            return json.dumps(h, separators=(",", ":")).encode()

        return [b"\x00" + _frame(head(), _BODY) * 2,
                b"\x01" + _frame(head(language="CPP", remark="", version=63, extFields={"a": 1}) + b"\n", _BODY),
                b"\x04xyz" + _frame(head(language="PYTHON", opaque=-7), b""),
                b"\x03" + _frame(head(language="NOPE", flag=2), _BODY),
                b"\x02" + _frame(head(remark="a\\u0041"), _BODY)]

    def reframe(self, rng: random.Random, mutate: Callable[[bytes], bytes]) -> bytes:
        """A mutated heartbeat header with a true length, after 0..3 bytes of a previous frame's tail."""
        skip = rng.getrandbits(2)
        h = json.dumps({"code": rng.choice((34, 34, 34, 11)), "flag": 0, "language": rng.choice(("JAVA", "CPP", "X")),
                        "opaque": rng.getrandbits(8), "version": 409}, separators=(",", ":")).encode()
        body = _BODY[:rng.randrange(len(_BODY) + 1)] if rng.getrandbits(1) else _BODY
        return bytes([skip << 2 | rng.getrandbits(2)]) + bytes(skip) + _frame(mutate(h), body)

    def run(self, data: bytes) -> Any:
        taken = self.taken(data)
        if taken is None:
            return None
        got, frame = taken
        if len(got[4]) > len(frame) - 8:
            raise Breach(f"beat_decode's body of {len(got[4])} bytes is longer than its frame")
        return got[2] in _LANGS, len(got[4]) > 0

    def check(self, data: bytes) -> None:
        taken = self.taken(data)
        if taken is None:
            return
        got, frame = taken
        if not beat_agrees(got, frame):
            raise Breach(f"beat_decode {got!r:.300} != pure {pure_beat_fields(frame)!r:.300}")
        reply = frame_mod.encode(frame_mod.decode(frame).response())
        if answer(got[1]) != reply:
            raise Breach(f"fastbeat's answer {answer(got[1])!r} != the Python path's {reply!r}")
