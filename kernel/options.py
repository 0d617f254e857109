"""One strict way to turn TOML tables into attrs objects: the kernel's sections and every plugin's own table.

TOML is typed, so nothing is coerced ("10" is not 10, 1 is not true, a string is not a
list); unknown keys fail with a "did you mean" hint; errors are one line naming the key.
Plugins call ``structure_options(MyOptions, options)`` in their constructor; the
kernel prefixes the plugin's name when it reports the error.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.cols import list_structure_factory
from cattrs.v import format_exception

from rmq.kernel.model import MessageQueue

T = TypeVar("T")


def _strict(kind: type) -> Any:
    def hook(value: Any, _: Any) -> Any:
        if kind is float and type(value) is int:
            return float(value)
        if type(value) is not kind:
            raise ValueError(f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
        return value

    return hook


def _message_queue(value: Any, _: Any) -> MessageQueue:
    if isinstance(value, MessageQueue):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a table {{topic, broker_name, queue_id}}, got {type(value).__name__}")
    keys = {"topic", "broker_name", "queue_id"}
    if set(value) != keys:
        extra, missing = sorted(set(value) - keys), sorted(keys - set(value))
        raise ValueError(f"a queue needs exactly topic, broker_name, queue_id (missing {missing}, unknown {extra})")
    topic, broker, qid = value["topic"], value["broker_name"], value["queue_id"]
    if type(topic) is not str or type(broker) is not str or type(qid) is not int or qid < 0:
        raise ValueError(f"a queue is {{topic: str, broker_name: str, queue_id: int >= 0}}, got {dict(value)!r}")
    return MessageQueue(topic, broker, qid)


def make_converter() -> cattrs.Converter:
    """A strict converter; callers may register more hooks on their own instance."""
    conv = cattrs.Converter(forbid_extra_keys=True)
    for kind in (int, str, bool, float):
        conv.register_structure_hook(kind, _strict(kind))
    conv.register_structure_hook(MessageQueue, _message_queue)

    def strict_list(kind: Any) -> Any:
        items = list_structure_factory(kind, conv)

        def hook(value: Any, t: Any) -> Any:
            if not isinstance(value, list | tuple):  # "IDC1" must not become ["I", "D", "C", "1"]
                raise ValueError(f"expected a list, got {type(value).__name__} {value!r}")
            return items(value, t)

        return hook

    conv.register_structure_hook_factory(lambda t: typing.get_origin(t) is list, strict_list)
    return conv


CONVERTER = make_converter()


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def first_error(exc: BaseException) -> tuple[str, str]:
    """(dotted key path, what was wrong) of the first problem cattrs found."""

    def fmt(e: BaseException, kind: Any) -> str:
        return str(e) if type(e) in (ValueError, TypeError) else format_exception(e, kind)

    if isinstance(exc, cattrs.BaseValidationError):
        msg = cattrs.transform_error(exc, format_exception=fmt)[0]
    else:
        msg = str(exc)
    text, _, path = msg.partition(" @ ")
    return path.removeprefix("$").lstrip("."), text


@attrs.frozen
class NoOptions:
    """The options class of a plugin that takes none: any key in its table is a mistake."""


def structure_options(cls: type[T], options: Mapping[str, Any] | None, where: str = "") -> T:
    """A plugin's TOML table -> ``cls`` (attrs); ``ValueError`` with one line on any problem."""
    prefix = f"{where}: " if where else ""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise ValueError(f"{prefix}options must be a table, got {type(options).__name__}")
    known = [f.name for f in attrs.fields(cls)]  # type: ignore[arg-type]
    for key in options:
        if key not in known:
            listing = ", ".join(known) if known else "none"
            raise ValueError(f"{prefix}unknown option {key!r}{did_you_mean(str(key), known)}; known options: {listing}")
    try:
        return CONVERTER.structure(dict(options), cls)
    except Exception as e:
        key, text = first_error(e)
        raise ValueError(f"{prefix}option {key}: {text}" if key else f"{prefix}{text}") from None
