"""Batch and streaming readers.

Planning (queue discovery, offset resolution, rate limits) runs on the driver and talks to
the name server and brokers through one :class:`~rmq.connectors.spark._access.Session`;
``read()`` runs in executor Python workers and pulls exactly ``[start, end)`` of one queue,
yielding Arrow batches. The same (start, end) always gives the same rows: ranges are planned
from offsets only, never from "whatever is there now".
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    In,
    InputPartition,
    IsNotNull,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from rmq.connectors.spark import _access
from rmq.connectors.spark._offsets import (
    Bounds,
    QueueRange,
    QueueRef,
    check_data_loss,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
    rate_limit,
    resolve,
)
from rmq.connectors.spark._options import RocketMQOptionError, SourceConfig

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

log = logging.getLogger("rmq.connectors.spark")

__all__ = [
    "RangePartition",
    "RocketMQBatchReader",
    "RocketMQPushdownBatchReader",
    "RocketMQStreamReader",
    "pushdown_planning",
    "read_range",
]

# Topics every RocketMQ cluster has for itself; a subscribePattern never selects them.
_SYSTEM_TOPIC = re.compile(
    r"^(%RETRY%|%DLQ%|%SYS%|rmq_sys_|RMQ_SYS_).*|^(TBW102|SCHEDULE_TOPIC_XXXX|OFFSET_MOVED_EVENT|SELF_TEST_TOPIC"
    r"|BenchmarkTest|TRANS_CHECK_MAX_TIME_TOPIC|DefaultCluster)$"
)
BATCH_ROWS = 8192  # rows per Arrow batch handed to Spark


@dataclass
class RangePartition(InputPartition):
    """One task: ``[start, end)`` of one queue (picklable; sent to an executor)."""

    topic: str
    broker: str
    queue_id: int
    partition: int
    start: int
    end: int

    @classmethod
    def of(cls, r: QueueRange) -> RangePartition:
        return cls(r.queue.topic, r.queue.broker, r.queue.queue_id, r.partition, r.start, r.end)


@dataclass(frozen=True)
class ReadSpec:
    """What ``read()`` needs besides the range (kept small: it is pickled with the reader)."""

    nameserver: str
    timeout_s: float
    expression: str | None
    expression_type: str
    tags: frozenset[str] | None  # exact tag set the rows must have (client-side re-check of TAG filters)
    fail_on_data_loss: bool
    born_time: bool
    include_headers: bool
    pull_batch_size: int
    credentials: tuple[str, str] | None = None


def tag_set(expression: str | None) -> frozenset[str] | None:
    """Tags of a TAG expression; None = every message ('*' or no expression)."""
    if expression is None:
        return None
    tags = frozenset(t.strip() for t in expression.split("||"))
    return None if "*" in tags else tags


def read_range(spec: ReadSpec, part: RangePartition, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Pull ``[part.start, part.end)`` and yield Arrow batches of about BATCH_ROWS rows."""
    from rmq.connectors.spark._decode import Columns
    from rmq.connectors.spark._schema import SYSTEM_PROPERTIES

    q = QueueRef(part.topic, part.broker, part.queue_id)
    session = _access.shared_session(spec.nameserver, spec.timeout_s, spec.credentials)
    cols = Columns()

    def batch() -> pa.RecordBatch:
        return cols.to_batch(schema, topic=q.topic, broker=q.broker, queue_id=q.queue_id, partition=part.partition,
                             born_time=spec.born_time, tags=spec.tags, system_properties=SYSTEM_PROPERTIES)

    for bodies, lo, hi in session.read(
        q,
        part.start,
        part.end,
        expression=spec.expression,
        expression_type=spec.expression_type,
        fail_on_data_loss=spec.fail_on_data_loss,
        pull_batch_size=spec.pull_batch_size,
    ):
        for body in bodies:
            cols.add(body, lo, hi)
        if len(cols) >= BATCH_ROWS:
            out = batch()
            cols = Columns()
            if out.num_rows:
                yield out
    if len(cols):
        out = batch()
        if out.num_rows:
            yield out


class _Planner:
    """Shared driver-side logic: which queues, their bounds, resolving offset specs."""

    config: SourceConfig
    _session: _access.Session | None

    def _open(self) -> _access.Session:
        if self._session is None:
            self._session = _access.Session(self.config.nameserver, self.config.request_timeout_s,
                                            self.config.credentials)
        return self._session

    def _close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_session"] = None  # connections never travel to executors
        return state

    def _topics(self, session: _access.Session) -> list[str]:
        sel = self.config.selection
        if sel.topics:
            return list(sel.topics)
        if sel.assignment is not None:
            return sorted(sel.assignment)
        assert sel.pattern is not None
        rx = re.compile(sel.pattern)
        return sorted(t for t in session.list_topics() if rx.fullmatch(t) and not _SYSTEM_TOPIC.match(t))

    def _queues(self, session: _access.Session, strict: bool = True) -> list[QueueRef]:
        """Selected queues now. A subscribed topic the cluster does not know is an error when
        ``strict`` (planning a batch, starting a stream); a running stream waits for it instead."""
        sel = self.config.selection
        out: list[QueueRef] = []
        for topic in self._topics(session):
            queues = session.queues(topic)
            if not queues and sel.pattern is None:
                if not strict:
                    log.warning("rocketmq: topic %s has no route now; its queues keep their offsets", topic)
                    continue
                raise RocketMQOptionError(sel.kind, f"topic {topic!r} does not exist on {self.config.nameserver}")
            if sel.assignment is not None:
                wanted = sel.assignment[topic]
                picked = [q for q in queues if q.queue_id in wanted or q.key in wanted]
                found = {q.queue_id for q in picked} | {q.key for q in picked}
                missing = [str(w) for w in wanted if w not in found]
                if missing:
                    have = ", ".join(q.key for q in queues)
                    raise RocketMQOptionError(
                        "assign", f"topic {topic!r} has no queue {', '.join(missing)} (it has {have})"
                    )
                queues = picked
            out.extend(queues)
        return sorted(out)

    def _expression(self, pushed_tags: frozenset[str] | None) -> tuple[str | None, str, frozenset[str] | None]:
        """The broker-side expression and the exact tag set, combining the option and pushed filters."""
        cfg = self.config
        if cfg.filter_type == "SQL92":
            return cfg.filter_expression, "SQL92", None
        tags = tag_set(cfg.filter_expression)
        if pushed_tags is not None:
            tags = pushed_tags if tags is None else tags & pushed_tags
        if tags is None:
            return None, "TAG", None
        return " || ".join(sorted(tags)), "TAG", tags

    def _read_spec(self, pushed_tags: frozenset[str] | None = None) -> ReadSpec:
        expression, kind, tags = self._expression(pushed_tags)
        cfg = self.config
        return ReadSpec(
            nameserver=cfg.nameserver,
            timeout_s=cfg.request_timeout_s,
            credentials=cfg.credentials,
            expression=expression,
            expression_type=kind,
            tags=tags,
            fail_on_data_loss=cfg.fail_on_data_loss,
            born_time=cfg.timestamp_source == "born",
            include_headers=cfg.include_headers,
            pull_batch_size=cfg.pull_batch_size,
        )


def pushdown_planning() -> bool:
    """True when called (through ``DataSource.reader``) by Spark's filter push-down planner.

    That planner is its own worker module, which runs only when push-down is enabled; it is
    found on the call stack, however the worker was started (forked by the daemon or not).
    Anywhere else the answer is False, the safe choice.
    """
    frame = sys._getframe(1)
    for _ in range(30):
        if frame is None:
            return False
        if frame.f_globals.get("__name__") == "pyspark.sql.worker.data_source_pushdown_filters":
            return True
        frame = frame.f_back
    return False


def _arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


class RocketMQBatchReader(_Planner, DataSourceReader):
    """``spark.read.format("rocketmq")``: a fixed range per queue, resolved once at planning."""

    def __init__(self, config: SourceConfig, schema: StructType) -> None:
        self.config = config
        self.schema = schema
        self._session = None
        self.pushed_tags: frozenset[str] | None = None

    def partitions(self) -> Sequence[InputPartition]:
        cfg = self.config
        assert cfg.ending is not None
        session = self._open()
        try:
            queues = self._queues(session)
            bounds = session.bounds(queues)
            start = resolve(cfg.starting, bounds, session.search, option=_start_option(cfg))
            end = resolve(cfg.ending, bounds, session.search, option="endingOffsets")
        finally:
            self._close()
        start = check_data_loss(start, bounds, cfg.fail_on_data_loss)
        for q in bounds:
            start[q] = min(start[q], bounds[q].max)
            end[q] = min(end[q], bounds[q].max)
            if start[q] > end[q]:
                raise RocketMQOptionError(
                    "endingOffsets", f"queue {q}: starting offset {start[q]} is after ending offset {end[q]}"
                )
        _, _, tags = self._expression(self.pushed_tags)
        if tags is not None and not tags:
            return []  # the tag filters contradict each other: nothing can match
        return [RangePartition.of(r) for r in plan_ranges(start, end, cfg.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return  # Spark's stand-in partition when partitions() planned none
        yield from read_range(self._read_spec(self.pushed_tags), partition, _arrow_schema(self.schema))


class RocketMQPushdownBatchReader(RocketMQBatchReader):
    """The batch reader plus ``pushFilters``: Spark refuses a reader that implements it while
    ``spark.sql.python.filterPushdown.enabled`` is false, so this one is only handed out when
    Spark plans the scan with push-down (see :func:`pushdown_planning`)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """``tags = 'x'`` and ``tags IN (...)`` become a broker-side TAG expression.

        ``tags IS NOT NULL`` is then implied and taken too. Nothing is pushed when the
        ``filter`` option is SQL92 (one pull carries one expression); everything else stays
        with Spark.
        """
        if self.config.filter_type == "SQL92":
            return filters
        rest: list[Filter] = []
        for f in filters:
            tags = self._tags_of(f)
            if tags is None:
                rest.append(f)
            else:
                self.pushed_tags = tags if self.pushed_tags is None else self.pushed_tags & tags
        if self.pushed_tags is not None:
            rest = [f for f in rest if not (isinstance(f, IsNotNull) and f.attribute == ("tags",))]
        return rest

    @staticmethod
    def _tags_of(f: Filter) -> frozenset[str] | None:
        if isinstance(f, EqualTo) and f.attribute == ("tags",) and isinstance(f.value, str):
            values: Sequence[Any] = (f.value,)
        elif isinstance(f, In) and f.attribute == ("tags",):
            values = f.value
        else:
            return None
        if not values or not all(isinstance(v, str) and v and "||" not in v and v != "*" for v in values):
            return None
        return frozenset(values)



def _start_option(cfg: SourceConfig) -> str:
    return "startingTimestamp" if cfg.starting.kind == "timestamp" else "startingOffsets"


class RocketMQStreamReader(_Planner, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("rocketmq")``; the offset is ``{"topic": {"broker:queueId": next}}``.

    The checkpoint is the source of truth. ``groupId`` only mirrors committed offsets to the
    broker so that consumer-lag tools see the query's progress.
    """

    def __init__(self, config: SourceConfig, schema: StructType) -> None:
        self.config = config
        self.schema = schema
        self._session = None
        self._target: dict[QueueRef, int] | None = None  # availableNow: never read past this
        self._latest: dict[QueueRef, int] | None = None  # last seen max offsets, for reportLatestOffset
        self._committed: dict[QueueRef, int] = {}  # what groupId holds on the brokers, as far as we know

    # -- offsets -------------------------------------------------------------------------------
    def _snapshot(self, strict: bool = False) -> dict[QueueRef, Bounds]:
        session = self._open()
        try:
            bounds = session.bounds(self._queues(session, strict))
        except Exception:
            self._close()  # reconnect next trigger
            raise
        self._latest = {q: b.max for q, b in bounds.items()}
        return bounds

    def initialOffset(self) -> dict:
        bounds = self._snapshot(strict=True)
        start = resolve(self.config.starting, bounds, self._open().search, option=_start_option(self.config))
        start = check_data_loss(start, bounds, self.config.fail_on_data_loss)
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.config.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {q: b.max for q, b in self._snapshot().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        # Spark plans the next batch only once the previous one completed, so ``start`` is
        # processed: mirror it to the group now (commit() is not called after a query's last batch).
        self._commit_group(begin)
        bounds = self._snapshot()
        new = {q: b.min for q, b in bounds.items() if q not in begin}
        if new:
            # A queue appeared (more queues, a new topic matching the pattern): enter it at its
            # earliest offset with an empty range, so every range's start is in a checkpoint.
            log.info("rocketmq: new queues %s start at their earliest offsets", ", ".join(map(str, new)))
            return offsets_to_json({**begin, **new})
        present = {q: off for q, off in begin.items() if q in bounds}
        moved = check_data_loss(present, bounds, self.config.fail_on_data_loss, beyond_end=True)
        if moved != present:
            # failOnDataLoss=false: first a micro-batch that only moves the offsets of the queues that lost data
            # (nothing is read from them), then reading goes on from there
            changed = {q: off for q, off in moved.items() if off != present[q]}
            log.warning("rocketmq: data lost; queues %s continue at %s", ", ".join(map(str, changed)), changed)
            return offsets_to_json({**begin, **changed})
        latest = {q: max(bounds[q].max, present[q]) for q in present}
        if self._target is not None:
            latest = {q: max(present[q], min(latest[q], self._target.get(q, present[q]))) for q in latest}
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(present, latest, limit.max_rows)
        else:
            end = latest
        # Queues missing from the route now (a broker down) keep their offset until they return.
        return offsets_to_json({**begin, **end})

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        s, e = offsets_from_json(start), offsets_from_json(end)
        e = {q: off for q, off in e.items() if q in s}  # new queues enter with an empty range
        return [RangePartition.of(r) for r in plan_ranges(s, e, self.config.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):
            return
        yield from read_range(self._read_spec(), partition, _arrow_schema(self.schema))

    def commit(self, end: dict) -> None:
        self._commit_group(offsets_from_json(end))

    def _commit_group(self, offsets: dict[QueueRef, int]) -> None:
        group = self.config.group_id
        if group is None:
            return
        changed = {q: off for q, off in offsets.items() if self._committed.get(q) != off}
        if not changed:
            return
        try:
            self._open().commit_offsets(group, changed)
            self._committed.update(changed)
        except Exception as exc:  # monitoring only: never fail the query for it
            log.warning("rocketmq: could not commit offsets of group %s: %s", group, exc)

    def stop(self) -> None:
        self._close()

