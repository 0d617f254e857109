"""RocketMQ's two even splits: contiguous blocks (``averagely``, the default) and round-robin (``averagely_by_circle``).

With n queues, c consumers and i my index in the sorted consumer ids (reference §9.2):

* averagely: the first ``n % c`` consumers take ``n // c + 1`` contiguous queues, the
  rest ``n // c``; with n <= c the first n consumers take one queue each.
  8 queues / 3 consumers -> [0, 1, 2], [3, 4, 5], [6, 7].
* averagely_by_circle: queues i, i + c, i + 2c, ...  -> [0, 3, 6], [1, 4, 7], [2, 5].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rmq.kernel import AllocateStrategy, MessageQueue
from rmq.plugins.allocators._common import IndexedStrategy, StrategyPlugin


class AllocateAveragely(IndexedStrategy):
    """Contiguous blocks, the first ``n % c`` consumers one queue more (RocketMQ ``AVG``)."""

    name = "averagely"
    rocketmq_name = "AVG"

    def pick(self, i: int, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> list[MessageQueue]:
        n, c = len(mq_all), len(cid_all)
        mod = n % c
        bigger = mod > 0 and i < mod  # one of the consumers that take an extra queue
        if n <= c:
            avg = 1
        else:
            avg = n // c + 1 if bigger else n // c
        start = i * avg if bigger else i * avg + mod
        count = min(avg, n - start)
        return [mq_all[(start + k) % n] for k in range(count)]

    def __repr__(self) -> str:
        return "AllocateAveragely()"


class AllocateAveragelyByCircle(IndexedStrategy):
    """Round robin: queue j goes to consumer ``j % c`` (RocketMQ ``AVG_BY_CIRCLE``)."""

    name = "averagely_by_circle"
    rocketmq_name = "AVG_BY_CIRCLE"

    def pick(self, i: int, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> list[MessageQueue]:
        return [mq_all[j] for j in range(i, len(mq_all), len(cid_all))]

    def __repr__(self) -> str:
        return "AllocateAveragelyByCircle()"


class AveragelyPlugin(StrategyPlugin):
    """Entry point ``rmq.allocation:averagely``; takes no options."""

    strategy_name = "averagely"

    def build(self, options: Any) -> AllocateStrategy:
        return AllocateAveragely()


class AveragelyByCirclePlugin(StrategyPlugin):
    """Entry point ``rmq.allocation:averagely_by_circle``; takes no options."""

    strategy_name = "averagely_by_circle"

    def build(self, options: Any) -> AllocateStrategy:
        return AllocateAveragelyByCircle()
