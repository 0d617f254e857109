"""Exactly-once writes: half messages from the tasks, one commit decision per batch on the driver.

Each task sends its rows as transactional half messages (invisible to consumers) tagged with
the commit log directory, the query (or batch job) id, the batch id, the partition and the
attempt. Its commit message lists the halves. The driver's commit() first writes a durable
commit record (the batch id and the msg ids of the halves Spark accepted), then ends those
halves with END_TRANSACTION commit, and records which ends the broker acknowledged.

A half the driver did not end (a discarded task attempt, a driver that died, a lost END) is
resolved by the broker's transaction check, answered by :func:`decide` from the commit log
alone, so any process holding the producer group answers alike (every Python worker that
wrote or committed halves does). Spark replays a batch whose commit it did not record; a
replayed batch already in the log has its new halves rolled back instead of committed.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from rmq.connectors.spark import _access
from rmq.connectors.spark._access import HalfRef
from rmq.connectors.spark._options import SinkConfig

__all__ = ["TxCommit", "TxLog", "decide", "task_properties", "ExactlyOnceDriver", "ExactlyOnceTask", "log_dir"]

LOG_PROP = "sparkCommitLog"
QUERY_PROP = "sparkQueryId"
BATCH_PROP = "sparkBatchId"
PARTITION_PROP = "sparkPartitionId"
ATTEMPT_PROP = "sparkAttempt"
_UNIQ = "UNIQ_KEY"


@dataclass
class TxCommit(WriterCommitMessage):
    """One task's halves, for the driver to end."""

    messages: int
    batches: int
    halves: list[HalfRef] = field(default_factory=list)


def log_dir(config: SinkConfig, job_id: str | None) -> str:
    """The commit log of a query (its checkpoint) or of one batch job (a fresh directory per job)."""
    if config.commit_log and job_id is None:
        return config.commit_log
    base = config.commit_log or os.path.join(tempfile.gettempdir(), "rmq-spark-sink")
    return os.path.join(base, job_id or "unknown")


def task_properties(log: str, job_id: str | None) -> dict[str, str]:
    """The properties every half of this task carries (read from Spark's TaskContext)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    query = batch = None
    if ctx is not None:
        query = ctx.getLocalProperty("sql.streaming.queryId")
        batch = ctx.getLocalProperty("streaming.sql.batchId")
    return {
        LOG_PROP: log,
        QUERY_PROP: job_id or query or "unknown",
        BATCH_PROP: batch if job_id is None and batch is not None else "0",
        PARTITION_PROP: str(ctx.partitionId() if ctx else -1),
        ATTEMPT_PROP: str(ctx.attemptNumber() if ctx else 0),
    }


class TxLog:
    """``<batch>.commit`` (written before any END) and ``<batch>.ended`` (the acknowledged ends),
    each written whole (temporary file, fsync, rename), so a reader sees all of a record or none."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def _write(self, name: str, record: Mapping[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / f".{name}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w") as f:
            json.dump(record, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path / name)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _read(self, name: str) -> dict[str, Any] | None:
        try:
            with open(self.path / name) as f:
                return json.load(f)  # type: ignore[no-any-return]
        except FileNotFoundError:
            return None

    def commit_record(self, batch: int) -> dict[str, Any] | None:
        return self._read(f"{batch}.commit")

    def ended_record(self, batch: int) -> dict[str, Any] | None:
        return self._read(f"{batch}.ended")

    def write_commit(self, batch: int, msg_ids: Sequence[str]) -> float:
        now = time.time()
        self._write(f"{batch}.commit", {"batch": batch, "time": now, "halves": list(msg_ids)})
        return now

    def write_ended(self, batch: int, acked: Sequence[str]) -> None:
        self._write(f"{batch}.ended", {"batch": batch, "acked": sorted(acked)})

    def latest(self) -> int:
        """The highest batch with a commit record (-1 when none)."""
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return -1
        return max((int(n.split(".")[0]) for n in names if n.endswith(".commit") and n[0].isdigit()), default=-1)

    def fail_once(self, batch: int, where: str) -> bool:
        """Testing hook: True the first time ``where`` is reached for ``batch`` (a marker file remembers)."""
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(self.path / f"{batch}.failed-{where}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True


def decide(props: Mapping[str, str], grace_s: float) -> bool | None:
    """A broker's check of a half: True commit, False roll back, None ask again later.

    Listed in its batch's commit record: commit, unless the driver's END for it was
    acknowledged (then this is the check's copy of a half already committed: roll it back),
    or the driver may still be ending it (no ``ended`` record yet, record younger than the
    grace). Not listed: a discarded attempt or a replayed duplicate, roll back. No record: the
    batch is in flight (ask later) unless a later batch has a record (then it was abandoned).
    """
    path, uniq = props.get(LOG_PROP), props.get(_UNIQ)
    try:
        batch = int(props.get(BATCH_PROP, ""))
    except ValueError:
        return None
    if not path or not uniq:
        return None
    txlog = TxLog(path)
    record = txlog.commit_record(batch)
    if record is None:
        return False if txlog.latest() > batch else None
    if uniq not in set(record.get("halves", ())):
        return False
    ended = txlog.ended_record(batch)
    if ended is None:
        return None if time.time() - float(record.get("time", 0)) < grace_s else True
    return uniq not in set(ended.get("acked", ()))


class ExactlyOnceDriver:
    """The driver's side: commit (log, then end) or abort the halves of one batch."""

    def __init__(self, config: SinkConfig, log: str) -> None:
        self.config = config
        self.log = TxLog(log)

    def producer(self) -> _access.TxProducer:
        cfg = self.config
        session = _access.shared_session(cfg.nameserver, cfg.request_timeout_s, cfg.credentials)
        grace = cfg.grace_s
        return session.tx_producer(cfg.producer_group, cfg.send_timeout_s, lambda p: decide(p, grace))

    def _test_fail(self, batch: int, where: str) -> None:
        if self.config.test_fail_commit == where and self.log.fail_once(batch, where):
            raise RuntimeError(f"rocketmq sink: testFailCommit={where}: commit of batch {batch} fails once")

    def commit(self, messages: Sequence[WriterCommitMessage | None], batch: int) -> None:
        halves = [h for m in messages if isinstance(m, TxCommit) for h in m.halves]
        producer = self.producer()
        self._test_fail(batch, "beforeLog")
        if self.log.commit_record(batch) is not None:
            # a replay of a batch already committed: its rows are out once already
            producer.end(halves, commit=False)
            return
        written = self.log.write_commit(batch, [h.msg_id for h in halves])
        self._test_fail(batch, "afterLog")
        # no END starts once checks may take over (after the grace), leaving time for the last to land
        cfg = self.config
        acked = producer.end(halves, commit=True, deadline=written + max(cfg.grace_s - cfg.request_timeout_s,
                                                                          cfg.grace_s / 2))
        self.log.write_ended(batch, sorted(acked))

    def abort(self, messages: Sequence[WriterCommitMessage | None], batch: int, final: bool) -> None:
        """Roll back the listed halves. ``final`` (a batch job, never retried): also log an empty
        commit, so checks roll back the halves of attempts Spark did not list."""
        halves = [h for m in messages if isinstance(m, TxCommit) for h in m.halves]
        record = self.log.commit_record(batch)
        if record is not None:
            # commit() logged this batch before it failed: the batch is decided, its logged halves are
            # committed by the checks (an abort after the record must not roll them back)
            logged = set(record.get("halves", ()))
            halves = [h for h in halves if h.msg_id not in logged]
        elif final:
            self.log.write_commit(batch, [])
            self.log.write_ended(batch, [])
        self.producer().end(halves, commit=False)


class ExactlyOnceTask:
    """A task's half messages: tagged with the query/job, batch, partition and attempt; listed for the driver.

    A replay of a batch the log already holds sends nothing (when this worker can read the log;
    otherwise the driver rolls the replay's halves back)."""

    def __init__(self, config: SinkConfig, log: str, job_id: str | None) -> None:
        self.properties = task_properties(log, job_id)
        self.fail = (config.test_fail_task is not None and self.properties[ATTEMPT_PROP] == "0"
                     and self.properties[PARTITION_PROP] == str(config.test_fail_task))
        self.producer = ExactlyOnceDriver(config, log).producer()
        self.committed = TxLog(log).commit_record(int(self.properties[BATCH_PROP])) is not None
        self.halves: list[HalfRef] = []

    def test_fail(self) -> None:
        if self.fail:
            raise RuntimeError(f"rocketmq sink: testFailTask: attempt 0 of partition {self.properties[PARTITION_PROP]}"
                               f" fails after sending {len(self.halves)} halves")

    def send(self, jobs: list[tuple[Any, list[Any]]]) -> None:
        if not self.committed:
            self.halves.extend(self.producer.send_halves([(q, m) for q, msgs in jobs for m in msgs]))
