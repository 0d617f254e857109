"""Allocation: how a clustering consumer group splits a topic's queues.

RocketMQ rebalances on the client, so this concern is used by ``rmq.client``
(which builds a small kernel of its own) and by admin tools. Strategies are
named; users pick one by name (``allocation="averagely"``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from rmq.kernel.markers import hookspec
from rmq.kernel.model import MessageQueue


@runtime_checkable
class AllocateStrategy(Protocol):
    """Assigns queues to one consumer.

    Deterministic and pure: every member of a group, given the same sorted inputs,
    computes a partition of ``mq_all`` (each queue to exactly one member, except
    strategies that by design return a fixed list such as ``by_config``).
    """

    name: str

    def allocate(
        self, group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]: ...


class StrategyRegistry:
    """Name -> factory(**options) of allocation strategies; filled by the registry hook."""

    def __init__(self) -> None:
        self._factories: dict[str, Callable[..., AllocateStrategy]] = {}

    def register(self, name: str, factory: Callable[..., AllocateStrategy]) -> None:
        if name in self._factories:
            raise ValueError(f"allocation strategy {name!r} registered twice")
        self._factories[name] = factory

    def names(self) -> list[str]:
        return sorted(self._factories)

    def create(self, name: str, **options: Any) -> AllocateStrategy:
        try:
            factory = self._factories[name]
        except KeyError:
            raise KeyError(
                f"unknown allocation strategy {name!r}; available: {', '.join(self.names()) or '(none)'}"
            ) from None
        return factory(**options)


@hookspec
def rmq_allocation_register_strategies(registry: StrategyRegistry) -> None:
    """Register named allocation strategies with ``registry.register(name, factory)``.

    Called once per kernel, when a client or tool first needs a strategy.
    ``factory(**options)`` builds the strategy (options such as ``virtual_nodes``
    or ``idc`` come from the caller). Registering a taken name is an error.

    Arguments:
    - ``registry``: the ``StrategyRegistry`` to add strategies to.
    """
