"""Offset math with no I/O: queue identities, offset JSON, resolving start/end specs,
per-trigger rate limiting and partition planning.

A queue is (topic, brokerName, queueId). Offsets travel as nested JSON
``{"topic": {"brokerName:queueId": offset}}`` built in sorted key order, because Spark
compares offsets by their JSON text. An offset is the *next* logical queue offset to read
(RocketMQ's convention; the queue's max offset is the next one to be written), so a range is
``[start, end)``.

``partition`` (the int column) is the index of (brokerName, queueId) in the topic's queue
list sorted by broker name then queue id: stable while the topic's queues do not change, and
the same index the sink's ``partition`` column selects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from rmq.connectors.spark._options import EARLIEST, LATEST, OffsetSpec, RocketMQOptionError, split_queue_key

__all__ = [
    "QueueRef",
    "QueueRange",
    "Bounds",
    "DataLossError",
    "offsets_to_json",
    "offsets_from_json",
    "partition_indexes",
    "resolve",
    "rate_limit",
    "plan_ranges",
    "check_data_loss",
]


class DataLossError(RuntimeError):
    """Requested offsets are gone from the broker (retention, a recreated topic)."""


class QueueRef(NamedTuple):
    """One RocketMQ queue; sorts by topic, broker name, queue id."""

    topic: str
    broker: str
    queue_id: int

    @property
    def key(self) -> str:
        return f"{self.broker}:{self.queue_id}"

    def __str__(self) -> str:
        return f"{self.topic}/{self.broker}:{self.queue_id}"


class Bounds(NamedTuple):
    """A queue's offsets now: ``min`` is the oldest still stored, ``max`` the next to be written."""

    min: int
    max: int


@dataclass(frozen=True)
class QueueRange:
    """``[start, end)`` of one queue; ``partition`` is the queue's index within its topic."""

    queue: QueueRef
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


def offsets_to_json(offsets: Mapping[QueueRef, int]) -> dict[str, dict[str, int]]:
    """Nested dict with every level inserted in sorted order (stable JSON text)."""
    nested: dict[str, dict[str, int]] = {}
    for q in sorted(offsets, key=lambda q: (q.topic, q.key)):
        nested.setdefault(q.topic, {})[q.key] = int(offsets[q])
    return nested


def offsets_from_json(doc: Mapping[str, Any]) -> dict[QueueRef, int]:
    out: dict[QueueRef, int] = {}
    for topic, per_queue in doc.items():
        for key, off in per_queue.items():
            broker, qid = split_queue_key(key)
            out[QueueRef(topic, broker, qid)] = int(off)
    return out


def partition_indexes(queues: Iterable[QueueRef]) -> dict[QueueRef, int]:
    """Index of each queue in its topic's queue list sorted by (broker, queue id)."""
    by_topic: dict[str, list[QueueRef]] = {}
    for q in queues:
        by_topic.setdefault(q.topic, []).append(q)
    out: dict[QueueRef, int] = {}
    for qs in by_topic.values():
        for i, q in enumerate(sorted(set(qs), key=lambda q: (q.broker, q.queue_id))):
            out[q] = i
    return out


def resolve(
    spec: OffsetSpec,
    bounds: Mapping[QueueRef, Bounds],
    search: Callable[[QueueRef, int], int],
    *,
    option: str,
) -> dict[QueueRef, int]:
    """Concrete offsets for every queue in ``bounds``; ``search(q, ts_ms)`` answers by-time lookups.

    JSON naming a queue the cluster does not have is an error (a typo would otherwise read
    nothing); queues the JSON leaves out take the spec's default (earliest / latest).
    """
    out: dict[QueueRef, int] = {}
    if spec.kind == "json":
        known = {(q.topic, q.key) for q in bounds}
        for topic, per_queue in spec.queues.items():
            for key in per_queue:
                if (topic, key) not in known:
                    have = sorted(q.key for q in bounds if q.topic == topic)
                    where = f"queues of {topic!r}: {', '.join(have)}" if have else f"no topic {topic!r} selected"
                    raise RocketMQOptionError(option, f"unknown queue {topic}/{key} ({where})")
    for q, b in bounds.items():
        if spec.kind == "earliest":
            out[q] = b.min
        elif spec.kind == "latest":
            out[q] = b.max
        elif spec.kind == "timestamp":
            assert spec.timestamp_ms is not None
            out[q] = min(max(search(q, spec.timestamp_ms), b.min), b.max)
        else:
            off = spec.queues.get(q.topic, {}).get(q.key, spec.default)
            out[q] = b.min if off == EARLIEST else b.max if off == LATEST else off
    return out


def check_data_loss(
    wanted: Mapping[QueueRef, int], bounds: Mapping[QueueRef, Bounds], fail: bool, *, beyond_end: bool = False
) -> dict[QueueRef, int]:
    """Offsets below a queue's min (data already gone) fail or move up to the min.

    With ``beyond_end`` an offset past the queue's max (the queue was deleted and recreated,
    so its offsets restarted) fails too, or restarts at the queue's min. The error says which
    queue, what was wanted, what is there, and how to go on.
    """
    out = dict(wanted)
    for q, off in wanted.items():
        b = bounds.get(q)
        if b is None:
            continue
        if off < b.min:
            if fail:
                raise DataLossError(
                    f"rocketmq: offsets {off}..{b.min - 1} of queue {q} are no longer on the broker "
                    f"(its earliest offset is {b.min}); some data was lost. Set failOnDataLoss=false to skip "
                    "ahead and continue."
                )
            out[q] = b.min
        elif beyond_end and off > b.max:
            if fail:
                raise DataLossError(
                    f"rocketmq: queue {q} ends at offset {b.max} but the query already read up to {off}; the "
                    "queue was recreated or truncated and some data may be lost. Set failOnDataLoss=false to "
                    "read it again from its earliest offset."
                )
            out[q] = b.min
    return out


def rate_limit(start: Mapping[QueueRef, int], latest: Mapping[QueueRef, int], limit: int) -> dict[QueueRef, int]:
    """End offsets reading at most ``limit`` messages in all, shared in proportion to each queue's lag.

    Largest-remainder rounding makes the total exactly ``min(limit, total lag)``; ties go to the
    queue that sorts first, so the same inputs always give the same ends.
    """
    begin = {q: start.get(q, latest[q]) for q in latest}
    lags = {q: max(0, latest[q] - begin[q]) for q in latest}
    total = sum(lags.values())
    if total <= limit:
        return {q: begin[q] + lags[q] for q in latest}
    shares: dict[QueueRef, int] = {}
    remainders: list[tuple[int, QueueRef]] = []
    for q in sorted(lags):
        whole, rem = divmod(lags[q] * limit, total)
        shares[q] = whole
        remainders.append((-rem, q))
    left = limit - sum(shares.values())
    for _, q in sorted(remainders)[:left]:
        shares[q] += 1
    return {q: begin[q] + shares[q] for q in latest}


def plan_ranges(
    start: Mapping[QueueRef, int], end: Mapping[QueueRef, int], min_partitions: int | None = None
) -> list[QueueRange]:
    """Non-empty ranges, one per queue, split further so there are about ``min_partitions``.

    As Kafka's planner: when asked for more partitions than queues, each queue gets a share of
    the wanted count in proportion to its size (at least one), cut into near-equal pieces.
    """
    index = partition_indexes(end)
    ranges = [
        QueueRange(q, index[q], start.get(q, end[q]), end[q])
        for q in sorted(end)
        if end[q] > start.get(q, end[q])
    ]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r.size for r in ranges)
    out: list[QueueRange] = []
    for r in ranges:
        parts = max(1, min(r.size, round(r.size * min_partitions / total)))
        step, extra = divmod(r.size, parts)
        pos = r.start
        for i in range(parts):
            nxt = pos + step + (1 if i < extra else 0)
            out.append(QueueRange(r.queue, r.partition, pos, nxt))
            pos = nxt
    return out
