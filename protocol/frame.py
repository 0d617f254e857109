"""Frames: the 4-byte length, the header word (serialize type, header length), header, body; sans-IO.

``encode_parts`` keeps header and body apart so a writer can join many frames with one
copy; :class:`FrameDecoder` parses whole frames straight out of the received chunk,
buffering only an incomplete tail. Whatever a peer sends ends in a RemotingCommand, an
:class:`~rmq.protocol.command.UndecodableCommand` (the frame was whole and told us its
opaque and flag, so the connection can answer it and go on) or a FrameError (close).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

from rmq.protocol.codes import SerializeType
from rmq.protocol.command import (
    DEFAULT_MAX_FRAME_SIZE,
    CommandDecodeError,
    FrameError,
    RemotingCommand,
    UndecodableCommand,
)
from rmq.protocol.extensions import load_extension, select
from rmq.protocol.headercodec import (
    decode_binary_header,
    decode_json_header,
    encode_binary_header,
    encode_json_header,
)

__all__ = ["CODEC", "FrameDecoder", "decode", "encode", "encode_parts"]

_JSON = int(SerializeType.JSON)
_ROCKETMQ = int(SerializeType.ROCKETMQ)
_I32 = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")  # frame length, header word


def encode_parts(cmd: RemotingCommand) -> tuple[bytes, bytes]:
    """(length word + header word + header, body): lets a writer join many frames with one copy."""
    st = cmd.serialize_type
    if st == _JSON:
        header = encode_json_header(cmd)
    elif st == _ROCKETMQ:
        header = encode_binary_header(cmd)
    else:
        raise ValueError(f"unknown serialize type {st}")
    hl = len(header)
    if hl > 0xFFFFFF:
        raise ValueError(f"header of {hl} bytes does not fit the 24-bit header length")
    return _PREFIX.pack(4 + hl + len(cmd.body), (st << 24) | hl) + header, cmd.body


def encode(cmd: RemotingCommand) -> bytes:
    """The whole frame, including the leading 4-byte length."""
    head, body = encode_parts(cmd)
    return head + body if body else head


def _decode_payload(buf: bytes | bytearray, start: int, end: int) -> RemotingCommand:
    """Decode ``buf[start:end]`` = header word + header + body (the length word already consumed)."""
    (word,) = _I32.unpack_from(buf, start)
    st = (word >> 24) & 0xFF
    hl = word & 0xFFFFFF
    hs = start + 4
    he = hs + hl
    if he > end:
        raise FrameError(f"header length {hl} exceeds the {end - start}-byte frame", kind="header-length")
    if he == end:
        body = b""
    elif type(buf) is bytes:
        body = buf[he:end]
    else:  # one copy, not two (bytearray slice then bytes())
        body = memoryview(buf)[he:end].tobytes()
    if st == _JSON:
        return decode_json_header(buf[hs:he], body)
    if st == _ROCKETMQ:
        return decode_binary_header(buf[hs:he], body)
    raise FrameError(
        f"unknown serialize type {st} in header word 0x{word & 0xFFFFFFFF:08x}", kind="serialize-type"
    )


def decode(frame: bytes | bytearray) -> RemotingCommand:
    """Decode exactly one whole frame (including its 4-byte length), no size limit; raises FrameError."""
    n = len(frame)
    if n < 8:
        raise FrameError(f"expected exactly one frame, got {n} bytes", kind="length")
    (length,) = _I32.unpack_from(frame, 0)
    if length + 4 != n:
        raise FrameError(f"expected exactly one frame: its length word says {length + 4} bytes, got {n}",
                         kind="length")
    return _decode_payload(frame, 4, n)


def _decode_one(src: bytes | bytearray, start: int, end: int, recover: bool) -> RemotingCommand:
    """One frame on the pure path, as ``FrameDecoder.feed`` decodes it: the compiled splitter's fallback."""
    try:
        return _decode_payload(src, start, end)
    except CommandDecodeError as exc:
        if not recover or exc.opaque is None or exc.flag is None:
            raise
        return UndecodableCommand.from_error(exc)


_Split = Callable[[bytes | bytearray, int, bool], tuple[list[RemotingCommand], int]]


def compiled_codec() -> Any:
    """The compiled codec module (``rmq.protocol._fastframe``, bound to this module's pure decoder and
    encoder for what it does not do itself), or None when the extension was not built; loaded whatever
    ``RMQ_PURE`` says. ``RMQ_FASTFRAME`` names another build of the extension to load instead."""
    _fastframe = load_extension("_fastframe", "RMQ_FASTFRAME")  # RMQ_FASTFRAME: make fuzz-asan's build
    if _fastframe is None:
        return None
    from rmq.protocol.headercodec import _LANG_NAMES

    _fastframe.configure(RemotingCommand, _LANG_NAMES, _decode_one, encode_parts_pure)
    return _fastframe


def compiled_split() -> _Split | None:
    """The compiled splitter, or None (see :func:`compiled_codec`)."""
    codec = compiled_codec()
    return None if codec is None else codec.split


encode_parts_pure = encode_parts  # the reference the compiled encoder falls back to and is tested against


_codec, CODEC = select(compiled_codec)
"""``CODEC``: which frame codec serves, in words, for ``rmqd``'s start line ("compiled" / "pure (...)")."""
_split: _Split | None = None
if _codec is not None:
    _split = _codec.split
    encode_parts = _codec.encode_parts  # noqa: F811 - the same function, compiled for JSON headers

_SHRINK_ABOVE: Final = 256 * 1024  # a buffer that held a frame larger than this is released once drained


class FrameDecoder:
    """Incremental frame splitter + decoder for one connection.

    Whole frames are parsed directly from the chunk just received; only an
    incomplete tail is copied into the buffer, so the common case costs one copy
    (the body slice). The buffer grows only as bytes arrive (a length word of 16 MiB
    allocates nothing by itself) and is released once a large frame has been
    consumed, so an idle connection holds nothing. An oversized frame is rejected
    from its length word alone.

    ``recover=True`` (the transport's setting) turns a frame whose header fails after its
    opaque and flag were read into an :class:`UndecodableCommand` in the output, so the
    connection can answer it and keep going. Any other FrameError means the decoder (and
    the connection) must be discarded.
    """

    __slots__ = ("max_frame_size", "recover", "_buf", "_split")

    def __init__(
        self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, *, recover: bool = False, compiled: bool | None = None
    ) -> None:
        """``compiled``: None takes the module's choice (:data:`CODEC`), False the pure path, True the
        compiled splitter even under ``RMQ_PURE`` (the differential tests run both in one process)."""
        self.max_frame_size = max_frame_size
        self.recover = recover
        self._buf = bytearray()
        if compiled is None:
            self._split = _split
        elif compiled:
            self._split = _split or compiled_split()
            if self._split is None:
                raise RuntimeError("the compiled frame decoder (rmq.protocol._fastframe) was not built")
        else:
            self._split = None

    @property
    def buffered(self) -> int:
        """Bytes held of a frame not yet complete."""
        return len(self._buf)

    def take(self, data: bytes | bytearray | memoryview) -> bytes | bytearray:
        """The bytes of a frame not yet complete (now no longer held) followed by ``data``: for a caller
        that serves some frames itself and feeds the rest back (the compiled send path)."""
        buf = self._buf
        if not buf:
            return data if isinstance(data, (bytes, bytearray)) else bytes(data)
        self._buf = bytearray()
        buf += data
        return buf

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        buf = self._buf
        if buf:
            buf += data
            src: bytes | bytearray = buf
        else:
            src = data if isinstance(data, (bytes, bytearray)) else bytes(data)
        n = len(src)
        limit = self.max_frame_size
        split = self._split
        if split is not None:  # every whole frame in one compiled call; the loop below takes the rest
            out, pos = split(src, limit, self.recover)
        else:
            out = []
            pos = 0
        while n - pos >= 4:
            (length,) = _I32.unpack_from(src, pos)
            if length < 4:
                raise FrameError(f"frame length {length} is below the 4-byte minimum", kind="length")
            if length + 4 > limit:
                raise FrameError(f"frame of {length + 4} bytes exceeds the {limit}-byte limit", kind="too-large")
            end = pos + 4 + length
            if end > n:
                break
            try:
                out.append(_decode_payload(src, pos + 4, end))
            except CommandDecodeError as exc:
                if not self.recover or exc.opaque is None or exc.flag is None:
                    raise
                out.append(UndecodableCommand.from_error(exc))
            pos = end
        if src is buf:
            if pos == n:
                if n > _SHRINK_ABOVE:
                    self._buf = bytearray()
                else:
                    buf.clear()
            elif pos:
                if pos > _SHRINK_ABOVE:
                    self._buf = bytearray(memoryview(buf)[pos:])
                else:
                    del buf[:pos]
        elif pos < n:
            buf += src[pos:]
        return out
