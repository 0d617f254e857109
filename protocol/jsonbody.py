"""Strict JSON for everything a peer sends: headers, request bodies, route and heartbeat data.

Accepts what Java's fastjson writes (including its unquoted integer map keys, e.g.
``{"offsetTable":{0:12}}``) and nothing a hostile peer could use to hurt us:
``NaN``/``Infinity`` are refused, integers must fit a Java ``long``, number literals
are bounded in length, floats must be finite, and nesting is bounded. Every failure
is a :class:`JsonError` (a ``ValueError``), never ``RecursionError`` or
``OverflowError``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["MAX_DEPTH", "JsonError", "loads", "scan_object"]

MAX_DEPTH: Final = 64
LONG_MIN: Final = -(1 << 63)
LONG_MAX: Final = (1 << 63) - 1
_MAX_NUMBER_CHARS: Final = 64


class JsonError(ValueError):
    """The text is not JSON we accept; the message says where and why."""


def _int(text: str) -> int:
    if len(text) > 20:
        raise JsonError(f"integer literal of {len(text)} digits does not fit a Java long")
    v = int(text)
    if not LONG_MIN <= v <= LONG_MAX:
        raise JsonError(f"integer {text} does not fit a Java long")
    return v


def _float(text: str) -> float:
    if len(text) > _MAX_NUMBER_CHARS:
        raise JsonError(f"number literal of {len(text)} characters is too long")
    v = float(text)
    if v in (float("inf"), float("-inf")):
        raise JsonError(f"number {text} is out of range")
    return v


def _constant(name: str) -> Any:
    raise JsonError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_int=_int, parse_float=_float, parse_constant=_constant)
_scan = _DECODER.scan_once
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BARE_INT_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')
_BRACKETS = {ord("{"): 1, ord("["): 1, ord("}"): -1, ord("]"): -1}


def _check_depth(text: str, max_depth: int) -> None:
    if text.count("{") + text.count("[") <= max_depth:
        return  # cannot nest deeper than the number of containers: the common case costs two counts
    depth = 0
    for ch in _STRINGS.sub("", text):
        step = _BRACKETS.get(ord(ch))
        if step:
            depth += step
            if depth > max_depth:
                raise JsonError(f"nesting deeper than {max_depth} levels")


def scan_object(text: str, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """One JSON object filling ``text`` (trailing whitespace allowed): the header fast path."""
    _check_depth(text, max_depth)
    try:
        obj, end = _scan(text, 0)
    except StopIteration:
        raise JsonError("no JSON value") from None
    except JsonError:
        raise
    except (ValueError, RecursionError, OverflowError) as exc:
        raise JsonError(str(exc)) from None
    if end != len(text) and text[end:].strip():
        raise JsonError(f"extra data after the JSON value at character {end}")
    if type(obj) is not dict:
        raise JsonError(f"expected an object, got {type(obj).__name__}")
    return obj


def loads(data: bytes | bytearray | memoryview | str, *, max_depth: int = MAX_DEPTH, lenient_keys: bool = True) -> Any:
    """Decode one JSON document; ``lenient_keys`` accepts fastjson's unquoted integer map keys."""
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonError(f"not UTF-8: {exc}") from None
    _check_depth(text, max_depth)
    try:
        try:
            return _DECODER.decode(text)
        except JsonError:
            raise
        except ValueError:
            if not lenient_keys or not _BARE_INT_KEY.search(text):
                raise
            return _DECODER.decode(_BARE_INT_KEY.sub(r'\1"\2"\3', text))
    except JsonError:
        raise
    except (ValueError, RecursionError, OverflowError) as exc:
        raise JsonError(str(exc)) from None
