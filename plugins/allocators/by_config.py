"""``by_config`` (RocketMQ ``CONFIG``): a fixed, operator-chosen list of queues, whatever the group looks like.

Not a partition: the operator is responsible for giving each consumer a distinct
list. The inputs are ignored (no checks), as in RocketMQ.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from rmq.kernel import AllocateStrategy, MessageQueue
from rmq.plugins.allocators._common import StrategyPlugin


class AllocateByConfig:
    """Returns a copy of the configured queues on every call."""

    name = "by_config"
    rocketmq_name = "CONFIG"

    def __init__(self, queues: Iterable[MessageQueue]) -> None:
        self.queues = tuple(queues)
        for mq in self.queues:
            if not isinstance(mq, MessageQueue):
                raise ValueError(f"by_config: expected MessageQueue items, got {mq!r}")

    def allocate(
        self, group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        return list(self.queues)

    def __repr__(self) -> str:
        return f"AllocateByConfig(queues={list(self.queues)!r})"


@attrs.frozen
class ByConfigOptions:
    queues: list[MessageQueue] = attrs.field(factory=list)


class ByConfigPlugin(StrategyPlugin):
    """Entry point ``rmq.allocation:by_config``; option ``queues = [{topic, broker_name, queue_id}, ...]``."""

    strategy_name = "by_config"
    options_cls = ByConfigOptions

    def build(self, options: ByConfigOptions) -> AllocateStrategy:
        return AllocateByConfig(options.queues)
