"""consistent_hash: owners checked against an independent ring built here with hashlib."""

from __future__ import annotations

import hashlib

import pytest

from rmq.kernel.hookspecs.allocation import AllocateStrategy
from rmq.kernel.model import MessageQueue
from rmq.plugins.allocators.consistent_hash import AllocateConsistentHash, ConsistentHashPlugin
from rmq.testing.allocation import AllocateStrategyContract


class TestConsistentHashContract(AllocateStrategyContract):
    def make_strategy(self) -> AllocateStrategy:
        return AllocateConsistentHash()


class TestConsistentHashOneNodeContract(AllocateStrategyContract):
    def make_strategy(self) -> AllocateStrategy:
        return AllocateConsistentHash(virtual_nodes=1)


class TestConsistentHashFixtureContract(AllocateStrategyContract):
    """``make_strategy`` as a fixture works as well as a method."""

    @pytest.fixture
    def make_strategy(self):  # type: ignore[no-untyped-def,override]
        return lambda: ConsistentHashPlugin({"virtual_nodes": 3}).create()


def h32(text: str) -> int:
    return int.from_bytes(hashlib.md5(text.encode("utf-8")).digest()[:4], "big")


def reference_owner(queue_key: str, cid_all: list[str], virtual_nodes: int = 10) -> str:
    """The §9.2 rule, written out plainly: first ring point >= the key's hash, else the smallest."""
    ring: dict[int, str] = {}
    for cid in cid_all:
        for k in range(virtual_nodes):
            ring[h32(f"{cid}-{k}")] = cid
    key = h32(queue_key)
    at_or_after = [p for p in sorted(ring) if p >= key]
    return ring[at_or_after[0] if at_or_after else min(ring)]


@pytest.mark.parametrize(
    ("cid_all", "virtual_nodes"),
    [
        (["c0", "c1", "c2"], 10),
        (["10.0.0.1@4001", "10.0.0.2@4002"], 10),
        (["10.0.0.1@4001", "10.0.0.2@4002", "10.0.0.3@4003", "10.0.0.4@4004", "10.0.0.5@4005"], 3),
        (["only"], 1),
    ],
)
def test_owners_match_an_independent_ring(cid_all: list[str], virtual_nodes: int) -> None:
    strategy = AllocateConsistentHash(virtual_nodes)
    topics = [("TopicTest", "broker-a"), ("TopicTest", "broker-b"), ("%RETRY%group", "broker-a")]
    mq_all = sorted(MessageQueue(t, b, q) for t, b in topics for q in range(8))
    for cid in cid_all:
        expected = [
            mq
            for mq in mq_all
            # the key is written out here, not taken from str(mq), to pin RocketMQ's toString
            if reference_owner(
                f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]",
                cid_all,
                virtual_nodes,
            )
            == cid
        ]
        assert strategy.allocate("g", cid, mq_all, cid_all) == expected


def test_pinned_vector() -> None:
    # a regression vector: 8 queues of T@b over c0, c1, c2 with 10 virtual nodes each
    mq_all = [MessageQueue("T", "b", i) for i in range(8)]
    got = {
        c: [mq.queue_id for mq in AllocateConsistentHash().allocate("g", c, mq_all, ["c0", "c1", "c2"])]
        for c in ("c0", "c1", "c2")
    }
    assert got == {"c0": [3, 4, 6], "c1": [1, 2, 5], "c2": [0, 7]}


def test_equal_ring_hashes_later_insert_wins() -> None:
    a, b = "c106893", "c147464"  # md5("c106893-0") and md5("c147464-0") share their first 4 bytes
    assert h32(f"{a}-0") == h32(f"{b}-0") == 0xC973FD44
    mq_all = [MessageQueue("T", "b", i) for i in range(6)]
    strategy = AllocateConsistentHash(virtual_nodes=1)
    assert strategy.allocate("g", b, mq_all, [a, b]) == mq_all  # b inserted last: the only point is b's
    assert strategy.allocate("g", a, mq_all, [a, b]) == []
    assert strategy.allocate("g", a, mq_all, [b, a]) == mq_all
    assert strategy.allocate("g", b, mq_all, [b, a]) == []


def test_few_queues_move_when_a_consumer_joins() -> None:
    mq_all = [MessageQueue("T", f"broker-{b}", q) for b in "abcd" for q in range(16)]
    before_cids = [f"10.0.0.{i}@1" for i in range(1, 5)]
    after_cids = sorted([*before_cids, "10.0.0.9@1"])
    strategy = AllocateConsistentHash()

    def owners(cid_all: list[str]) -> dict[MessageQueue, str]:
        return {mq: cid for cid in cid_all for mq in strategy.allocate("g", cid, mq_all, cid_all)}

    before, after = owners(before_cids), owners(after_cids)
    moved = [mq for mq in mq_all if before[mq] != after[mq]]
    assert all(after[mq] == "10.0.0.9@1" for mq in moved)  # queues only move to the newcomer


def test_ring_is_cached_per_consumer_set() -> None:
    strategy = AllocateConsistentHash()
    ring = strategy.ring(["a", "b"])
    assert strategy.ring(("a", "b")) is ring
    assert strategy.ring(["a", "b", "c"]) is not ring
    for i in range(20):  # bounded: old consumer sets are forgotten
        strategy.ring([f"x{i}"])
    assert len(strategy._rings) <= 8


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_virtual_nodes_validated(bad: object) -> None:
    with pytest.raises(ValueError, match="virtual_nodes"):
        AllocateConsistentHash(bad)  # type: ignore[arg-type]


def test_name_and_repr() -> None:
    s = AllocateConsistentHash(7)
    assert (s.name, s.rocketmq_name, s.virtual_nodes) == ("consistent_hash", "CONSISTENT_HASH", 7)
    assert repr(s) == "AllocateConsistentHash(virtual_nodes=7)"
