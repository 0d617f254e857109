"""The fuzz target of ``_faststore.pull_decode`` (the per-request compiled pull's decoder), registered with the
others in :mod:`rmq.testing.fuzztargets` (kept apart: that module is at its size limit).

Its reference: a frame the compiled decoder accepts must decode on the pure path (``frame.decode``) to a
PULL_MESSAGE / LITE_PULL_MESSAGE request whose fields, read as pull.py reads them (``ext_str``, ``ext_i32``,
``ext_int`` and the ``or`` defaults of the subscription), are exactly the decoded ones.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable
from typing import Any

from rmq.protocol import frame as frame_mod
from rmq.protocol.command import CommandDecodeError, FrameError, HeaderError, ext_i32, ext_int, ext_str
from rmq.testing.fuzzdrive import Breach, Target

__all__ = ["PullDecode", "pure_pull_fields"]

_FRAME = struct.Struct(">iI")
_I32 = struct.Struct(">i")
_FIELDS = {"consumerGroup": "g1", "topic": "PullT", "queueId": "1", "queueOffset": "17", "maxMsgNums": "32",
           "sysFlag": "7", "commitOffset": "12", "suspendTimeoutMillis": "15000", "subscription": "TagA || TagB",
           "subVersion": "1700000000000", "expressionType": "TAG"}


def _frame(header: bytes, body: bytes = b"") -> bytes:
    return _FRAME.pack(4 + len(header) + len(body), len(header)) + header + body


def pure_pull_fields(frame: bytes) -> tuple[Any, ...] | None:
    """The fields pull_decode gives for ``frame`` (one whole frame), by the pure decoder and pull.py's
    accessors; None when that is not a request pull.py reads without an error."""
    try:
        cmd = frame_mod.decode(frame)
    except (FrameError, CommandDecodeError):
        return None
    if cmd.code not in (11, 361) or cmd.flag != 0 or cmd.body or cmd.serialize_type != 0:
        return None
    ext = cmd.ext
    try:
        return (cmd.opaque, ext_str(cmd, "consumerGroup"), ext_str(cmd, "topic"), ext_i32(cmd, "queueId"),
                ext_int(cmd, "queueOffset"), ext_i32(cmd, "maxMsgNums"), ext_i32(cmd, "sysFlag"),
                ext_int(cmd, "commitOffset", -1), ext_int(cmd, "suspendTimeoutMillis", 0),
                ext.get("subscription") or None, ext.get("expressionType") or None, ext_int(cmd, "subVersion", 0))
    except HeaderError:
        return None


class PullDecode(Target):
    """_faststore.pull_decode: a read's bytes from a position, PULL_MESSAGE headers of every shape."""

    name = "pull_decode"
    weight = 1
    tokens = (b'"consumerGroup":"', b'"topic":"', b'"queueId":', b'"queueOffset":"', b'"maxMsgNums":',
              b'"sysFlag":"', b'"commitOffset":"', b'"suspendTimeoutMillis":"', b'"subscription":"',
              b'"subVersion":"', b'"expressionType":"', b'"code":11', b'"code":361', b'"flag":0', b"\\u0054",
              b"-", b"9999999999", b"\n")
    LIMITS = (1 << 24, 64, 300, 1 << 24)

    def __init__(self, store: Any) -> None:
        self.decode = store.pull_decode

    def seeds(self) -> list[bytes]:
        def head(ext: dict[str, Any], **top: Any) -> bytes:
            h = {"code": 11, "extFields": ext, "flag": 0, "language": "JAVA", "opaque": 9,
                 "serializeTypeCurrentRPC": "JSON", "version": 409} | top
            return json.dumps(h, separators=(",", ":")).encode()

        cpp = dict(_FIELDS, queueId=1, maxMsgNums=32, sysFlag=7, AccessKey="", Signature="x=")
        return [b"\x00" + _frame(head(_FIELDS)) * 2,
                b"\x01" + _frame(head(cpp, language="CPP", remark="", version=63) + b"\n"),
                b"\x02" + _frame(head({k: v for k, v in _FIELDS.items() if k[0] in "ctqms"}, code=361)),
                b"\x04xyz" + _frame(head(dict(_FIELDS, topic="Pull\\T", queueOffset="-3"))),
                b"\x03" + _frame(head(dict(_FIELDS, subscription="")), b"body")]

    def reframe(self, rng: random.Random, mutate: Callable[[bytes], bytes]) -> bytes:
        """A mutated pull header with a true length, after 0..3 bytes of a previous frame's tail."""
        skip = rng.getrandbits(2)
        ext = {k: v for k, v in _FIELDS.items() if rng.getrandbits(3)}
        h = json.dumps({"code": rng.choice((11, 361, 11, 10)), "extFields": ext, "flag": 0, "opaque": 5},
                       separators=(",", ":")).encode()
        return bytes([skip << 2 | rng.getrandbits(2)]) + bytes(skip) + _frame(mutate(h), b"" if rng.getrandbits(3) else b"b")

    def args(self, data: bytes) -> tuple[bytes, int, int]:
        c = data[0] if data else 0
        src = data[1:]
        return src, min((c >> 2) & 3, len(src)), self.LIMITS[c & 3]

    def taken(self, data: bytes) -> tuple[Any, bytes] | None:
        """What the decoder took from ``data``'s read, checked to be a whole frame within it and the limit, and
        that frame's bytes; None when it took nothing."""
        src, pos, limit = self.args(data)
        got = self.decode(src, pos, limit)
        if got is None:
            return None
        end = got[0]
        if not pos + 8 <= end <= len(src) or end != pos + 4 + _I32.unpack_from(src, pos)[0] or end - pos > limit:
            raise Breach(f"{self.name} ended at {end} for a frame from {pos} of {len(src)} bytes (limit {limit})")
        return got, bytes(src[pos:end])

    def run(self, data: bytes) -> Any:
        taken = self.taken(data)
        return None if taken is None else (taken[0][6] & 7, taken[0][10] is None, taken[0][11] is None)

    def check(self, data: bytes) -> None:
        taken = self.taken(data)
        if taken is None:
            return
        got, frame = taken
        want = pure_pull_fields(frame)
        if want != got[1:]:
            raise Breach(f"pull_decode {got!r:.300} != pure {want!r:.300}")
