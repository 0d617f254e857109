"""averagely and averagely_by_circle: hand-derived tables (§9.2) and the partition contract."""

from __future__ import annotations

import pytest

from rmq.kernel.hookspecs.allocation import AllocateStrategy
from rmq.kernel.model import MessageQueue
from rmq.plugins.allocators.averagely import AllocateAveragely, AllocateAveragelyByCircle
from rmq.testing.allocation import AllocateStrategyContract


class TestAveragelyContract(AllocateStrategyContract):
    def make_strategy(self) -> AllocateStrategy:
        return AllocateAveragely()


class TestAveragelyByCircleContract(AllocateStrategyContract):
    def make_strategy(self) -> AllocateStrategy:
        return AllocateAveragelyByCircle()


def queues(n: int) -> list[MessageQueue]:
    return [MessageQueue("T", "broker-a", i) for i in range(n)]


def cids(c: int) -> list[str]:
    return [f"cid-{i}" for i in range(c)]


def shares(strategy: AllocateStrategy, n: int, c: int) -> list[list[int]]:
    return [[mq.queue_id for mq in strategy.allocate("g", cid, queues(n), cids(c))] for cid in cids(c)]


@pytest.mark.parametrize(
    ("n", "c", "expected"),
    [
        (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
        (9, 4, [[0, 1, 2], [3, 4], [5, 6], [7, 8]]),  # mod 1: only the first takes 3
        (10, 4, [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]),  # mod 2
        (6, 3, [[0, 1], [2, 3], [4, 5]]),
        (3, 3, [[0], [1], [2]]),
        (2, 3, [[0], [1], []]),  # fewer queues than consumers
        (1, 4, [[0], [], [], []]),
        (5, 1, [[0, 1, 2, 3, 4]]),
        (1, 1, [[0]]),
        (7, 2, [[0, 1, 2, 3], [4, 5, 6]]),
    ],
)
def test_averagely(n: int, c: int, expected: list[list[int]]) -> None:
    assert shares(AllocateAveragely(), n, c) == expected


@pytest.mark.parametrize(
    ("n", "c", "expected"),
    [
        (8, 3, [[0, 3, 6], [1, 4, 7], [2, 5]]),
        (10, 4, [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]),
        (2, 3, [[0], [1], []]),
        (5, 1, [[0, 1, 2, 3, 4]]),
        (4, 4, [[0], [1], [2], [3]]),
    ],
)
def test_averagely_by_circle(n: int, c: int, expected: list[list[int]]) -> None:
    assert shares(AllocateAveragelyByCircle(), n, c) == expected


def test_names() -> None:
    assert (AllocateAveragely.name, AllocateAveragely.rocketmq_name) == ("averagely", "AVG")
    assert (AllocateAveragelyByCircle.name, AllocateAveragelyByCircle.rocketmq_name) == (
        "averagely_by_circle",
        "AVG_BY_CIRCLE",
    )


@pytest.mark.parametrize("strategy", [AllocateAveragely(), AllocateAveragelyByCircle()])
def test_error_messages_name_the_strategy_and_argument(strategy: AllocateStrategy) -> None:
    with pytest.raises(ValueError, match=rf"^allocation strategy '{strategy.name}': current_cid is empty$"):
        strategy.allocate("g", "", queues(1), cids(1))
    with pytest.raises(ValueError, match="mq_all is empty"):
        strategy.allocate("g", "cid-0", [], cids(1))
    with pytest.raises(ValueError, match="cid_all is empty"):
        strategy.allocate("g", "cid-0", queues(1), ())
