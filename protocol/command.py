"""RemotingCommand and its frame codec (JSON and ROCKETMQ binary headers), sans-IO.

Hot path of every request: the JSON header is written by hand (about twice as
fast as ``json.dumps`` of a dict) and the decoder parses whole frames straight
out of the received chunk, buffering only an incomplete tail.

This is the decode boundary of every port (DESIGN rule 9): whatever bytes a peer
sends, decoding yields a command or raises :class:`FrameError` (a ``ValueError``),
and custom-header fields are read through the range-checked accessors
(:func:`ext_int`, :func:`ext_i32`, …) that raise :class:`HeaderError`.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from json.encoder import encode_basestring_ascii as _quote
from typing import Any, Final

from rmq.protocol.codes import LanguageCode, ResponseCode, SerializeType
from rmq.protocol.jsonbody import JsonError, scan_object
from rmq.protocol.names import printable

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "JAVA_INT_MAX",
    "JAVA_INT_MIN",
    "JAVA_LONG_MAX",
    "JAVA_LONG_MIN",
    "JAVA_TYPES",
    "CommandDecodeError",
    "FrameDecoder",
    "FrameError",
    "HeaderError",
    "RemotingClosedError",
    "RemotingCommand",
    "RemotingConnectError",
    "RemotingDecodeError",
    "RemotingError",
    "RemotingTimeoutError",
    "decode",
    "encode",
    "UndecodableCommand",
    "encode_parts",
    "ext_bool",
    "ext_i32",
    "ext_int",
    "ext_str",
    "normalize_ext",
    "parse_java_int",
    "parse_json_header",
]

DEFAULT_MAX_FRAME_SIZE: Final = 16 * 1024 * 1024  # Java's com.rocketmq.remoting.frameMaxLength
RESPONSE_FLAG: Final = 1
ONEWAY_FLAG: Final = 2
DEFAULT_VERSION: Final = 409  # MQVersion V4_9_8
JAVA_INT_MIN: Final = -(1 << 31)
JAVA_INT_MAX: Final = (1 << 31) - 1
JAVA_LONG_MIN: Final = -(1 << 63)
JAVA_LONG_MAX: Final = (1 << 63) - 1

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
    """The byte stream is not a valid RocketMQ frame; the connection cannot be trusted any more.

    ``kind`` names the class of failure in a word (``length``, ``too-large``, ``json``, …):
    the transport rate-limits its log lines per kind.
    """

    def __init__(self, message: str, *, kind: str = "frame") -> None:
        super().__init__(message)
        self.kind = kind


class RemotingError(Exception):
    """A request could not be completed by the transport (no RocketMQ response exists)."""


class RemotingTimeoutError(RemotingError, TimeoutError):
    """No response arrived in time; the request may still have been processed."""


class RemotingConnectError(RemotingError, ConnectionError):
    """The peer could not be reached."""


class RemotingClosedError(RemotingError, ConnectionError):
    """The connection closed before the response arrived (or before the send)."""


class RemotingDecodeError(RemotingError):
    """The response arrived but its header could not be decoded (the connection stays usable)."""


class HeaderError(ValueError):
    """A custom-header field is missing, malformed or out of its Java type's range.

    Carries the response ``code`` (SYSTEM_ERROR, as Java answers a failed header
    decode) so a server turns it into an error reply with ``str(exc)`` as remark
    (``kernel.make_handler`` and the tcp transport both do).
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
        return type(self) is type(other) and all(
            getattr(self, s) == getattr(other, s) for s in RemotingCommand.__slots__
        )

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
    For our own outgoing headers; a peer's ``extFields`` go through the strict decoder.
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

#: Java integral types by width, with their range, for the range-checked accessors.
JAVA_TYPES: Final[Mapping[int, tuple[str, int, int]]] = {
    8: ("byte", -(1 << 7), (1 << 7) - 1),
    16: ("short", -(1 << 15), (1 << 15) - 1),
    32: ("int", JAVA_INT_MIN, JAVA_INT_MAX),
    64: ("long", JAVA_LONG_MIN, JAVA_LONG_MAX),
}
# Fewer digits than the type's maximum always fit: such values skip the range check.
_SAFE_DIGITS: Final = {bits: len(str(hi)) for bits, (_n, _lo, hi) in JAVA_TYPES.items()}


def ext_str(cmd: RemotingCommand, key: str, default: Any = _REQUIRED) -> Any:
    """A string field; missing → ``default`` or HeaderError when required."""
    v = cmd.ext.get(key)
    if v is None:
        if default is _REQUIRED:
            raise HeaderError(key, "is missing")
        return default
    return v


def ext_int(cmd: RemotingCommand, key: str, default: Any = _REQUIRED, *, bits: int = 64) -> Any:
    """A numeric field, parsed and range-checked as the Java server would: missing or empty → ``default``.

    ``bits`` is the width of the field's Java type in the request header class: 64 for ``long``
    (offsets, timestamps), 32 for ``int`` (queueId, sysFlag, flag, maxMsgNums, perm …; use
    :func:`ext_i32`), 16/8 for ``short``/``byte``. Accepts what ``Long.parseLong`` accepts
    (optional sign, ASCII digits); anything else, or a value outside the type's range, raises
    :class:`HeaderError` (SYSTEM_ERROR, naming the field and its Java type) — call it before any
    side effect, so a refused request changes nothing.
    """
    v = cmd.ext.get(key)
    if v is None or v == "":
        if default is _REQUIRED:
            raise HeaderError(key, "is missing")
        return default
    if len(v) < _SAFE_DIGITS[bits] and v.isdigit() and v.isascii():
        return int(v)
    return parse_java_int(key, v, bits)


def ext_i32(cmd: RemotingCommand, key: str, default: Any = _REQUIRED) -> Any:
    """:func:`ext_int` for a Java ``int`` field (queueId, sysFlag, flag, maxMsgNums, perm, …)."""
    v = cmd.ext.get(key)
    if v is None or v == "":
        if default is _REQUIRED:
            raise HeaderError(key, "is missing")
        return default
    if len(v) < 10 and v.isdigit() and v.isascii():
        return int(v)
    return parse_java_int(key, v, 32)


def parse_java_int(field: str, text: str, bits: int = 64) -> int:
    """``text`` as a Java integral type of ``bits`` bits, or HeaderError naming ``field`` and the type."""
    jtype, lo, hi = JAVA_TYPES[bits]
    digits = text[1:] if text[:1] in ("-", "+") else text
    if not (digits.isdigit() and digits.isascii()):
        raise HeaderError(field, f"is not an integer (Java {jtype}): {printable(text, 40)!r}")
    if len(digits.lstrip("0")) > 20:  # far out of any range: do not even convert it
        raise HeaderError(field, f"is out of range for a Java {jtype}: {printable(text, 40)}")
    n = int(text)
    if not lo <= n <= hi:
        raise HeaderError(field, f"is out of range for a Java {jtype}: {n}")
    return n


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
#
# Every input a peer can send ends in a RemotingCommand, an UndecodableCommand (the frame was
# whole and told us its opaque and flag, so the connection can answer it and go on) or a
# FrameError (the connection must close). Nothing else escapes: no OverflowError from
# ``1E99511627776``, no RecursionError from deep nesting, no UnicodeDecodeError.


class CommandDecodeError(FrameError):
    """A whole frame whose header could not be decoded.

    The frame boundaries are intact, so when ``opaque`` and ``flag`` were readable the
    connection answers this request with SYSTEM_ERROR (a response: its waiter fails) and
    keeps serving; otherwise it closes, as for any FrameError.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        serialize_type: int,
        opaque: int | None = None,
        flag: int | None = None,
        code: int | None = None,
    ) -> None:
        super().__init__(message, kind=kind)
        self.serialize_type = serialize_type
        self.opaque = opaque
        self.flag = flag
        self.code = code


class UndecodableCommand(RemotingCommand):
    """Stands in a decoder's output for a frame whose header failed after ``opaque`` and ``flag``
    were read (only with ``FrameDecoder(recover=True)``). ``remark`` holds the reason and
    ``error`` the exception; it must never reach a request handler."""

    __slots__ = ("error",)

    error: CommandDecodeError

    @classmethod
    def from_error(cls, exc: CommandDecodeError) -> UndecodableCommand:
        cmd = cls(
            exc.code if exc.code is not None else 0,
            language="OTHER",
            version=0,
            opaque=exc.opaque or 0,
            flag=exc.flag or 0,
            remark=str(exc),
            serialize_type=exc.serialize_type,
        )
        cmd.error = exc
        return cmd


def _refuse_constant(name: str) -> Any:
    raise JsonError(f"{name} is not JSON")


# The C scanner with its native int/float parsing; only NaN/Infinity call back (and are refused).
_fast_scan = json.JSONDecoder(parse_constant=_refuse_constant).scan_once
_FAST_MAX_CHARS: Final = 8192  # bounds what an unchecked number literal can cost the fast path
_HEADER_KEYS: Final = frozenset(
    ("code", "extFields", "flag", "language", "opaque", "remark", "serializeTypeCurrentRPC", "version")
)


class _NotPlain(Exception):
    """The fast path met something outside the plain shape: the strict parser decides."""


def parse_json_header(text: str) -> dict[str, Any]:
    """The JSON header object under :mod:`rmq.protocol.jsonbody`'s strict rules; raises JsonError."""
    return scan_object(text.lstrip(" \t\r\n"))


def _json_int(h: dict[str, Any], key: str, default: int | None, fast: bool) -> int:
    """A top-level header number (code, opaque, flag, version: Java ``int``); the uncommon cases."""
    v = h.get(key)
    if v is None:
        if default is None:
            raise ValueError(f"JSON header lacks {key!r}")
        return default
    n: int | None = None
    t = type(v)
    if t is int:
        if not JAVA_LONG_MIN <= v <= JAVA_LONG_MAX:
            raise _NotPlain  # only the fast path can see one: the strict parser refuses it
        n = v
    elif t is str:
        digits = v[1:] if v[:1] in ("-", "+") else v
        if digits.isdigit() and digits.isascii() and len(digits) <= 12:
            n = int(v)
    elif fast and t is not bool:
        raise _NotPlain  # a float or a container: let the strict parser check its literals first
    elif t is float and v.is_integer():
        n = int(v)
    if n is None:
        raise ValueError(f"JSON header field {key!r} is not an integer: {printable(repr(v), 60)}")
    if not JAVA_INT_MIN <= n <= JAVA_INT_MAX:
        raise ValueError(f"JSON header field {key!r} = {n} does not fit a Java int")
    return n


def _json_ext(ext: Any, fast: bool, escapes: bool) -> dict[str, str]:
    """``extFields`` as ``dict[str, str]``: numbers to decimal, booleans to true/false, nulls dropped.

    ``escapes``: the header text holds a backslash, so a ``\\udXXX`` escape may have left a lone
    surrogate in a key or value (without one, UTF-8 decoding guarantees there is none).
    """
    if ext is None:
        return {}
    if type(ext) is not dict:
        if fast and not _plain_value(ext):
            raise _NotPlain
        raise ValueError(f"JSON header extFields is a {type(ext).__name__}, not an object")
    try:  # the common case in a few C calls: all values strings (and, with escapes, keys and values ASCII)
        joined = _join(ext.values())
        if not escapes or (joined.isascii() and _join(ext).isascii()):
            return ext
    except TypeError:  # a value is not a string (C++ and client A send numbers)
        pass
    out: dict[str, str] = {}
    for k, v in ext.items():
        if not k.isascii():
            _check_encodable(k)
        t = type(v)
        if t is str:
            if not v.isascii():
                _check_encodable(v)
            out[k] = v
        elif v is None:
            continue
        elif t is bool:
            out[k] = "true" if v else "false"
        elif t is int:
            if not JAVA_LONG_MIN <= v <= JAVA_LONG_MAX:
                raise _NotPlain  # only the fast path can see one: the strict parser refuses it
            out[k] = str(v)
        elif fast:
            raise _NotPlain
        elif t is float:
            out[k] = str(int(v)) if v.is_integer() else repr(v)  # finite: the strict parser checked it
        else:
            out[k] = json.dumps(v, separators=(",", ":"))
    return out


_join = "".join


def _check_encodable(text: str) -> None:
    """A ``\\udXXX`` escape may leave half a surrogate pair, a str that cannot be encoded again:
    refused at the boundary so that no processor, store or log line ever meets one."""
    try:
        text.encode()
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone UTF-16 surrogate") from None


def _plain_value(v: Any) -> bool:
    t = type(v)
    return v is None or t is str or t is bool or (t is int and JAVA_LONG_MIN <= v <= JAVA_LONG_MAX)


def _command_from_json(h: dict[str, Any], body: bytes, fast: bool, escapes: bool) -> RemotingCommand:
    """Fields of a decoded header object. ``fast``: ``h`` came from the unchecked scanner, and
    anything a strict parse might refuse (floats, containers, huge ints) raises ``_NotPlain``."""
    opaque = h.get("opaque")
    flag = h.get("flag")
    try:  # opaque and flag first: once known, a bad field gets an answer instead of a closed connection
        if type(opaque) is not int or not JAVA_INT_MIN <= opaque <= JAVA_INT_MAX:
            opaque = _json_int(h, "opaque", 0, fast)
        if type(flag) is not int or not JAVA_INT_MIN <= flag <= JAVA_INT_MAX:
            flag = _json_int(h, "flag", 0, fast)
    except ValueError as exc:
        raise CommandDecodeError(f"bad JSON header: {exc}", kind="json", serialize_type=_JSON) from None
    code = h.get("code")
    version = h.get("version")
    remark = h.get("remark")
    lang = h.get("language", "OTHER")
    if fast:
        st = h.get("serializeTypeCurrentRPC")
        if not (
            (remark is None or type(remark) is str)
            and (type(lang) is str or _plain_value(lang))
            and (type(st) is str or _plain_value(st))
        ):
            raise _NotPlain
    try:
        if type(code) is not int or not JAVA_INT_MIN <= code <= JAVA_INT_MAX:
            code = _json_int(h, "code", None, fast)
        if type(version) is not int or not JAVA_INT_MIN <= version <= JAVA_INT_MAX:
            version = _json_int(h, "version", 0, fast)
        ext = _json_ext(h.get("extFields"), fast, escapes)
        if escapes and type(remark) is str and not remark.isascii():
            _check_encodable(remark)
    except ValueError as exc:
        raise CommandDecodeError(
            f"bad JSON header: {exc}", kind="header", serialize_type=_JSON, opaque=opaque, flag=flag
        ) from None
    if remark is not None and type(remark) is not str:
        remark = json.dumps(remark)
    if type(lang) is not str or lang not in _LANG_BYTES:
        lang = _LANG_NAMES[lang] if type(lang) is int and 0 <= lang < len(_LANG_NAMES) else "OTHER"
    cmd = RemotingCommand.__new__(RemotingCommand)
    cmd.code = code
    cmd.language = lang
    cmd.version = version
    cmd.opaque = opaque
    cmd.flag = flag
    cmd.remark = remark
    cmd.ext = ext
    cmd.body = body
    cmd.serialize_type = _JSON
    return cmd


def _decode_json(header: bytes | bytearray, body: bytes) -> RemotingCommand:
    """Headers as real clients send them (under 8 KiB, known keys, plain values) take the C
    scanner's native path and are checked field by field; anything else, and every error, is
    parsed again by the strict parser. Either way the outcome is the strict one (property-tested:
    a header accepted by the fast path holds only plain values, which the strict parser accepts
    identically)."""
    try:
        text = header.decode()
    except UnicodeDecodeError as exc:
        raise CommandDecodeError(f"bad JSON header: not UTF-8: {exc}", kind="json", serialize_type=_JSON) from None
    if len(text) <= _FAST_MAX_CHARS and text[:1] == "{":
        try:
            h, end = _fast_scan(text, 0)
        except Exception:  # noqa: BLE001 - NaN, RecursionError, syntax: the strict parser words it
            h = None
        if type(h) is dict and (end == len(text) or not text[end:].strip()) and _HEADER_KEYS.issuperset(h):
            try:
                return _command_from_json(h, body, True, "\\" in text)
            except (_NotPlain, CommandDecodeError):  # errors take the strict path: it decides the outcome
                pass
    try:
        h = parse_json_header(text)
    except JsonError as exc:
        raise CommandDecodeError(f"bad JSON header: {exc}", kind="json", serialize_type=_JSON) from None
    return _command_from_json(h, body, False, "\\" in text)


_OPAQUE_FLAG = struct.Struct(">ii")


def _decode_binary(header: bytes | bytearray, body: bytes) -> RemotingCommand:
    n = len(header)
    if n < 21:
        opaque = flag = None
        if n >= 13:
            opaque, flag = _OPAQUE_FLAG.unpack_from(header, 5)
        raise CommandDecodeError(
            f"binary header of {n} bytes is shorter than the 21-byte minimum",
            kind="binary", serialize_type=_ROCKETMQ, opaque=opaque, flag=flag,
        )
    code, lang, version, opaque, flag, rlen = _BIN_FIXED.unpack_from(header, 0)

    def bad(reason: str) -> CommandDecodeError:
        return CommandDecodeError(
            f"binary header {reason}", kind="binary", serialize_type=_ROCKETMQ, opaque=opaque, flag=flag, code=code
        )

    pos = 17
    if rlen < 0 or pos + rlen + 4 > n:
        raise bad(f"remark length {rlen} overruns the {n}-byte header")
    try:
        remark = bytes(header[pos : pos + rlen]).decode() if rlen else None
        pos += rlen
        (elen,) = _I32.unpack_from(header, pos)
        pos += 4
        if elen < 0 or pos + elen != n:
            raise bad(f"ext length {elen} does not match the {n}-byte header")
        ext: dict[str, str] = {}
        while pos < n:
            if pos + 2 > n:
                raise bad("ext entry truncated in key length")
            (kl,) = _U16.unpack_from(header, pos)
            pos += 2
            if pos + kl + 4 > n:
                raise bad(f"ext key length {kl} overruns the header")
            key = bytes(header[pos : pos + kl]).decode() if kl else None
            pos += kl
            (vl,) = _I32.unpack_from(header, pos)
            pos += 4
            if vl < 0 or pos + vl > n:
                raise bad(f"ext value length {vl} overruns the header")
            val = bytes(header[pos : pos + vl]).decode() if vl else None
            pos += vl
            if key is not None and val is not None:
                ext[key] = val
    except UnicodeDecodeError as exc:
        raise bad(f"holds invalid UTF-8: {exc}") from None
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
        raise FrameError(f"header length {hl} exceeds the {end - start}-byte frame", kind="header-length")
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

    __slots__ = ("max_frame_size", "recover", "_buf")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, *, recover: bool = False) -> None:
        self.max_frame_size = max_frame_size
        self.recover = recover
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
