"""The exactly-once sink (``exactlyOnce=true``) through Spark against a real rmqd.

Faults are real: a task attempt that sent its halves and then failed (Spark retries it), a
commit that fails before or after its log record (the query dies; a new one restarts from
the checkpoint), a broker restarted under a running stream. After each, the output topic
must hold every input row exactly once, and nothing before its batch committed. The broker
checks half messages every second here (RocketMQ's default is a minute), so the cases that
depend on a check finish quickly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rmq.testing.daemon import eventually

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]



def _sink(w: Any, namesrv: str, topic: str, **options: str) -> Any:
    w = w.format("rocketmq").option("nameserver", namesrv).option("topic", topic).option("exactlyOnce", "true")
    for k, v in options.items():
        w = w.option(k, v)
    return w


def test_batch_write_with_a_retried_task_is_exactly_once(spark: Any, tx: Any, tmp_path: Path) -> None:
    ns = tx.namesrv
    out = tx.topic("eoBatch", 4)
    rows = [(f"row-{i}", f"k{i % 7}") for i in range(400)]
    df = spark.createDataFrame(rows, "value string, key string").repartition(4)
    # partition 1's first attempt sends all its rows as halves, then fails; Spark runs it again
    _sink(df.write.mode("append"), ns, out, testFailTask="1", commitLogLocation=str(tmp_path)).save()
    assert tx.bodies(out) == sorted(r[0] for r in rows)
    assert [p.name for p in tmp_path.iterdir()] and all((p / "0.ended").exists() for p in tmp_path.iterdir())
    got = tx.pulled(out)
    assert {m.properties["sparkBatchId"] for m in got} == {"0"}
    assert len({m.properties["sparkQueryId"] for m in got}) == 1
    assert {m.properties["sparkAttempt"] for m in got if m.properties["sparkPartitionId"] == "1"} == {"1"}
    # the failed attempt's halves are rolled back by the broker's check (they are in no commit record)
    eventually(lambda: tx.pending_halves() == 0, 60, "every half message resolved")
    assert tx.bodies(out) == sorted(r[0] for r in rows)


def _stream(spark: Any, ns: str, src: str, out: str, ckpt: Path, **options: str) -> Any:
    df = (
        spark.readStream.format("rocketmq").option("nameserver", ns).option("subscribe", src)
        .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "40").load()
        .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
    )
    return _sink(df.writeStream, ns, out, checkpointLocation=str(ckpt), **options).trigger(availableNow=True).start()


def _run(query: Any) -> BaseException | None:
    try:
        query.awaitTermination(240)
    except Exception as e:  # noqa: BLE001 - the fault under test ends the query
        return e
    finally:
        query.stop()
    return query.exception()


@pytest.mark.parametrize("where", ["beforeLog", "afterLog"])
def test_stream_driver_dies_at_commit_then_restarts(spark: Any, tx: Any, tmp_path: Path,
                                                    where: str) -> None:
    ns = tx.namesrv
    src, out = tx.topic("eoIn"), tx.topic("eoOut")
    want = tx.produce_rows(src, 100)
    ckpt = tmp_path / "ckpt"
    error = _run(_stream(spark, ns, src, out, ckpt, testFailCommit=where, transactionGraceMs="3000"))
    assert error is not None and f"testFailCommit={where}" in str(error)
    if where == "beforeLog":
        assert tx.pulled(out) == [], "a consumer saw rows of a batch that never committed"
    # a new run of the query from the same checkpoint: batch 0 is replayed
    assert _run(_stream(spark, ns, src, out, ckpt, transactionGraceMs="3000")) is None
    # afterLog: the first run's halves were logged as committed; the replay's are rolled back and
    # the first run's committed when the broker checks them (after the grace)
    try:
        eventually(lambda: tx.resolved(out, want), 90, "the output resolved")
    except AssertionError:
        bodies = tx.bodies(out)
        raise AssertionError(f"pending halves {tx.pending_halves()}, {len(bodies)} rows of {len(want)}, missing "
                             f"{sorted(set(want) - set(bodies))[:5]}, extra {len(bodies) - len(set(bodies))}; log "
                             f"{sorted(p.name for p in (ckpt / 'rocketmq-sink').iterdir())}") from None
    got = tx.pulled(out)
    ids = {m.properties["sparkQueryId"] for m in got}
    assert len(ids) == 1 and "unknown" not in ids  # Spark's query id, the same after the restart
    assert {m.properties["sparkBatchId"] for m in got} == {"0", "1", "2"}
    records = sorted(p.name for p in (ckpt / "rocketmq-sink").iterdir() if p.suffix in (".commit", ".ended"))
    assert "0.commit" in records and "2.commit" in records


@pytest.mark.slow
def test_stream_survives_a_broker_restart(spark: Any, tx: Any, tmp_path: Path) -> None:
    """The broker (source and sink) restarts while batches run; the query is restarted from its
    checkpoint whenever it died, until the input is consumed. Output: each row once."""
    import threading

    ns = tx.namesrv
    src, out = tx.topic("eoRsIn"), tx.topic("eoRsOut")
    want = tx.produce_rows(src, 400)
    ckpt = tmp_path / "ckpt"
    log = ckpt / "rocketmq-sink"
    restarted = threading.Event()
    at_restart: list[int] = []

    def restart_mid_stream() -> None:
        eventually(lambda: log.is_dir() and sum(p.suffix == ".commit" for p in log.iterdir()) >= 2, 240,
                   "two batches committed")
        tx.proc.stop()
        at_restart.append(sum(p.suffix == ".commit" for p in log.iterdir()))
        tx.proc.start()
        restarted.set()

    t = threading.Thread(target=restart_mid_stream, daemon=True)
    t.start()
    errors = []
    for _ in range(6):
        error = _run(_stream(spark, ns, src, out, ckpt, transactionGraceMs="3000"))
        if error is None and restarted.is_set():
            break
        errors.append(error)
        restarted.wait(120)
    else:
        raise AssertionError(f"the query never completed after the restart: {errors}")
    t.join(5)
    print(f"commit records when the broker stopped: {at_restart}; query runs that failed: {len(errors)}")
    assert at_restart and at_restart[0] < 10, "the stream ended before the broker restarted"
    eventually(lambda: tx.resolved(out, want), 120, "the output resolved")
    assert sum(p.suffix == ".commit" for p in log.iterdir()) >= 10  # 400 rows, 40 per batch


def test_driver_commit_ends_a_new_batch_and_rolls_back_a_replay(tx: Any, tmp_path: Path) -> None:
    """The driver's side alone (executors that cannot read the log still send a replay's halves)."""
    from rmq.client import Message
    from rmq.connectors.spark import _access
    from rmq.connectors.spark._exactly_once import BATCH_PROP, LOG_PROP, ExactlyOnceDriver, TxCommit, TxLog
    from rmq.connectors.spark._options import parse_sink_options

    out = tx.topic("eoDrv")
    cfg = parse_sink_options({"nameserver": tx.namesrv, "topic": out, "exactlyOnce": "true"})
    driver = ExactlyOnceDriver(cfg, str(tmp_path))
    producer = driver.producer()
    queues = _access.shared_session(cfg.nameserver, cfg.request_timeout_s).publish_queues(out)

    def send(batch: int, body: str) -> TxCommit:
        props = {LOG_PROP: str(tmp_path), BATCH_PROP: str(batch)}
        return TxCommit(1, 1, producer.send_halves([(queues[0], Message(out, body.encode(), properties=props))]))

    TxLog(str(tmp_path)).write_commit(0, ["from-an-earlier-run"])
    driver.commit([send(0, "replayed"), None], 0)  # None: a task Spark lists as failed
    driver.commit([send(1, "new")], 1)
    assert tx.bodies(out) == ["new"]  # the new batch's END was acknowledged before commit() returned
    assert TxLog(str(tmp_path)).ended_record(1)["acked"] == [m.properties["UNIQ_KEY"] for m in tx.pulled(out)]
    eventually(lambda: tx.pending_halves() == 0, 60, "the replay's half rolled back")
    assert tx.bodies(out) == ["new"]
