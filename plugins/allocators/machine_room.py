"""Machine-room (IDC) aware strategies: ``machine_room`` and ``machine_room_nearby``.

``machine_room`` (RocketMQ ``MACHINE_ROOM``): only queues of brokers named
``<room>@<broker>`` whose room is in the consumer's ``idc`` list are allocated,
m of them split as ``q = m // c`` contiguous queues per consumer plus one of the
``m % c`` leftovers for the first consumers. The name is split like Java's
``String.split("@")`` (trailing empty parts dropped) and must give exactly 2 parts.

``machine_room_nearby`` (RocketMQ ``MACHINE_ROOM_NEARBY``): queues are grouped by
the broker's room and consumers by theirs; each consumer takes, with the ``inner``
strategy, its share of its own room's queues, plus its share (among all consumers)
of the queues of every room that has no consumer at all. Rooms come from two
resolver rules, ``broker_room(mq)`` and ``consumer_room(client_id)``:

* ``"prefix"`` (default for both): the text before the first ``separator``
  (default ``@``), or the whole name when there is none. Broker ``IDC1@broker-a``
  is in ``IDC1``; a client id is ``ip@instance[@unit]``, so ``prefix`` gives the IP.
* ``"suffix"``: the text after the last separator (a client started with
  instance name ``IDC1`` has id ``10.0.0.5@IDC1``: room ``IDC1``).
* From Python: any callable, ``broker_room(mq) -> str`` / ``consumer_room(cid) -> str``.

With the defaults and no room in common every room counts as consumer-less, so
the result degrades to ``inner`` applied room by room: never an unowned queue.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from rmq.kernel import AllocateStrategy, MessageQueue
from rmq.plugins.allocators._common import IndexedStrategy, StrategyPlugin, check_inputs

ROOM_SEPARATOR = "@"
RoomOf = Callable[[str], str]


def java_split(text: str, sep: str) -> list[str]:
    """Java ``String.split`` on a literal separator: trailing empty strings are removed."""
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts if parts else ([text] if text == "" else [])


class AllocateByMachineRoom(IndexedStrategy):
    """RocketMQ ``MACHINE_ROOM``: consumers only take queues of the rooms in ``idc``."""

    name = "machine_room"
    rocketmq_name = "MACHINE_ROOM"

    def __init__(self, idc: Sequence[str]) -> None:
        rooms = frozenset(idc)
        if not rooms:
            raise ValueError("machine_room: option idc is empty; list the machine rooms this consumer serves")
        self.idc = rooms

    def in_rooms(self, mq: MessageQueue) -> bool:
        parts = java_split(mq.broker_name, ROOM_SEPARATOR)
        return len(parts) == 2 and parts[0] in self.idc

    def pick(self, i: int, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> list[MessageQueue]:
        eligible = [mq for mq in mq_all if self.in_rooms(mq)]
        c = len(cid_all)
        q, r = divmod(len(eligible), c)
        mine = eligible[i * q : i * q + q]
        if r > i:
            mine.append(eligible[i + q * c])
        return mine

    def __repr__(self) -> str:
        return f"AllocateByMachineRoom(idc={sorted(self.idc)!r})"


def room_rule(rule: str | Callable[[str], str], separator: str = ROOM_SEPARATOR) -> RoomOf:
    """A room resolver over names from a rule (``prefix``/``suffix``) or a callable (returned as is)."""
    if callable(rule):
        return rule
    if rule == "prefix":
        return lambda name: name.split(separator, 1)[0]
    if rule == "suffix":
        return lambda name: name.rsplit(separator, 1)[-1]
    raise ValueError(f"unknown room rule {rule!r}; expected 'prefix', 'suffix' or a callable")


class AllocateMachineRoomNearby:
    """RocketMQ ``MACHINE_ROOM_NEARBY``: own room first, consumer-less rooms shared by everybody."""

    name = "machine_room_nearby"

    def __init__(
        self,
        inner: AllocateStrategy,
        broker_room: Callable[[MessageQueue], str],
        consumer_room: Callable[[str], str],
    ) -> None:
        self.inner = inner
        self.broker_room = broker_room
        self.consumer_room = consumer_room
        self.rocketmq_name = f"MACHINE_ROOM_NEARBY-{getattr(inner, 'rocketmq_name', inner.name)}"

    def allocate(
        self, group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        if check_inputs(self.name, current_cid, mq_all, cid_all) is None:
            return []
        queues_by_room: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            queues_by_room.setdefault(self.broker_room(mq), []).append(mq)
        consumers_by_room: dict[str, list[str]] = {}
        for cid in cid_all:
            consumers_by_room.setdefault(self.consumer_room(cid), []).append(cid)

        mine: list[MessageQueue] = []
        my_room = self.consumer_room(current_cid)
        if my_room in queues_by_room:
            mine += self.inner.allocate(
                group, current_cid, queues_by_room[my_room], consumers_by_room[my_room]
            )
        for room in sorted(queues_by_room):
            if room not in consumers_by_room:
                mine += self.inner.allocate(group, current_cid, queues_by_room[room], cid_all)
        return mine

    def __repr__(self) -> str:
        return f"AllocateMachineRoomNearby(inner={self.inner!r})"


def _str_list(_inst: Any, attribute: attrs.Attribute, value: list[str]) -> None:  # type: ignore[type-arg]
    if any(not room for room in value):
        raise ValueError(f"option {attribute.name}: machine room names must not be empty, got {value!r}")


@attrs.frozen
class MachineRoomOptions:
    idc: list[str] = attrs.field(factory=list, validator=_str_list)


def _rule(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if not callable(value) and value not in ("prefix", "suffix"):
        raise ValueError(
            f"option {attribute.name}: expected 'prefix', 'suffix' (or a callable from Python), got {value!r}"
        )


def _inner(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:  # type: ignore[type-arg]
    if not isinstance(value, str) and not callable(getattr(value, "allocate", None)):
        raise ValueError(
            f"option {attribute.name}: expected a strategy name or an AllocateStrategy, got {value!r}"
        )


def _separator(_inst: Any, attribute: attrs.Attribute, value: str) -> None:  # type: ignore[type-arg]
    if not value:
        raise ValueError(f"option {attribute.name} must not be empty")


@attrs.frozen
class MachineRoomNearbyOptions:
    inner: Any = attrs.field(default="averagely", validator=_inner)
    inner_options: dict[str, Any] = attrs.field(factory=dict)
    broker_room: Any = attrs.field(default="prefix", validator=_rule)
    consumer_room: Any = attrs.field(default="prefix", validator=_rule)
    separator: str = attrs.field(default=ROOM_SEPARATOR, validator=_separator)


class MachineRoomPlugin(StrategyPlugin):
    """Entry point ``rmq.allocation:machine_room``; option ``idc`` (list of room names, required to allocate)."""

    strategy_name = "machine_room"
    options_cls = MachineRoomOptions

    def build(self, options: MachineRoomOptions) -> AllocateStrategy:
        return AllocateByMachineRoom(options.idc)


class MachineRoomNearbyPlugin(StrategyPlugin):
    """Entry point ``rmq.allocation:machine_room_nearby``.

    Options: ``inner`` (a registered strategy name, default ``averagely``, or from Python
    an ``AllocateStrategy``), ``inner_options`` (passed to the inner factory),
    ``broker_room`` / ``consumer_room`` (``prefix``, ``suffix`` or a callable) and ``separator``.
    """

    strategy_name = "machine_room_nearby"
    options_cls = MachineRoomNearbyOptions

    def build(self, options: MachineRoomNearbyOptions) -> AllocateStrategy:
        inner = options.inner
        if isinstance(inner, str):
            if inner == self.strategy_name:
                raise ValueError(f"{self._where}: inner cannot be {self.strategy_name!r} itself")
            if self.registry is None:
                raise ValueError(
                    f"{self._where}: inner={inner!r} needs the strategy registry (register the plugin)"
                )
            inner = self.registry.create(inner, **options.inner_options)
        elif options.inner_options:
            raise ValueError(f"{self._where}: inner_options only apply when inner is a strategy name")
        broker_rule = room_rule(options.broker_room, options.separator)
        broker_room: Callable[[MessageQueue], str] = (
            options.broker_room if callable(options.broker_room) else lambda mq: broker_rule(mq.broker_name)
        )
        return AllocateMachineRoomNearby(
            inner, broker_room, room_rule(options.consumer_room, options.separator)
        )
