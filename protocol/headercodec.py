"""Header codecs of a RemotingCommand, sans-IO: JSON (``serializeTypeCurrentRPC`` JSON) and ROCKETMQ binary.

Hot path of every request: the JSON header is written by hand (about twice as fast
as ``json.dumps`` of a dict) and read by the C scanner with a strict fallback (see
:func:`decode_json_header`). Every failure is a :class:`~rmq.protocol.command.CommandDecodeError`
carrying the opaque and flag when they were readable, so the transport can answer it.
"""

from __future__ import annotations

import json
import struct
from json.encoder import encode_basestring_ascii as _quote
from typing import Any, Final

from rmq.protocol.codes import LanguageCode, SerializeType
from rmq.protocol.command import (
    JAVA_INT_MAX,
    JAVA_INT_MIN,
    JAVA_LONG_MAX,
    JAVA_LONG_MIN,
    RESPONSE_FLAG,
    CommandDecodeError,
    RemotingCommand,
    normalize_ext,
)
from rmq.protocol.jsonbody import JsonError, scan_object

try:  # optional (the "fast" extra): parses a header in about half the time of the C scanner below
    from orjson import dumps as _orjson_dumps
    from orjson import loads as _orjson_loads
except ImportError:  # pragma: no cover - exercised where orjson is absent
    _orjson_dumps = _orjson_loads = None
from rmq.protocol.names import printable

__all__ = [
    "decode_binary_header",
    "decode_json_header",
    "encode_binary_header",
    "encode_json_header",
    "parse_json_header",
]

_JSON = int(SerializeType.JSON)
_ROCKETMQ = int(SerializeType.ROCKETMQ)
_LANG_NAMES: tuple[str, ...] = tuple(m.name for m in LanguageCode)
_LANG_BYTES: dict[str, int] = {m.name: int(m) for m in LanguageCode}
_OTHER = int(LanguageCode.OTHER)

_I32 = struct.Struct(">i")
_BIN_FIXED = struct.Struct(">hbhiii")  # code, language, version, opaque, flag, remark length
_U16 = struct.Struct(">H")


# --------------------------------------------------------------------------- encode


def encode_json_header(cmd: RemotingCommand) -> bytes:
    """The header as fastjson writes it (keys sorted, ASCII with ``\\uXXXX`` escapes). With orjson,
    ``extFields`` is serialised in C and the rest formatted once; whenever orjson's bytes could differ
    from the escaping path's (non-ASCII, DEL, a field not an exact int), that path writes it instead."""
    if _orjson_dumps is not None:
        code = cmd.code
        flag = cmd.flag
        opaque = cmd.opaque
        version = cmd.version
        if type(code) is int and type(flag) is int and type(opaque) is int and type(version) is int:
            lang = _LANG_JSON.get(cmd.language) or _quote(cmd.language).encode()
            ext = cmd.ext
            remark = cmd.remark
            if ext or flag & RESPONSE_FLAG:
                try:
                    ext_json = _orjson_dumps(normalize_ext(ext))
                except TypeError:  # a lone surrogate: the escaping path writes it as \\udXXX
                    ext_json = b"\x80"
                if ext_json.isascii() and b"\x7f" not in ext_json:
                    if remark is None:
                        return _HEAD_EXT % (code, ext_json, flag, lang, opaque, version)
                    return _HEAD_EXT_REMARK % (code, ext_json, flag, lang, opaque, _quote(remark).encode(), version)
            elif remark is None:
                return _HEAD % (code, flag, lang, opaque, version)
    return _encode_json_header(cmd)


_HEAD_EXT: Final = b'{"code":%d,"extFields":%b,"flag":%d,"language":%b,"opaque":%d,"serializeTypeCurrentRPC":"JSON","version":%d}'
_HEAD_EXT_REMARK: Final = (
    b'{"code":%d,"extFields":%b,"flag":%d,"language":%b,"opaque":%d,"remark":%b,"serializeTypeCurrentRPC":"JSON",'
    b'"version":%d}'
)
_HEAD: Final = b'{"code":%d,"flag":%d,"language":%b,"opaque":%d,"serializeTypeCurrentRPC":"JSON","version":%d}'
_LANG_JSON: Final = {name: _quote(name).encode() for name in _LANG_NAMES}


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    """The escaping path: every string through the json module's ASCII quoting."""
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


def encode_binary_header(cmd: RemotingCommand) -> bytes:
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


# --------------------------------------------------------------------------- decode


def _refuse_constant(name: str) -> Any:
    raise JsonError(f"{name} is not JSON")


# The C scanner with its native int/float parsing; only NaN/Infinity call back (and are refused).
_fast_scan = json.JSONDecoder(parse_constant=_refuse_constant).scan_once
_FAST_MAX_CHARS: Final = 8192  # bounds what an unchecked number literal can cost the fast path
_NO_EXT: Final[dict[str, str]] = {}  # a sentinel: never handed out (a missing extFields becomes a new dict)
_INT_MIN: Final = JAVA_INT_MIN
_INT_MAX: Final = JAVA_INT_MAX
_new_command = object.__new__
_STR_ONLY: Final = frozenset((str,))
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
    return _ext_to_strings(ext, fast)


def _ext_to_strings(ext: dict[Any, Any], fast: bool) -> dict[str, str]:
    """:func:`_json_ext`'s loop: every value to its string, refusing what Java would."""
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


def _ext_numbers_in_place(ext: dict[str, Any]) -> dict[str, str]:
    """orjson's ``extFields`` holding numbers and booleans (as C++ writes them): only those values
    become Java's strings, in place (``_ext_to_strings`` rebuilds and re-checks every entry; orjson
    already refused lone surrogates, so its strings need no check). None entries are dropped."""
    drop: list[str] | None = None
    for k, v in ext.items():
        t = type(v)
        if t is str:
            continue
        if t is int:
            if not JAVA_LONG_MIN <= v <= JAVA_LONG_MAX:
                raise _NotPlain
            ext[k] = str(v)
        elif t is bool:
            ext[k] = "true" if v else "false"
        elif v is None:
            drop = [k] if drop is None else [*drop, k]
        else:
            raise _NotPlain
    if drop:
        for k in drop:
            del ext[k]
    return ext


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


def decode_json_header(header: bytes | bytearray, body: bytes) -> RemotingCommand:
    """Headers as real clients send them (under 8 KiB, known keys, plain values) take orjson's
    parser when it is installed, else the C scanner's native path, and are checked field by field; anything else, and every error, is
    parsed again by the strict parser. Either way the outcome is the strict one (property-tested:
    a header accepted by the fast path holds only plain values, which the strict parser accepts
    identically)."""
    if _orjson_loads is not None and len(header) <= _FAST_MAX_CHARS and header[:1] == b"{":
        try:
            h = _orjson_loads(header)
        except Exception:  # noqa: BLE001 - not UTF-8, NaN, a huge number, syntax: the strict parser words it
            h = None
        if type(h) is dict and _HEADER_KEYS.issuperset(h):
            # The shape clients send, checked inline: four Java ints, extFields of strings (or of
            # numbers and booleans, as C++ writes them), a known language, a string remark or none.
            # orjson refuses a lone surrogate escape, so no string here holds one. Anything else
            # takes the field-by-field checks below.
            get = h.get
            code = get("code")
            opaque = get("opaque", 0)
            flag = get("flag", 0)
            version = get("version", 0)
            ext = get("extFields", _NO_EXT)
            lang = get("language", "OTHER")
            st = get("serializeTypeCurrentRPC")
            remark = get("remark")
            if (
                type(code) is int and type(opaque) is int and type(flag) is int and type(version) is int
                and type(ext) is dict and type(lang) is str and (remark is None or type(remark) is str)
                and (st is None or type(st) is str)
                and _INT_MIN <= code <= _INT_MAX and _INT_MIN <= opaque <= _INT_MAX
                and _INT_MIN <= flag <= _INT_MAX and _INT_MIN <= version <= _INT_MAX
                and lang in _LANG_BYTES
            ):
                if not _STR_ONLY.issuperset(map(type, ext.values())):  # C++ sends numbers and booleans
                    try:
                        ext = _ext_numbers_in_place(ext)
                    except _NotPlain:  # a float, a container, a huge number: the checks below decide
                        ext = None
                if ext is not None:
                    if ext is _NO_EXT:
                        ext = {}
                    cmd = _new_command(RemotingCommand)
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
            try:
                return _command_from_json(h, body, True, b"\\" in header)
            except (_NotPlain, CommandDecodeError):
                pass
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


def decode_binary_header(header: bytes | bytearray, body: bytes) -> RemotingCommand:
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
