"""What every bundled allocation strategy shares: RocketMQ's input checks, strict options, the plugin shell.

A strategy plugin is instantiated by the kernel with its TOML table; those options
become defaults that a caller of ``registry.create(name, **options)`` may
override. Both pass through one attrs class structured by a strict cattrs
converter, so ``virtual_nodes = "10"`` or a misspelled key fails with one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from rmq.kernel import (
    AllocateStrategy,
    MessageQueue,
    NoOptions,
    StrategyRegistry,
    hookimpl,
    structure_options,
)

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


class IndexedStrategy:
    """Base of the strategies that split by the consumer's index in ``cid_all``.

    RocketMQ's input checks and the "not a member gets nothing" rule run once here;
    a subclass sets ``name`` and implements ``pick``.
    """

    name: ClassVar[str]

    def allocate(
        self, group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        i = check_inputs(self.name, current_cid, mq_all, cid_all)
        if i is None:
            return []
        return self.pick(i, mq_all, cid_all)

    def pick(self, i: int, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> list[MessageQueue]:
        """The queues of consumer ``i`` (inputs already checked, both lists sorted)."""
        raise NotImplementedError


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
        # fail at start-up, not at first use; kept as ``options`` for ``rmqd config``
        self.options = structure_options(self.options_cls, options, self._where)
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
