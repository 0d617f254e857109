"""Contract tests for partitioning ``AllocateStrategy`` implementations; subclass to run them.

    from rmq.testing.allocation import AllocateStrategyContract

    class TestMyStrategy(AllocateStrategyContract):
        def make_strategy(self):
            return MyStrategy()

``make_strategy`` may be a method or a pytest fixture of that name returning a
zero-argument callable. Over a grid of queue and consumer counts it checks that
every member of a group, each computing its own share from the same sorted
inputs, ends with a partition: each eligible queue owned exactly once. It also
checks determinism (same answer from a fresh instance), that inputs are left
untouched, RocketMQ's input rules (an empty ``current_cid``, ``mq_all`` or
``cid_all`` raises ``ValueError`` whose message names that argument; a client id
missing from ``cid_all`` gets an empty list). Override
``make_queues``/``make_cids`` to shape the inputs (machine rooms, say) and
``eligible`` when by design only some queues are allocated. Strategies that return
a fixed list (``by_config``) are not partitions and need their own tests.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import pluggy
import pytest

from rmq.kernel.hookspecs import allocation
from rmq.kernel.hookspecs.allocation import AllocateStrategy, StrategyRegistry
from rmq.kernel.markers import PROJECT
from rmq.kernel.model import MessageQueue
from rmq.testing._factory import fixture_or_method

MakeStrategy = Callable[[], AllocateStrategy]


def bundled_plugins() -> dict[str, type]:
    """rmq's own ``rmq.allocation`` entry points (a third party's installed beside it left out), loaded."""
    from importlib.metadata import entry_points

    return {ep.name: ep.load() for ep in entry_points(group="rmq.allocation") if ep.value.startswith("rmq.plugins.")}


def registry_via_hook(
    plugins: Mapping[str, type], options: Mapping[str, dict[str, Any]] | None = None, *extra: object
) -> StrategyRegistry:
    """What the kernel does: instantiate each plugin with its table, register, call the hook once."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(allocation)
    for name, cls in plugins.items():
        pm.register(cls((options or {}).get(name, {})), name=name)
    for plugin in extra:
        pm.register(plugin)
    pm.check_pending()
    registry = StrategyRegistry()
    pm.hook.rmq_allocation_register_strategies(registry=registry)
    return registry


class AllocateStrategyContract:
    """Base class (no ``Test`` prefix, so pytest collects only your subclass)."""

    group: ClassVar[str] = "contract_group"
    queue_counts: ClassVar[Sequence[int]] = (1, 2, 3, 4, 7, 8, 9, 16, 31, 64)
    consumer_counts: ClassVar[Sequence[int]] = (1, 2, 3, 5, 8, 13, 40)

    def make_strategy(self) -> AllocateStrategy:
        raise NotImplementedError(
            "subclass AllocateStrategyContract and provide make_strategy (method or fixture)"
        )

    @pytest.fixture
    def strategy_factory(self, request: pytest.FixtureRequest) -> MakeStrategy:
        return fixture_or_method(request, "make_strategy", self.make_strategy)  # type: ignore[no-any-return]

    # -- inputs (override to shape them); both must come back sorted, as RocketMQ's rebalance sorts
    def make_queues(self, n: int) -> list[MessageQueue]:
        """n queues over two brokers of one topic, sorted (topic, broker, queue id)."""
        return sorted(MessageQueue("ContractTopic", f"broker-{'ab'[k % 2]}", k // 2) for k in range(n))

    def make_cids(self, c: int) -> list[str]:
        """c client ids shaped like RocketMQ's ``ip@instance``, sorted."""
        return sorted(f"10.0.{k // 250}.{k % 250 + 1}@{4000 + k}" for k in range(c))

    def eligible(self, mq_all: Sequence[MessageQueue]) -> set[MessageQueue]:
        """The queues the group as a whole must own (all of them unless the strategy filters)."""
        return set(mq_all)

    # -- helpers
    def allocate_all(
        self, strategy: AllocateStrategy, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> dict[str, list[MessageQueue]]:
        return {cid: strategy.allocate(self.group, cid, mq_all, cid_all) for cid in cid_all}

    def grid(self) -> list[tuple[int, int]]:
        return [(n, c) for n in self.queue_counts for c in self.consumer_counts]

    # -- the contract
    def test_satisfies_protocol(self, strategy_factory: MakeStrategy) -> None:
        strategy = strategy_factory()
        assert isinstance(strategy, AllocateStrategy)
        assert isinstance(strategy.name, str) and strategy.name
        result = strategy.allocate(self.group, self.make_cids(1)[0], self.make_queues(4), self.make_cids(1))
        assert isinstance(result, list)
        assert all(isinstance(mq, MessageQueue) for mq in result)

    def test_partitions_the_queues(self, strategy_factory: MakeStrategy) -> None:
        strategy = strategy_factory()
        for n, c in self.grid():
            mq_all, cid_all = self.make_queues(n), self.make_cids(c)
            shares = self.allocate_all(strategy, mq_all, cid_all)
            owned: list[MessageQueue] = [mq for share in shares.values() for mq in share]
            assert len(owned) == len(set(owned)), f"a queue owned twice with {n} queues, {c} consumers"
            assert set(owned) == self.eligible(mq_all), (
                f"queues lost or invented with {n} queues, {c} consumers"
            )

    def test_deterministic(self, strategy_factory: MakeStrategy) -> None:
        one, other = strategy_factory(), strategy_factory()
        for n, c in self.grid():
            mq_all, cid_all = self.make_queues(n), self.make_cids(c)
            first = self.allocate_all(one, mq_all, cid_all)
            assert self.allocate_all(one, mq_all, cid_all) == first  # same instance again
            assert self.allocate_all(other, mq_all, cid_all) == first  # a fresh instance
            assert self.allocate_all(one, tuple(mq_all), tuple(cid_all)) == first  # any Sequence

    def test_does_not_mutate_inputs(self, strategy_factory: MakeStrategy) -> None:
        strategy = strategy_factory()
        mq_all, cid_all = self.make_queues(9), self.make_cids(4)
        mq_copy, cid_copy = list(mq_all), list(cid_all)
        self.allocate_all(strategy, mq_all, cid_all)
        assert (mq_all, cid_all) == (mq_copy, cid_copy)

    @pytest.mark.parametrize(
        "which",
        ["current_cid", "mq_all", "cid_all"],
    )
    def test_rejects_empty_inputs(self, strategy_factory: MakeStrategy, which: str) -> None:
        args: dict[str, Any] = {
            "current_cid": self.make_cids(2)[0],
            "mq_all": self.make_queues(4),
            "cid_all": self.make_cids(2),
        }
        args[which] = "" if which == "current_cid" else []
        with pytest.raises(ValueError, match=which):
            strategy_factory().allocate(self.group, args["current_cid"], args["mq_all"], args["cid_all"])

    def test_a_stranger_gets_nothing(self, strategy_factory: MakeStrategy) -> None:
        strategy = strategy_factory()
        assert (
            strategy.allocate(self.group, "192.0.2.1@stranger", self.make_queues(8), self.make_cids(3)) == []
        )
