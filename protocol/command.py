"""RemotingCommand: one request or response, its errors and its range-checked header accessors.

The codecs live beside it, sans-IO: :mod:`rmq.protocol.headercodec` (JSON and ROCKETMQ
binary headers) and :mod:`rmq.protocol.frame` (length-prefixed frames, ``FrameDecoder``).

This is the decode boundary of every port (DESIGN rule 9): whatever bytes a peer
sends, decoding yields a command or raises :class:`FrameError` (a ``ValueError``),
and custom-header fields are read through the range-checked accessors
(:func:`ext_int`, :func:`ext_i32`, …) that raise :class:`HeaderError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from rmq.protocol.codes import ResponseCode, SerializeType
from rmq.protocol.names import printable

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_VERSION",
    "JAVA_INT_MAX",
    "JAVA_INT_MIN",
    "JAVA_LONG_MAX",
    "JAVA_LONG_MIN",
    "JAVA_TYPES",
    "ONEWAY_FLAG",
    "RESPONSE_FLAG",
    "CommandDecodeError",
    "FrameError",
    "HeaderError",
    "RemotingClosedError",
    "RemotingCommand",
    "RemotingConnectError",
    "RemotingDecodeError",
    "RemotingError",
    "RemotingTimeoutError",
    "UndecodableCommand",
    "ext_bool",
    "ext_i32",
    "ext_int",
    "ext_str",
    "normalize_ext",
    "parse_java_int",
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


_new = object.__new__


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
        """The reply to this request: same opaque and serialize type, language JAVA (§1.2).

        Built slot by slot (one per request on the hot path: about half the cost of ``__init__``'s
        keyword call)."""
        r = _new(RemotingCommand)
        r.code = code if type(code) is int else int(code)
        r.language = "JAVA"
        r.version = DEFAULT_VERSION
        r.opaque = self.opaque
        r.flag = RESPONSE_FLAG
        r.remark = remark
        r.ext = {} if ext is None else ext
        r.body = body
        r.serialize_type = self.serialize_type
        return r

    def held_until(self, mark: Any, at: int, timeout: float, late_code: int) -> HeldAnswer:
        """This response as a ``HeldAnswer`` (see there)."""
        h = _new(HeldAnswer)  # slot by slot, as ``response``: a loop of getattr/setattr costs 4x
        h.code = self.code
        h.language = self.language
        h.version = self.version
        h.opaque = self.opaque
        h.flag = self.flag
        h.remark = self.remark
        h.ext = self.ext
        h.body = self.body
        h.serialize_type = self.serialize_type
        h.mark = mark
        h.at = at
        h.timeout = timeout
        h.late_code = late_code
        return h

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


def _absent(key: str, default: Any) -> Any:
    """A header field the request left out (or empty): ``default``, or HeaderError when it is required."""
    if default is _REQUIRED:
        raise HeaderError(key, "is missing")
    return default


def ext_str(cmd: RemotingCommand, key: str, default: Any = _REQUIRED) -> Any:
    """A string field; missing → ``default`` or HeaderError when required."""
    v = cmd.ext.get(key)
    if v is None:
        return _absent(key, default)
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
        return _absent(key, default)
    if len(v) < _SAFE_DIGITS[bits] and v.isdigit() and v.isascii():
        return int(v)
    return parse_java_int(key, v, bits)


def ext_i32(cmd: RemotingCommand, key: str, default: Any = _REQUIRED) -> Any:
    """:func:`ext_int` for a Java ``int`` field (queueId, sysFlag, flag, maxMsgNums, perm, …)."""
    v = cmd.ext.get(key)
    if v is None or v == "":
        return _absent(key, default)
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
        return _absent(key, default)
    return v.lower() in _TRUE


# --------------------------------------------------------------------------- decode outcomes
#
# Every input a peer can send ends in a RemotingCommand, an UndecodableCommand (the frame was
# whole and told us its opaque and flag, so the connection can answer it and go on) or a
# FrameError (the connection must close). Nothing else escapes: no OverflowError from
# ``1E99511627776``, no RecursionError from deep nesting, no UnicodeDecodeError.



class HeldAnswer(RemotingCommand):
    """A response that may leave only once ``mark`` (a ``Watermark``) reaches ``at``; when ``timeout``
    seconds pass first it leaves with ``late_code`` instead (a SYNC_FLUSH send: FLUSH_DISK_TIMEOUT,
    the message stored all the same). A connection that can hold one without parking a task
    declares ``holds_answers = True``; handlers return one only to such a connection."""

    __slots__ = ("mark", "at", "timeout", "late_code")

    mark: Any
    at: int
    timeout: float
    late_code: int


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
