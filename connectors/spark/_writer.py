"""The sink: rows -> messages, batched per target queue, sent at least once.

Spark hands executors Arrow record batches (``DataSourceArrowWriter``), so columns are read
whole instead of row by row. Queue choice: the ``partition`` column (index into the topic's
queues sorted by broker then queue id, the reader's ``partition``), else a stable hash of
the key (Java ``String.hashCode`` of the UTF-8 key, so Java producers selecting by the same
key hash land on the same queue), else round robin per batch of messages.
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
)

from rmq.connectors.spark import _access
from rmq.connectors.spark._exactly_once import ExactlyOnceDriver, ExactlyOnceTask, TxCommit, log_dir
from rmq.connectors.spark._options import RocketMQOptionError, SinkConfig
from rmq.connectors.spark._schema import SYSTEM_PROPERTIES

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SinkCommit", "RocketMQWriter", "RocketMQStreamWriter", "check_sink_schema"]

_TEXT = (StringType, BinaryType)
_INTS = (IntegerType, LongType, ShortType)


@dataclass
class SinkCommit(WriterCommitMessage):
    messages: int
    batches: int


def _header_type_ok(t: DataType) -> bool:
    if isinstance(t, MapType):
        return isinstance(t.keyType, StringType) and isinstance(t.valueType, _TEXT)
    if isinstance(t, ArrayType) and isinstance(t.elementType, StructType):
        names = {f.name: f.dataType for f in t.elementType.fields}
        return set(names) == {"key", "value"} and isinstance(names["key"], StringType) and isinstance(
            names["value"], _TEXT
        )
    return False


def check_sink_schema(schema: StructType, config: SinkConfig) -> None:
    """Fail at analysis with one line if the columns cannot be written (other columns are ignored)."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}

    def bad(col: str, want: str) -> RocketMQOptionError:
        return RocketMQOptionError("sink", f"column '{col}' must be {want}, got {fields[col].simpleString()}")

    if "value" not in fields:
        raise RocketMQOptionError("sink", "the data to write needs a 'value' column (string or binary)")
    for col in ("value", "key"):
        if col in fields and not isinstance(fields[col], _TEXT):
            raise bad(col, "string or binary")
    for col in ("topic", "tags"):
        if col in fields and not isinstance(fields[col], StringType):
            raise bad(col, "string")
    if "partition" in fields and not isinstance(fields["partition"], _INTS):
        raise bad("partition", "int")
    if "headers" in fields and not _header_type_ok(fields["headers"]):
        raise bad("headers", "array<struct<key:string,value:binary>> or map<string,string>")
    if config.topic is None and "topic" not in fields:
        raise RocketMQOptionError("topic", "set the 'topic' option or give the data a 'topic' column")


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        for i, f in enumerate(batch.schema):
            if f.name.lower() == name:
                idx = i
                break
        else:
            return None
    return batch.column(idx).to_pylist()


def _text(v: Any) -> str:
    return v if isinstance(v, str) else bytes(v).decode("utf-8")


def _headers(v: Any) -> dict[str, str]:
    items = v.items() if isinstance(v, dict) else ((h["key"], h["value"]) for h in v) if v else ()
    out: dict[str, str] = {}
    for k, val in items:
        if k is None or val is None:
            continue
        if k in SYSTEM_PROPERTIES:
            raise ValueError(f"rocketmq sink: header {k!r} is a RocketMQ system property; use the column instead")
        out[k] = _text(val)
    return out


class _Sender:
    """Executor side of one task: group rows by target queue, send batches, count."""

    def __init__(self, config: SinkConfig, tx: ExactlyOnceTask | None = None) -> None:
        self.config = config
        self.session = _access.shared_session(config.nameserver, config.request_timeout_s, config.credentials)
        self.tx = tx  # exactly once: rows go out as half messages carrying tx.properties
        # (then no plain producer of the group: the broker must send its checks to a transactional one)
        self.producer = tx.producer if tx is not None else self.session.producer(config.producer_group,
                                                                                 config.send_timeout_s)
        self._queues: dict[str, list[Any]] = {}
        self._rr = itertools.count(random.randrange(1 << 16))
        self._message = _access.message_factory()
        self._hash = _access.key_hash()
        self.messages = 0
        self.batches = 0

    def queues(self, topic: str) -> list[Any]:
        qs = self._queues.get(topic)
        if qs is None:
            qs = self._queues[topic] = self.session.publish_queues(topic)
        return qs

    def write(self, batches: Iterator[pa.RecordBatch]) -> SinkCommit:
        cfg = self.config
        for batch in batches:
            n = batch.num_rows
            if not n:
                continue
            values = _column(batch, "value")
            keys = _column(batch, "key")
            tags = _column(batch, "tags")
            topics = _column(batch, "topic") if cfg.topic is None else None
            parts = _column(batch, "partition")
            headers = _column(batch, "headers")
            groups: dict[tuple[str, int], list[Any]] = {}
            make, key_hash = self._message, self._hash
            unkeyed: dict[str, list[Any]] = {}
            for i in range(n):
                value = values[i] if values is not None else None
                if value is None:
                    raise ValueError(f"rocketmq sink: row {i} of a batch has a null value; RocketMQ needs a body")
                topic = cfg.topic if topics is None else topics[i]
                if not topic:
                    raise ValueError(f"rocketmq sink: row {i} has no topic (set the 'topic' option or column)")
                key = _text(keys[i]) if keys is not None and keys[i] is not None else None
                msg = make(
                    topic,
                    value,
                    tags=tags[i] if tags is not None else None,
                    keys=key,
                    properties=self._properties(headers[i] if headers is not None else None),
                )
                part = parts[i] if parts is not None else None
                if part is not None:
                    qs = self.queues(topic)
                    if not 0 <= part < len(qs):
                        raise ValueError(
                            f"rocketmq sink: partition {part} out of range; topic {topic!r} has {len(qs)} queues"
                        )
                    groups.setdefault((topic, part), []).append(msg)
                elif key is not None:
                    qs = self.queues(topic)
                    groups.setdefault((topic, key_hash(key) % len(qs)), []).append(msg)
                else:
                    unkeyed.setdefault(topic, []).append(msg)
            jobs: list[tuple[Any, list[Any]]] = []
            size = cfg.batch_size
            for (topic, idx), msgs in groups.items():
                q = self.queues(topic)[idx]
                jobs.extend((q, msgs[j : j + size]) for j in range(0, len(msgs), size))
            for topic, msgs in unkeyed.items():
                qs = self.queues(topic)
                for j in range(0, len(msgs), size):
                    jobs.append((qs[next(self._rr) % len(qs)], msgs[j : j + size]))
            if self.tx is None:
                self.producer.send_batches(jobs)
            else:
                self.tx.send(jobs)
            self.messages += n
            self.batches += len(jobs)
        if self.tx is not None:
            self.tx.test_fail()
            return TxCommit(self.messages, self.batches, self.tx.halves)
        return SinkCommit(self.messages, self.batches)

    def _properties(self, headers: Any) -> dict[str, str] | None:
        props = _headers(headers) if headers else None
        if self.tx is None:
            return props
        return {**props, **self.tx.properties} if props else dict(self.tx.properties)


class _SendsRows:
    """The batch and the streaming writer send alike; only Spark's commit/abort signatures differ.

    At least once (default): rows are acknowledged by a broker before write() returns; commit and
    abort have nothing to do. Exactly once: see ``_exactly_once``. ``job_id`` names a batch job
    (made on the driver when Spark builds the writer, pickled to the tasks); a stream has None
    (its commit log is in the checkpoint, its ids in Spark's task properties).
    """

    job_id: str | None = None

    def __init__(self, config: SinkConfig, schema: StructType) -> None:
        self.config = config
        self.schema = schema
        if config.exactly_once and self.job_id is None and isinstance(self, RocketMQStreamWriter):
            if config.commit_log is None:
                raise RocketMQOptionError(
                    "exactlyOnce", "a stream written exactly once needs a checkpointLocation (or commitLogLocation)")

    def _log(self) -> str:
        return log_dir(self.config, self.job_id)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit | TxCommit:
        tx = ExactlyOnceTask(self.config, self._log(), self.job_id) if self.config.exactly_once else None
        return _Sender(self.config, tx).write(iterator)


class RocketMQWriter(_SendsRows, DataSourceArrowWriter):
    """``df.write.format("rocketmq")`` (append only)."""

    def __init__(self, config: SinkConfig, schema: StructType) -> None:
        self.job_id = uuid.uuid4().hex if config.exactly_once else None
        super().__init__(config, schema)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.config.exactly_once:
            ExactlyOnceDriver(self.config, self._log()).commit(messages, 0)
        # at least once: every message was acknowledged by a broker before write() returned

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.config.exactly_once:
            ExactlyOnceDriver(self.config, self._log()).abort(messages, 0, final=True)
        # at least once: sent messages cannot be taken back


class RocketMQStreamWriter(_SendsRows, DataSourceStreamArrowWriter):
    """``df.writeStream.format("rocketmq")``: each micro-batch's rows are sent before it commits."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        if self.config.exactly_once:
            ExactlyOnceDriver(self.config, self._log()).commit(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        if self.config.exactly_once:  # Spark runs the batch again after a restart: no empty record
            ExactlyOnceDriver(self.config, self._log()).abort(messages, batchId, final=False)
