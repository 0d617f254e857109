"""RocketMQ's HA stream, sans-IO: the bytes both directions carry, and nothing else.

Slave → master: a bare 8-byte big-endian long, the slave's commitlog max offset. A
master reads the last whole report in what arrived (reports are 8 bytes, so a stream
of them stays aligned).

Controller mode only: the slave first sends a 16-byte handshake with its broker id.

Master → slave: frames ``[8 B physical offset][4 B body size][body]``; a body of size 0
is a heartbeat. Controller mode (after that handshake) adds ``[8 B confirmOffset]`` to
every header, as AutoSwitchHA's TRANSFER header carries it: the slave serves only below
``min(confirmOffset, its own end)``. (Neither side of a controller-mode link speaks the 4.x
stream to a Java peer, which runs AutoSwitchHA: this is rmq's own controller-mode stream.) The decoder refuses what no master sends (a negative offset or size,
a body over ``max_body``) with :class:`FrameError`, whose message names the fault; the
connection then resets and nothing of the frame is applied.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

__all__ = [
    "CONFIRM_HEADER",
    "HANDSHAKE",
    "HEADER",
    "REPORT",
    "FrameError",
    "ReportReader",
    "TransferDecoder",
    "decode_handshake",
    "encode_handshake",
    "encode_header",
    "encode_report",
]

REPORT = struct.Struct(">q")
#: controller mode: a slave opens with AutoSwitchHA's handshake layout (state HANDSHAKE=1, isSyncFromLastFile,
#: isAsyncLearner, slave broker id) so that its master knows which replica each connection is
HANDSHAKE = struct.Struct(">ihhq")
HEADER = struct.Struct(">qi")
#: controller mode: offset, body size, the master's confirm offset
CONFIRM_HEADER = struct.Struct(">qiq")
#: a slave's read buffer in RocketMQ is 4 MiB; no master sends a body larger than that
MAX_BODY = 4 * 1024 * 1024
#: a master keeps at most this many unread report bytes (RocketMQ's read buffer is 1 MiB)
MAX_REPORT_BUFFER = 1024 * 1024


class FrameError(ValueError):
    """Bytes that are not an HA stream."""


def encode_report(offset: int) -> bytes:
    return REPORT.pack(offset)


def encode_handshake(broker_id: int) -> bytes:
    return HANDSHAKE.pack(1, 0, 0, broker_id)


def decode_handshake(data: bytes) -> int:
    state, _last_file, _learner, broker_id = HANDSHAKE.unpack(data)
    if state != 1 or broker_id <= 0:
        raise FrameError(f"not a replica handshake (state {state}, broker id {broker_id})")
    return int(broker_id)


def encode_header(offset: int, size: int, confirm: int | None = None) -> bytes:
    """A frame header; with ``confirm`` the controller-mode layout."""
    return HEADER.pack(offset, size) if confirm is None else CONFIRM_HEADER.pack(offset, size, confirm)


class ReportReader:
    """Master side: feed received bytes, get the newest complete report (or None)."""

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, data: bytes) -> int | None:
        buf = self._tail + data if self._tail else data
        whole = len(buf) - len(buf) % 8
        self._tail = buf[whole:]
        if not whole:
            return None
        (offset,) = REPORT.unpack_from(buf, whole - 8)
        if offset < 0:
            raise FrameError(f"slave reported a negative offset {offset}")
        return int(offset)


class TransferDecoder:
    """Slave side: feed received bytes, iterate ``(offset, body)`` frames (body ``b""`` = heartbeat).
    ``confirm``: controller-mode headers; ``confirm_offset`` is then the newest frame's (-1 before one)."""

    __slots__ = ("_buf", "_header", "confirm_offset", "max_body")

    def __init__(self, max_body: int = MAX_BODY, confirm: bool = False) -> None:
        self._buf = bytearray()
        self.max_body = max_body
        self._header = CONFIRM_HEADER if confirm else HEADER
        self.confirm_offset = -1

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        buf = self._buf
        buf += data
        pos = 0
        header = self._header
        hsize = header.size
        try:
            while len(buf) - pos >= hsize:
                offset, size, *confirm = header.unpack_from(buf, pos)
                if offset < 0:
                    raise FrameError(f"frame with negative offset {offset}")
                if size < 0 or size > self.max_body:
                    raise FrameError(f"frame at offset {offset} announces {size} bytes (limit {self.max_body})")
                if confirm and confirm[0] < 0:
                    raise FrameError(f"frame at offset {offset} with negative confirm offset {confirm[0]}")
                if len(buf) - pos - hsize < size:
                    break
                body = bytes(buf[pos + hsize : pos + hsize + size])
                pos += hsize + size
                if confirm:
                    self.confirm_offset = confirm[0]
                yield offset, body
        finally:
            del buf[:pos]
