"""What every bundled allocation strategy shares: RocketMQ's input checks, strict options, the plugin shell.

A strategy plugin is instantiated by the kernel with its TOML table; those options
become defaults that a caller of ``registry.create(name, **options)`` may
override. Both pass through one attrs class structured by a strict cattrs
converter, so ``virtual_nodes = "10"`` or a misspelled key fails with one line.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import attrs
import cattrs
from cattrs.cols import list_structure_factory
from cattrs.v import format_exception

from rmq.kernel.hookspecs.allocation import AllocateStrategy, StrategyRegistry
from rmq.kernel.markers import hookimpl
from rmq.kernel.model import MessageQueue

NAMESPACE = "rmq.allocation"
T = TypeVar("T")


def check_inputs(
    name: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> int | None:
    """RocketMQ's checks: empty inputs are caller bugs (ValueError); a non-member gets nothing (None).

    Returns the index of ``current_cid`` in ``cid_all``.
    """
    if not current_cid:
        raise ValueError(f"allocation strategy {name!r}: current_cid is empty")
    if not mq_all:
        raise ValueError(f"allocation strategy {name!r}: mq_all is empty (no queues to allocate)")
    if not cid_all:
        raise ValueError(f"allocation strategy {name!r}: cid_all is empty (no consumers in the group)")
    try:
        return cid_all.index(current_cid)
    except ValueError:
        return None  # RocketMQ logs "consumerId not in cidAll" and allocates nothing


# ---------------------------------------------------------------------------------------------------
# options


def _strict(kind: type) -> Any:
    def hook(value: Any, _: Any) -> Any:
        # TOML is typed: refuse silent coercions such as "10" -> 10 or 1 -> True
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
        raise ValueError(
            f"a queue needs exactly topic, broker_name, queue_id (missing {missing}, unknown {extra})"
        )
    topic, broker, qid = value["topic"], value["broker_name"], value["queue_id"]
    if type(topic) is not str or type(broker) is not str or type(qid) is not int or qid < 0:
        raise ValueError(
            f"a queue is {{topic: str, broker_name: str, queue_id: int >= 0}}, got {dict(value)!r}"
        )
    return MessageQueue(topic, broker, qid)


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    for kind in (int, str, bool, float):
        conv.register_structure_hook(kind, _strict(kind))
    conv.register_structure_hook(MessageQueue, _message_queue)

    def strict_list(kind: Any) -> Any:
        items = list_structure_factory(kind, conv)

        def hook(value: Any, t: Any) -> Any:
            # a TOML string is iterable too: "IDC1" must not become ["I", "D", "C", "1"]
            if not isinstance(value, list | tuple):
                raise ValueError(f"expected a list, got {type(value).__name__} {value!r}")
            return items(value, t)

        return hook

    conv.register_structure_hook_factory(lambda t: typing.get_origin(t) is list, strict_list)
    return conv


_CONVERTER = _make_converter()


def structure_options(cls: type[T], options: Mapping[str, Any] | None, where: str) -> T:
    """Options dict -> attrs instance; ValueError naming the plugin, the key and the expectation."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise ValueError(f"{where}: options must be a table, got {type(options).__name__}")
    known = [f.name for f in attrs.fields(cls)]  # type: ignore[arg-type]
    for key in options:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            listing = ", ".join(known) if known else "none"
            raise ValueError(f"{where}: unknown option {key!r}{hint}; known options: {listing}")
    try:
        return _CONVERTER.structure(dict(options), cls)
    except cattrs.BaseValidationError as e:

        def fmt(exc: BaseException, kind: Any) -> str:
            return str(exc) if isinstance(exc, ValueError | TypeError) else format_exception(exc, kind)

        msg = cattrs.transform_error(e, format_exception=fmt)[0]
        text, _, path = msg.partition(" @ ")
        key = path.removeprefix("$").lstrip(".")
        # field validators run in __init__, so their errors carry no path: they name the option themselves
        raise ValueError(f"{where}: option {key}: {text}" if key else f"{where}: {text}") from None


@attrs.frozen
class NoOptions:
    """For strategies without settings: any key is a mistake."""


# ---------------------------------------------------------------------------------------------------
# the plugin shell


class StrategyPlugin:
    """Base of the bundled strategy plugins: one entry point, one registered name.

    Subclasses set ``strategy_name`` and ``options_cls`` and implement ``build(options)``.
    """

    strategy_name: ClassVar[str]
    options_cls: ClassVar[type] = NoOptions

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self._where = f"{NAMESPACE}:{self.strategy_name}"
        structure_options(self.options_cls, options, self._where)  # fail at start-up, not at first use
        self._defaults = dict(options or {})
        self.registry: StrategyRegistry | None = None

    @hookimpl(trylast=True)
    def rmq_allocation_register_strategies(self, registry: StrategyRegistry) -> None:
        self.registry = registry
        registry.register(self.strategy_name, self.create)

    def create(self, **options: Any) -> AllocateStrategy:
        """The registry factory: plugin (TOML) options overridden by the caller's."""
        return self.build(structure_options(self.options_cls, {**self._defaults, **options}, self._where))

    def build(self, options: Any) -> AllocateStrategy:
        raise NotImplementedError
