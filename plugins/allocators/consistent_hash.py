"""Consistent hashing (``consistent_hash``): few queues move when a consumer joins or leaves.

Byte-compatible with RocketMQ's ``AllocateMessageQueueConsistentHash`` so a group
mixing Java and Python consumers agrees on owners (reference §9.2): every consumer
puts ``virtual_nodes`` points on a 32-bit ring at ``md5("<clientId>-<k>")`` (first
4 digest bytes, big-endian, unsigned); a queue hashes ``str(mq)`` (RocketMQ's
``MessageQueue.toString``) the same way and belongs to the first point at or after
it, wrapping to the smallest. When two points collide the later one inserted
(consumers in ``cid_all`` order, k ascending) owns it.
"""

from __future__ import annotations

import bisect
import hashlib
import threading
from collections.abc import Sequence
from typing import Any

import attrs

from rmq.kernel import AllocateStrategy, MessageQueue
from rmq.plugins.allocators._common import StrategyPlugin, check_inputs

DEFAULT_VIRTUAL_NODES = 10
_RING_CACHE_SIZE = 8  # distinct consumer sets remembered per strategy instance
_OWNER_CACHE_SIZE = 65_536  # queues whose owner a ring remembers (a rebalance repeats them every 20 s)


def md5_hash32(key: str) -> int:
    """First 4 bytes of MD5(UTF-8 key) as an unsigned big-endian int: RocketMQ's ring hash."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


class Ring:
    """Sorted point hashes and, index for index, the consumer owning each point.

    Immutable once built, except for a memo of queue -> owner (idempotent, so safe to race on).
    """

    __slots__ = ("hashes", "owners", "_memo")

    def __init__(self, cid_all: Sequence[str], virtual_nodes: int) -> None:
        points: dict[int, str] = {}
        for cid in cid_all:
            for k in range(virtual_nodes):
                points[md5_hash32(f"{cid}-{k}")] = cid  # a later insert replaces an equal hash
        self.hashes = sorted(points)
        self.owners = [points[h] for h in self.hashes]
        self._memo: dict[MessageQueue, str] = {}

    def owner(self, key: str) -> str:
        """The consumer owning a key: first point at or after its hash, else the first point."""
        j = bisect.bisect_left(self.hashes, md5_hash32(key))
        return self.owners[j if j < len(self.hashes) else 0]

    def owner_of(self, mq: MessageQueue) -> str:
        owner = self._memo.get(mq)
        if owner is None:
            if len(self._memo) >= _OWNER_CACHE_SIZE:
                self._memo.clear()
            owner = self._memo[mq] = self.owner(str(mq))
        return owner


class AllocateConsistentHash:
    """RocketMQ ``CONSISTENT_HASH``; the ring is built once per consumer set and cached (thread-safe)."""

    name = "consistent_hash"
    rocketmq_name = "CONSISTENT_HASH"

    def __init__(self, virtual_nodes: int = DEFAULT_VIRTUAL_NODES) -> None:
        if type(virtual_nodes) is not int or virtual_nodes < 1:
            raise ValueError(f"consistent_hash: virtual_nodes must be an int >= 1, got {virtual_nodes!r}")
        self.virtual_nodes = virtual_nodes
        self._rings: dict[tuple[str, ...], Ring] = {}
        self._lock = threading.Lock()

    def ring(self, cid_all: Sequence[str]) -> Ring:
        key = tuple(cid_all)
        with self._lock:
            ring = self._rings.get(key)
            if ring is None:
                ring = Ring(key, self.virtual_nodes)
                if len(self._rings) >= _RING_CACHE_SIZE:
                    del self._rings[next(iter(self._rings))]  # oldest consumer set first
                self._rings[key] = ring
            return ring

    def allocate(
        self, group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        if check_inputs(self.name, current_cid, mq_all, cid_all) is None:
            return []
        ring = self.ring(cid_all)
        owner_of = ring.owner_of
        return [mq for mq in mq_all if owner_of(mq) == current_cid]

    def __repr__(self) -> str:
        return f"AllocateConsistentHash(virtual_nodes={self.virtual_nodes})"


def _positive(_inst: Any, attribute: attrs.Attribute, value: int) -> None:  # type: ignore[type-arg]
    if value < 1:
        raise ValueError(f"option {attribute.name} must be >= 1, got {value}")


@attrs.frozen
class ConsistentHashOptions:
    virtual_nodes: int = attrs.field(default=DEFAULT_VIRTUAL_NODES, validator=_positive)


class ConsistentHashPlugin(StrategyPlugin):
    """Entry point ``rmq.allocation:consistent_hash``; option ``virtual_nodes`` (default 10)."""

    strategy_name = "consistent_hash"
    options_cls = ConsistentHashOptions

    def build(self, options: ConsistentHashOptions) -> AllocateStrategy:
        return AllocateConsistentHash(options.virtual_nodes)
