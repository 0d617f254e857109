"""Stored-message records (§4.1), message ids (§4.2), batch bodies (§4.9), compression (§4.7).

Client-side decoding and test-side encoding; the store's hot append path builds
its records itself with ``struct.pack_into`` into reusable buffers.

Every decoder here takes bytes from strangers (pull bodies from a broker, batch
bodies from a producer, ids typed by users) and raises only its documented error
type, a ``ValueError`` subclass (:class:`MessageDecodeError`, :class:`BatchError`),
whatever the input: the fuzz suite in ``tests/protocol`` holds them to that.
"""

from __future__ import annotations

import datetime
import itertools
import os
import random
import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any, Final

from rmq.protocol.common import MAGIC_MESSAGE, Prop, SysFlag, decode_properties, encode_properties
from rmq.protocol.extensions import load_extension, select
from rmq.protocol.record import HEAD, TAIL

__all__ = [
    "BatchError",
    "MessageDecodeError",
    "MessageExt",
    "UniqIdGenerator",
    "body_crc",
    "compress_body",
    "decode_batch",
    "decode_message",
    "decode_messages",
    "decode_offset_msg_id",
    "decompress_body",
    "encode_batch",
    "encode_message",
    "host_bytes",
    "offset_msg_id",
    "parse_host",
]

COMPRESS_LEVEL: Final = 5
COMPRESS_THRESHOLD: Final = 4096  # producers compress bodies of at least this many bytes
COMPRESSION_TYPE_MASK: Final = 0x700  # sysFlag bits 8-10: 0x100 LZ4, 0x200 ZSTD, 0x300 ZLIB, 0 = zlib
#: Largest body :func:`decompress_body` inflates: a 4 MiB message could otherwise expand to gigabytes.
MAX_INFLATED_BODY: Final = 64 * 1024 * 1024

_HEAD = HEAD  # total, magic, crc, queueId, flag, queueOffset, physOffset, sysFlag, born
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_H = struct.Struct(">H")
_B = struct.Struct(">B")
_TAIL = TAIL  # reconsumeTimes, preparedTxOffset, bodyLen
_V4_MID = struct.Struct(">8sq8siqi")  # bornHost, storeTimestamp, storeHost, reconsumeTimes, preparedTx, bodyLen
_V6_BITS = SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6
_BATCH_HEAD = struct.Struct(">iiiii")  # total, magic, crc, flag, bodyLen
_IPV4_RECORD_OVERHEAD = 91


class MessageDecodeError(ValueError):
    """A stored-record buffer is malformed (truncated, inconsistent sizes, bad compression)."""


class BatchError(ValueError):
    """A batch body (§4.9) is malformed."""


# --------------------------------------------------------------------------- hosts and ids


def host_bytes(ip: str, port: int) -> bytes:
    """4-byte IPv4 (8 total) or 16-byte IPv6 (20 total) address followed by an int32 port."""
    try:
        if ":" in ip:
            return socket.inet_pton(socket.AF_INET6, ip) + _I.pack(port)
        return socket.inet_pton(socket.AF_INET, ip) + _I.pack(port)
    except OSError:
        raise ValueError(f"not an IPv4/IPv6 address: {ip!r}") from None


def parse_host(b: bytes | bytearray | memoryview) -> tuple[str, int]:
    """Inverse of :func:`host_bytes`: (ip, port) from 8 or 20 bytes."""
    b = bytes(b)
    if len(b) == 8:
        return socket.inet_ntoa(b[:4]), _I.unpack_from(b, 4)[0]
    if len(b) == 20:
        return socket.inet_ntop(socket.AF_INET6, b[:16]), _I.unpack_from(b, 16)[0]
    raise ValueError(f"a host is 8 or 20 bytes, got {len(b)}")


def _split_addr(addr: str) -> tuple[str, int]:
    ip, sep, port = addr.rpartition(":")
    if not sep:
        raise ValueError(f"address {addr!r} is not ip:port")
    return ip.strip("[]"), int(port)


def _host_arg(h: str | bytes | tuple[str, int]) -> bytes:
    if isinstance(h, bytes):
        if len(h) not in (8, 20):
            raise ValueError(f"a host is 8 or 20 bytes, got {len(h)}")
        return h
    if isinstance(h, tuple):
        return host_bytes(h[0], h[1])
    return host_bytes(*_split_addr(h))


@lru_cache(maxsize=4096)  # few distinct hosts per pull: store host is constant, born hosts repeat
def _host_str(b: bytes) -> str:
    ip, port = parse_host(b)
    return f"{ip}:{port}"


def offset_msg_id(store_host: bytes, commit_log_offset: int) -> str:
    """Broker-side message id: store host bytes + int64 offset as uppercase hex (32 or 56 chars)."""
    return (store_host + _Q.pack(commit_log_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """(ip, port, commit log offset) from a 32-hex (IPv4) or 56-hex (IPv6) offset message id.

    Raises :class:`MessageDecodeError` (a ValueError) for anything else.
    """
    if not isinstance(msg_id, str):
        raise MessageDecodeError(f"an offset message id is a string, got {type(msg_id).__name__}")
    n = len(msg_id)
    if n not in (32, 56):
        raise MessageDecodeError(f"an offset message id has 32 or 56 hex digits, got {n}: {msg_id[:60]!r}")
    if not (msg_id.isascii() and msg_id.isalnum()):  # fromhex alone would skip whitespace
        raise MessageDecodeError(f"offset message id is not hex: {msg_id!r}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise MessageDecodeError(f"offset message id is not hex: {msg_id!r}") from None
    ip, port = parse_host(raw[:-8])
    return ip, port, _Q.unpack_from(raw, len(raw) - 8)[0]


class UniqIdGenerator:
    """Java-layout UNIQ_KEY ids: ip(4) pid(2) random(4) | ms since month start(4) counter(2).

    The 10-byte prefix is rendered to hex once; each id costs one format call.
    Thread-safe enough: the counter is an ``itertools.count`` (atomic under the GIL).
    """

    __slots__ = ("_prefix", "_counter", "_start_ms", "_next_start_ms", "_lock")

    def __init__(self, ip: str, pid: int | None = None, seed: int | None = None) -> None:
        ip_b = socket.inet_aton(ip)  # the caller's address (rmq.kernel.net.local_ipv4): no I/O in protocol/
        pid_b = struct.pack(">H", (os.getpid() if pid is None else pid) & 0xFFFF)
        rnd = random.Random(seed).getrandbits(32) if seed is not None else random.getrandbits(32)
        self._prefix = (ip_b + pid_b + struct.pack(">I", rnd)).hex().upper()
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._start_ms = 0
        self._next_start_ms = 0
        self._set_month(int(time.time() * 1000))

    def _set_month(self, now_ms: int) -> None:
        with self._lock:
            now = datetime.datetime.fromtimestamp(now_ms / 1000).astimezone()
            start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            nxt = (start + datetime.timedelta(days=32)).replace(day=1)
            self._start_ms = int(start.timestamp() * 1000)
            self._next_start_ms = int(nxt.timestamp() * 1000)

    @property
    def prefix(self) -> str:
        return self._prefix

    def create(self) -> str:
        """A new 32-hex-digit uppercase id."""
        now = time.time_ns() // 1_000_000
        if now >= self._next_start_ms:
            self._set_month(now)
        tail = (((now - self._start_ms) & 0xFFFFFFFF) << 16) | (next(self._counter) & 0xFFFF)
        return self._prefix + tail.to_bytes(6, "big").hex().upper()

    __call__ = create




# --------------------------------------------------------------------------- compression / crc


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """BODYCRC: CRC-32 (IEEE) of the stored body, masked to 31 bits."""
    return zlib.crc32(body) & 0x7FFFFFFF


def compress_body(body: bytes, level: int = COMPRESS_LEVEL) -> bytes:
    """zlib stream with header (Java Deflater compatible); callers apply the 4096-byte threshold."""
    return zlib.compress(body, level)


def decompress_body(body: bytes | bytearray | memoryview, max_size: int = MAX_INFLATED_BODY,
                    sys_flag: int = 0) -> bytes:
    """The body of a COMPRESSED message, by its sysFlag compression type (RocketMQ 5: bits 8-10, 0x100
    LZ4 frame, 0x200 Zstandard frame, 0x300 or 0 zlib). More than ``max_size`` bytes out (a bomb), a
    damaged body or a missing optional package is a MessageDecodeError saying which."""
    ctype = sys_flag & COMPRESSION_TYPE_MASK
    if ctype == 0x100:
        return _lz4(bytes(body), max_size)
    if ctype == 0x200:
        return _zstd(bytes(body), max_size)
    if ctype not in (0, 0x300):
        raise MessageDecodeError(f"compression type 0x{ctype:x} is not one of LZ4, ZSTD, ZLIB")
    d = zlib.decompressobj()
    try:
        out = d.decompress(body, max_size)
        if d.unconsumed_tail:
            raise MessageDecodeError(f"compressed body inflates beyond {max_size} bytes")
        out += d.flush()
    except zlib.error as exc:
        raise MessageDecodeError(f"cannot inflate a compressed body: {exc}") from None
    if not d.eof:
        raise MessageDecodeError("cannot inflate a compressed body: truncated zlib stream")
    return out


def _lz4(body: bytes, max_size: int) -> bytes:
    try:
        import lz4.frame  # noqa: PLC0415 - optional: only 5.x producers' LZ4 bodies need it
    except ImportError:
        raise MessageDecodeError("an LZ4-compressed body needs the 'lz4' package: pip install 'rmq[compress]'") from None
    try:
        d = lz4.frame.LZ4FrameDecompressor()
        out = d.decompress(body, max_length=max_size)
        if not d.eof:
            raise MessageDecodeError(
                "LZ4 body inflates beyond the limit or is truncated" if len(out) >= max_size
                else "cannot inflate an LZ4 body: truncated frame")
        return out
    except RuntimeError as exc:  # lz4 reports damaged frames as RuntimeError
        raise MessageDecodeError(f"cannot inflate an LZ4 body: {exc}") from None


def _zstd(body: bytes, max_size: int) -> bytes:
    try:
        import zstandard  # noqa: PLC0415 - optional: only 5.x producers' ZSTD bodies need it
    except ImportError:
        raise MessageDecodeError("a ZSTD-compressed body needs the 'zstandard' package: pip install "
                                 "'rmq[compress]'") from None
    try:
        d = zstandard.ZstdDecompressor().decompressobj()
        out = d.decompress(body)
        if len(out) > max_size:
            raise MessageDecodeError(f"ZSTD body inflates beyond {max_size} bytes")
        if not d.eof:
            raise MessageDecodeError("cannot inflate a ZSTD body: truncated frame")
        return out
    except zstandard.ZstdError as exc:
        raise MessageDecodeError(f"cannot inflate a ZSTD body: {exc}") from None


# --------------------------------------------------------------------------- MessageExt


class MessageExt:
    """A decoded stored message (what a consumer sees).

    Hosts are ``"ip:port"`` strings; ``store_host_raw`` keeps the stored bytes so
    the offset message id is exact (and only rendered when asked for). A decoded
    record's properties stay raw until first read: parsing them was a third of a
    push consumer's CPU per message (measured: a 900k backlog drained at ~205k msg/s
    parsing them, ~300k without), and a listener that reads none pays nothing.
    """

    __slots__ = (
        "topic",
        "body",
        "flag",
        "_props",
        "_props_raw",
        "sys_flag",
        "queue_id",
        "queue_offset",
        "commit_log_offset",
        "store_size",
        "body_crc",
        "born_timestamp",
        "born_host",
        "store_timestamp",
        "store_host",
        "reconsume_times",
        "prepared_transaction_offset",
        "store_host_raw",
    )

    def __init__(
        self,
        topic: str = "",
        body: bytes = b"",
        flag: int = 0,
        properties: dict[str, str] | None = None,
        sys_flag: int = 0,
        queue_id: int = 0,
        queue_offset: int = 0,
        commit_log_offset: int = 0,
        store_size: int = 0,
        body_crc: int = 0,
        born_timestamp: int = 0,
        born_host: str = "127.0.0.1:0",
        store_timestamp: int = 0,
        store_host: str = "127.0.0.1:0",
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        store_host_raw: bytes | None = None,
    ) -> None:
        self.topic = topic
        self.body = body
        self.flag = flag
        self._props = {} if properties is None else properties
        self._props_raw: bytes | None = None
        self.sys_flag = sys_flag
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.commit_log_offset = commit_log_offset
        self.store_size = store_size
        self.body_crc = body_crc
        self.born_timestamp = born_timestamp
        self.born_host = born_host
        self.store_timestamp = store_timestamp
        self.store_host = store_host
        self.reconsume_times = reconsume_times
        self.prepared_transaction_offset = prepared_transaction_offset
        self.store_host_raw = store_host_raw

    @property
    def properties(self) -> dict[str, str]:
        props = self._props
        if props is None:  # decoded on first use, once
            props = self._props = _decode_props(self._props_raw or b"")
            self._props_raw = None
        return props

    @properties.setter
    def properties(self, value: dict[str, str]) -> None:
        self._props = value
        self._props_raw = None

    @property
    def tags(self) -> str | None:
        return self.properties.get(Prop.TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(Prop.KEYS)

    @property
    def offset_msg_id(self) -> str:
        raw = self.store_host_raw
        if raw is None:
            raw = host_bytes(*_split_addr(self.store_host))
        return offset_msg_id(raw, self.commit_log_offset)

    @property
    def msg_id(self) -> str:
        """UNIQ_KEY when the producer set one, else the offset id (as Java and C++ clients)."""
        return self.properties.get(Prop.UNIQ_KEY) or self.offset_msg_id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageExt):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in _EXT_EQ_FIELDS)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"<MessageExt topic={self.topic!r} queue={self.queue_id} offset={self.queue_offset}"
            f" phy={self.commit_log_offset} tags={self.tags!r} body={len(self.body)}B>"
        )


_EXT_EQ_FIELDS = ("properties",) + tuple(
    s for s in MessageExt.__slots__ if s not in ("store_host_raw", "_props", "_props_raw")
)


# --------------------------------------------------------------------------- record codec


def decode_messages(buf: bytes | bytearray | memoryview, decompress: bool = True) -> list[MessageExt]:
    """All records laid back to back in ``buf`` (a pull/query/view body), in order; compiled (one C call
    per body, :data:`RECORDS`) where the extension was built, else :func:`decode_messages_pure`."""
    data = bytes(buf) if not isinstance(buf, bytes) else buf
    if _decode_records is not None:
        return _decode_records(data, decompress)  # type: ignore[no-any-return]
    return decode_messages_pure(data, decompress)


def decode_messages_pure(buf: bytes | bytearray | memoryview, decompress: bool = True) -> list[MessageExt]:
    """The reference decoder of :func:`decode_messages` (the compiled one hands it the records it does not
    take on itself, one at a time, through :func:`_decode_one`)."""
    data = bytes(buf) if not isinstance(buf, bytes) else buf
    out: list[MessageExt] = []
    pos = 0
    n = len(data)
    while pos < n:
        msg, pos = _decode_one(data, pos, n, decompress)
        out.append(msg)
    return out


def decode_message(buf: bytes | bytearray | memoryview, decompress: bool = True) -> MessageExt:
    """Exactly one record."""
    data = bytes(buf) if not isinstance(buf, bytes) else buf
    msg, end = _decode_one(data, 0, len(data), decompress)
    if end != len(data):
        raise MessageDecodeError(f"{len(data) - end} trailing bytes after the record")
    return msg


def _decode_one(data: bytes, start: int, n: int, decompress: bool) -> tuple[MessageExt, int]:
    if n - start < _IPV4_RECORD_OVERHEAD:
        raise MessageDecodeError(f"record at {start} truncated: {n - start} bytes left")
    total, _magic, crc, qid, flag, qoff, phy, sysflag, born_ts = _HEAD.unpack_from(data, start)
    end = start + total
    if total < _IPV4_RECORD_OVERHEAD or end > n:
        raise MessageDecodeError(f"record at {start} has TOTALSIZE {total} but {n - start} bytes remain")
    if not sysflag & _V6_BITS:  # the common case: both hosts IPv4, one unpack for the rest of the head
        born_raw, store_ts, store_raw, reconsume, prepared, body_len = _V4_MID.unpack_from(data, start + 48)
        p = start + 88
    else:
        p = start + 48
        bl = 20 if sysflag & SysFlag.BORNHOST_V6 else 8
        born_raw = data[p : p + bl]
        p += bl
        (store_ts,) = _Q.unpack_from(data, p)
        p += 8
        sl = 20 if sysflag & SysFlag.STOREHOST_V6 else 8
        store_raw = data[p : p + sl]
        p += sl
        if p + 16 > end:
            raise MessageDecodeError(f"record at {start} truncated before its body")
        reconsume, prepared, body_len = _TAIL.unpack_from(data, p)
        p += 16
    if body_len < 0 or p + body_len + 1 > end:
        raise MessageDecodeError(f"record at {start}: body length {body_len} overruns TOTALSIZE {total}")
    body = data[p : p + body_len]
    p += body_len
    topic_len = data[p]
    p += 1
    if p + topic_len + 2 > end:
        raise MessageDecodeError(f"record at {start}: topic length {topic_len} overruns TOTALSIZE {total}")
    try:
        topic = data[p : p + topic_len].decode()
    except UnicodeDecodeError as exc:
        raise MessageDecodeError(f"record at {start}: topic is not UTF-8: {exc}") from None
    p += topic_len
    (prop_len,) = _H.unpack_from(data, p)
    p += 2
    if p + prop_len != end:
        raise MessageDecodeError(
            f"record at {start}: properties length {prop_len} disagrees with TOTALSIZE {total}"
        )
    if decompress and sysflag & SysFlag.COMPRESSED:
        try:
            body = decompress_body(body, sys_flag=sysflag)
        except MessageDecodeError as exc:
            raise MessageDecodeError(f"record at {start}: {exc}") from None
    msg = MessageExt.__new__(MessageExt)
    msg.topic = topic
    msg.body = body
    msg.flag = flag
    if prop_len:
        msg._props = None
        msg._props_raw = data[p:end]
    else:
        msg._props = {}
        msg._props_raw = None
    msg.sys_flag = sysflag
    msg.queue_id = qid
    msg.queue_offset = qoff
    msg.commit_log_offset = phy
    msg.store_size = total
    msg.body_crc = crc
    msg.born_timestamp = born_ts
    msg.born_host = _host_str(born_raw)
    msg.store_timestamp = store_ts
    msg.store_host = _host_str(store_raw)
    msg.reconsume_times = reconsume
    msg.prepared_transaction_offset = prepared
    msg.store_host_raw = store_raw
    return msg, end


def compiled_records() -> Any:
    """The ``_fastframe`` module with ``decode_records`` bound to :class:`MessageExt` and this module's pure
    decoder of one record (and ``decode_props``, :func:`decode_properties` of bytes), or None when the
    extension was not built; loaded whatever ``RMQ_PURE`` says (``RMQ_FASTFRAME`` names another build).
    A MessageExt laid out otherwise than the C decoder expects means None too."""
    codec = load_extension("_fastframe", "RMQ_FASTFRAME")
    if codec is None or not hasattr(codec, "decode_records"):
        return None
    try:
        codec.configure_records(MessageExt, _decode_one, _host_str)
    except TypeError:
        return None
    return codec


_records_codec, RECORDS = select(compiled_records)
"""``RECORDS``: which record decoder serves, in words ("compiled" / "pure (...)")."""
_decode_records = None if _records_codec is None else _records_codec.decode_records
_decode_props = decode_properties if _records_codec is None else _records_codec.decode_props


def encode_message(
    topic: str,
    body: bytes,
    *,
    queue_id: int = 0,
    flag: int = 0,
    properties: Mapping[str, str] | str = "",
    sys_flag: int = 0,
    queue_offset: int = 0,
    commit_log_offset: int = 0,
    born_timestamp: int = 0,
    born_host: str | bytes | tuple[str, int] = "127.0.0.1:0",
    store_timestamp: int = 0,
    store_host: str | bytes | tuple[str, int] = "127.0.0.1:0",
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    crc: int | None = None,
) -> bytes:
    """One whole stored record; host v6 bits of ``sys_flag`` follow the host sizes given.

    ``body`` is written as given (compress it first and set ``SysFlag.COMPRESSED`` yourself).
    """
    born_b = _host_arg(born_host)
    store_b = _host_arg(store_host)
    sys_flag &= ~(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)
    if len(born_b) == 20:
        sys_flag |= SysFlag.BORNHOST_V6
    if len(store_b) == 20:
        sys_flag |= SysFlag.STOREHOST_V6
    topic_b = topic.encode()
    if len(topic_b) > 127:
        raise ValueError(f"topic of {len(topic_b)} bytes exceeds 127")
    props = properties if isinstance(properties, str) else encode_properties(properties)
    props_b = props.encode()
    if len(props_b) > 32767:
        raise ValueError(f"properties of {len(props_b)} bytes exceed 32767")
    total = 75 + len(born_b) + len(store_b) + len(body) + len(topic_b) + len(props_b)
    return b"".join(
        (
            _HEAD.pack(
                total,
                MAGIC_MESSAGE,
                body_crc(body) if crc is None else crc,
                queue_id,
                flag,
                queue_offset,
                commit_log_offset,
                sys_flag,
                born_timestamp,
            ),
            born_b,
            _Q.pack(store_timestamp),
            store_b,
            _TAIL.pack(reconsume_times, prepared_transaction_offset, len(body)),
            body,
            _B.pack(len(topic_b)),
            topic_b,
            _H.pack(len(props_b)),
            props_b,
        )
    )


# --------------------------------------------------------------------------- batch bodies


def encode_batch(items: Iterable[tuple[bytes, int, str]]) -> bytes:
    """Batch body of (body, flag, encoded properties) items; magic and crc are 0 as clients send."""
    parts: list[bytes] = []
    for body, flag, props in items:
        pb = props.encode()
        if len(pb) > 32767:
            raise BatchError(f"properties of {len(pb)} bytes exceed 32767")
        parts.append(_BATCH_HEAD.pack(20 + len(body) + 2 + len(pb), 0, 0, flag, len(body)))
        parts.append(body)
        parts.append(_H.pack(len(pb)))
        parts.append(pb)
    return b"".join(parts)


def decode_batch(body: bytes | bytearray | memoryview) -> list[tuple[bytes, int, str]]:
    """Inverse of :func:`encode_batch`; a truncated or inconsistent member raises BatchError."""
    data = bytes(body) if not isinstance(body, bytes) else body
    out: list[tuple[bytes, int, str]] = []
    pos = 0
    n = len(data)
    idx = 0
    while pos < n:
        if n - pos < 22:
            raise BatchError(f"batch member {idx} at byte {pos} truncated: {n - pos} bytes left")
        total, _magic, _crc, flag, blen = _BATCH_HEAD.unpack_from(data, pos)
        end = pos + total
        if total < 22 or end > n:
            raise BatchError(f"batch member {idx} at byte {pos} has size {total} but {n - pos} bytes remain")
        p = pos + 20
        if blen < 0 or p + blen + 2 > end:
            raise BatchError(f"batch member {idx} at byte {pos}: body length {blen} overruns size {total}")
        mbody = data[p : p + blen]
        p += blen
        (plen,) = _H.unpack_from(data, p)
        p += 2
        if p + plen != end:
            raise BatchError(f"batch member {idx} at byte {pos}: properties length {plen} mismatches size")
        try:
            props = data[p:end].decode()
        except UnicodeDecodeError as exc:
            raise BatchError(f"batch member {idx}: properties are not UTF-8: {exc}") from None
        out.append((mbody, flag, props))
        pos = end
        idx += 1
    return out
