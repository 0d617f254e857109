"""RemotingCommand and its frame codec (JSON and ROCKETMQ binary headers), sans-IO.

Hot path of every request: the JSON header is written by hand (about twice as
fast as ``json.dumps`` of a dict) and the decoder parses whole frames straight
out of the received chunk, buffering only an incomplete tail.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from json.encoder import encode_basestring_ascii as _quote
from typing import Any, Final

from rmq.protocol.codes import LanguageCode, ResponseCode, SerializeType

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FrameDecoder",
    "FrameError",
    "HeaderError",
    "RemotingClosedError",
    "RemotingCommand",
    "RemotingConnectError",
    "RemotingError",
    "RemotingTimeoutError",
    "decode",
    "encode",
    "encode_parts",
    "ext_bool",
    "ext_int",
    "ext_str",
    "normalize_ext",
]

DEFAULT_MAX_FRAME_SIZE: Final = 16 * 1024 * 1024  # Java's com.rocketmq.remoting.frameMaxLength
RESPONSE_FLAG: Final = 1
ONEWAY_FLAG: Final = 2
DEFAULT_VERSION: Final = 409  # MQVersion V4_9_8

_JSON = int(SerializeType.JSON)
_ROCKETMQ = int(SerializeType.ROCKETMQ)
_LANG_NAMES: tuple[str, ...] = tuple(m.name for m in LanguageCode)
_LANG_BYTES: dict[str, int] = {m.name: int(m) for m in LanguageCode}
_OTHER = int(LanguageCode.OTHER)

_I32 = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")  # frame length, header word
_BIN_FIXED = struct.Struct(">hbhiii")  # code, language, version, opaque, flag, remark length
_U16 = struct.Struct(">H")


class FrameError(ValueError):
    """The byte stream is not a valid RocketMQ frame; the connection cannot be trusted any more."""


class RemotingError(Exception):
    """A request could not be completed by the transport (no RocketMQ response exists)."""


class RemotingTimeoutError(RemotingError, TimeoutError):
    """No response arrived in time; the request may still have been processed."""


class RemotingConnectError(RemotingError, ConnectionError):
    """The peer could not be reached."""


class RemotingClosedError(RemotingError, ConnectionError):
    """The connection closed before the response arrived (or before the send)."""


class HeaderError(ValueError):
    """A custom-header field is missing or malformed.

    Carries the response ``code`` (SYSTEM_ERROR, as Java answers a failed header
    decode) so a server turns it into an error reply with ``str(exc)`` as remark.
    """

    def __init__(self, field: str, reason: str, code: int = ResponseCode.SYSTEM_ERROR) -> None:
        super().__init__(f"the custom header field {field!r} {reason}")
        self.field = field
        self.code = int(code)


class RemotingCommand:
    """One request or response.

    ``ext`` is the custom header (``extFields``), always a ``dict[str, str]`` after
    decode whatever JSON types the peer used. On encode a request with an empty
    ``ext`` omits ``extFields`` (as Java does) while a response always carries it,
    because C++ 1.2.3 dereferences it unchecked on several response codes.
    """

    __slots__ = ("code", "language", "version", "opaque", "flag", "remark", "ext", "body", "serialize_type")

    code: int
    language: str
    version: int
    opaque: int
    flag: int
    remark: str | None
    ext: dict[str, str]
    body: bytes
    serialize_type: int

    def __init__(
        self,
        code: int,
        *,
        language: str = "PYTHON",
        version: int = DEFAULT_VERSION,
        opaque: int = 0,
        flag: int = 0,
        remark: str | None = None,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        serialize_type: int = _JSON,
    ) -> None:
        self.code = int(code)
        self.language = language
        self.version = version
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext = {} if ext is None else ext
        self.body = body
        self.serialize_type = serialize_type

    @classmethod
    def request(
        cls,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        oneway: bool = False,
        opaque: int = 0,
        serialize_type: int = _JSON,
        language: str = "PYTHON",
    ) -> RemotingCommand:
        """A request; ``opaque`` is normally assigned by the connection that sends it.

        Server→client requests should pass ``language="JAVA"``: every client accepts it (§1.2).
        """
        return cls(
            code,
            language=language,
            opaque=opaque,
            flag=ONEWAY_FLAG if oneway else 0,
            ext=ext,
            body=body,
            serialize_type=serialize_type,
        )

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The reply to this request: same opaque and serialize type, language JAVA (§1.2)."""
        return RemotingCommand(
            code,
            language="JAVA",
            opaque=self.opaque,
            flag=RESPONSE_FLAG,
            remark=remark,
            ext=ext,
            body=body,
            serialize_type=self.serialize_type,
        )

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & ONEWAY_FLAG)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemotingCommand):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        kind = "response" if self.flag & RESPONSE_FLAG else ("oneway" if self.flag & ONEWAY_FLAG else "request")
        remark = f" remark={self.remark!r}" if self.remark else ""
        return (
            f"<RemotingCommand {kind} code={self.code} opaque={self.opaque} lang={self.language}"
            f" v={self.version}{remark} ext={self.ext!r} body={len(self.body)}B>"
        )


# --------------------------------------------------------------------------- ext helpers


def _ext_value(v: Any) -> str | None:
    if type(v) is str:
        return v
    if v is None:
        return None
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(int(v))
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def normalize_ext(ext: Mapping[str, Any] | None) -> dict[str, str]:
    """Every value to ``str`` (int → decimal, bool → true/false), ``None`` values dropped.

    Returns ``ext`` itself when it already is a ``dict`` of strings (the common case).
    """
    if not ext:
        return {}
    if type(ext) is dict:
        for k, v in ext.items():
            if type(v) is not str or type(k) is not str:
                break
        else:
            return ext
    out: dict[str, str] = {}
    for k, v in ext.items():
        s = _ext_value(v)
        if s is not None:
            out[str(k)] = s
    return out


_REQUIRED: Any = object()


def ext_str(cmd: RemotingCommand, key: str, default: Any = _REQUIRED) -> Any:
    """A string field; missing → ``default`` or HeaderError when required."""
    v = cmd.ext.get(key)
    if v is None:
        if default is _REQUIRED:
            raise HeaderError(key, "is missing")
        return default
    return v


def ext_int(cmd: RemotingCommand, key: str, default: Any = _REQUIRED) -> Any:
    """An int/long field parsed like Java's ``Long.parseLong``; missing or empty → ``default``."""
    v = cmd.ext.get(key)
    if v is None or v == "":
        if default is _REQUIRED:
            raise HeaderError(key, "is missing")
        return default
    try:
        return int(v)
    except ValueError:
        raise HeaderError(key, f"is not an integer: {v!r}") from None


_TRUE = frozenset(("true", "1"))


def ext_bool(cmd: RemotingCommand, key: str, default: Any = _REQUIRED) -> Any:
    """A boolean field: ``true``/``1`` (any case) is True, anything else False (C++ sends "0"/"1")."""
    v = cmd.ext.get(key)
    if v is None or v == "":
        if default is _REQUIRED:
            raise HeaderError(key, "is missing")
        return default
    return v.lower() in _TRUE


# --------------------------------------------------------------------------- encode


def _json_header(cmd: RemotingCommand) -> bytes:
    parts = ['{"code":', str(cmd.code)]
    ext = cmd.ext
    if ext or cmd.flag & RESPONSE_FLAG:
        ext = normalize_ext(ext)
        parts.append(',"extFields":{')
        parts.append(",".join([_quote(k) + ":" + _quote(v) for k, v in ext.items()]))
        parts.append("}")
    parts.append(',"flag":')
    parts.append(str(cmd.flag))
    parts.append(',"language":')
    parts.append(_quote(cmd.language))
    parts.append(',"opaque":')
    parts.append(str(cmd.opaque))
    if cmd.remark is not None:
        parts.append(',"remark":')
        parts.append(_quote(cmd.remark))
    parts.append(',"serializeTypeCurrentRPC":"JSON","version":')
    parts.append(str(cmd.version))
    parts.append("}")
    return "".join(parts).encode("ascii")


def _binary_header(cmd: RemotingCommand) -> bytes:
    remark = cmd.remark.encode() if cmd.remark else b""
    entries = []
    for k, v in normalize_ext(cmd.ext).items():
        kb = k.encode()
        vb = v.encode()
        entries.append(_U16.pack(len(kb)) + kb + _I32.pack(len(vb)) + vb)
    ext_bytes = b"".join(entries)
    lang = _LANG_BYTES.get(cmd.language, _OTHER)
    return b"".join(
        (
            _BIN_FIXED.pack(cmd.code, lang, cmd.version, cmd.opaque, cmd.flag, len(remark)),
            remark,
            _I32.pack(len(ext_bytes)),
            ext_bytes,
        )
    )


def encode_parts(cmd: RemotingCommand) -> tuple[bytes, bytes]:
    """(length word + header word + header, body): lets a writer join many frames with one copy."""
    st = cmd.serialize_type
    if st == _JSON:
        header = _json_header(cmd)
    elif st == _ROCKETMQ:
        header = _binary_header(cmd)
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


# --------------------------------------------------------------------------- decode


def _int_field(h: dict[str, Any], key: str, default: int | None) -> int:
    v = h.get(key)
    if v is None:
        if default is None:
            raise FrameError(f"JSON header lacks {key!r}")
        return default
    if type(v) is int:
        return v
    try:
        return int(v)
    except (TypeError, ValueError):
        raise FrameError(f"JSON header field {key!r} is not an integer: {v!r}") from None


_scan_json = json.JSONDecoder().scan_once  # the C scanner: skips json.loads' Python-level wrapping


def _parse_json(header: bytes | bytearray) -> Any:
    text = header.decode()
    if text[:1] == "{":
        try:
            obj, end = _scan_json(text, 0)
        except StopIteration:
            raise ValueError("no JSON value") from None
        if end == len(text) or not text[end:].strip():  # C++ 1.2.3 ends its header with "\n"
            return obj
    return json.loads(text)  # leading whitespace, trailing garbage: let json word the error


def _decode_json(header: bytes | bytearray, body: bytes) -> RemotingCommand:
    try:
        h = _parse_json(header)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FrameError(f"bad JSON header: {exc}") from None
    if type(h) is not dict:
        raise FrameError(f"JSON header is a {type(h).__name__}, not an object")
    ext = h.get("extFields")
    if ext is None:
        ext = {}
    elif type(ext) is not dict:
        raise FrameError(f"JSON header extFields is a {type(ext).__name__}, not an object")
    else:
        ext = normalize_ext(ext)
    remark = h.get("remark")
    if remark is not None and type(remark) is not str:
        remark = str(remark)
    lang = h.get("language", "OTHER")
    if type(lang) is not str:
        lang = _LANG_NAMES[lang] if type(lang) is int and 0 <= lang < len(_LANG_NAMES) else "OTHER"
    cmd = RemotingCommand.__new__(RemotingCommand)
    cmd.code = _int_field(h, "code", None)
    cmd.language = lang
    cmd.version = _int_field(h, "version", 0)
    cmd.opaque = _int_field(h, "opaque", 0)
    cmd.flag = _int_field(h, "flag", 0)
    cmd.remark = remark
    cmd.ext = ext
    cmd.body = body
    cmd.serialize_type = _JSON
    return cmd


def _decode_binary(header: bytes | bytearray, body: bytes) -> RemotingCommand:
    n = len(header)
    if n < 21:
        raise FrameError(f"binary header of {n} bytes is shorter than the 21-byte minimum")
    code, lang, version, opaque, flag, rlen = _BIN_FIXED.unpack_from(header, 0)
    pos = 17
    if rlen < 0 or pos + rlen + 4 > n:
        raise FrameError(f"binary header remark length {rlen} overruns the {n}-byte header")
    try:
        remark = bytes(header[pos : pos + rlen]).decode() if rlen else None
        pos += rlen
        (elen,) = _I32.unpack_from(header, pos)
        pos += 4
        if elen < 0 or pos + elen != n:
            raise FrameError(f"binary header ext length {elen} does not match the {n}-byte header")
        ext: dict[str, str] = {}
        while pos < n:
            if pos + 2 > n:
                raise FrameError("binary header ext entry truncated in key length")
            (kl,) = _U16.unpack_from(header, pos)
            pos += 2
            key = bytes(header[pos : pos + kl]).decode() if kl else None
            pos += kl
            if pos + 4 > n:
                raise FrameError("binary header ext entry truncated in value length")
            (vl,) = _I32.unpack_from(header, pos)
            pos += 4
            if vl < 0 or pos + vl > n:
                raise FrameError(f"binary header ext value length {vl} overruns the header")
            val = bytes(header[pos : pos + vl]).decode() if vl else None
            pos += vl
            if key is not None and val is not None:
                ext[key] = val
    except UnicodeDecodeError as exc:
        raise FrameError(f"binary header holds invalid UTF-8: {exc}") from None
    cmd = RemotingCommand.__new__(RemotingCommand)
    cmd.code = code
    cmd.language = _LANG_NAMES[lang] if 0 <= lang < len(_LANG_NAMES) else "OTHER"
    cmd.version = version
    cmd.opaque = opaque
    cmd.flag = flag
    cmd.remark = remark
    cmd.ext = ext
    cmd.body = body
    cmd.serialize_type = _ROCKETMQ
    return cmd


def _decode_payload(buf: bytes | bytearray, start: int, end: int) -> RemotingCommand:
    """Decode ``buf[start:end]`` = header word + header + body (the length word already consumed)."""
    (word,) = _I32.unpack_from(buf, start)
    st = (word >> 24) & 0xFF
    hl = word & 0xFFFFFF
    hs = start + 4
    he = hs + hl
    if he > end:
        raise FrameError(f"header length {hl} exceeds the {end - start}-byte frame")
    if he == end:
        body = b""
    elif type(buf) is bytes:
        body = buf[he:end]
    else:  # one copy, not two (bytearray slice then bytes())
        body = memoryview(buf)[he:end].tobytes()
    if st == _JSON:
        return _decode_json(buf[hs:he], body)
    if st == _ROCKETMQ:
        return _decode_binary(buf[hs:he], body)
    raise FrameError(f"unknown serialize type {st} in header word 0x{word & 0xFFFFFFFF:08x}")


def decode(frame: bytes | bytearray) -> RemotingCommand:
    """Decode exactly one whole frame (including its 4-byte length), no size limit."""
    n = len(frame)
    if n < 8:
        raise FrameError(f"expected exactly one frame, got {n} bytes")
    (length,) = _I32.unpack_from(frame, 0)
    if length + 4 != n:
        raise FrameError(f"expected exactly one frame: its length word says {length + 4} bytes, got {n}")
    return _decode_payload(frame, 4, n)


class FrameDecoder:
    """Incremental frame splitter + decoder for one connection.

    Whole frames are parsed directly from the chunk just received; only an
    incomplete tail is copied into the buffer, so the common case costs one copy
    (the body slice). An oversized frame is rejected from its length word alone.
    After a ``FrameError`` the decoder (and the connection) must be discarded.
    """

    __slots__ = ("max_frame_size", "_buf")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes held of a frame not yet complete."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        buf = self._buf
        if buf:
            buf += data
            src: bytes | bytearray = buf
        else:
            src = data if isinstance(data, (bytes, bytearray)) else bytes(data)
        out: list[RemotingCommand] = []
        n = len(src)
        pos = 0
        limit = self.max_frame_size
        while n - pos >= 4:
            (length,) = _I32.unpack_from(src, pos)
            if length < 4:
                raise FrameError(f"frame length {length} is below the 4-byte minimum")
            if length + 4 > limit:
                raise FrameError(f"frame of {length + 4} bytes exceeds the {limit}-byte limit")
            end = pos + 4 + length
            if end > n:
                break
            out.append(_decode_payload(src, pos + 4, end))
            pos = end
        if src is buf:
            if pos:
                del buf[:pos]
        elif pos < n:
            buf += src[pos:]
        return out
