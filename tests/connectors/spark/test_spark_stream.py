"""Structured Streaming through Spark against a real rmqd: availableNow, checkpoints, limits, group offsets."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def _msgs(start: int, n: int) -> list[dict[str, Any]]:
    return [{"body": f"m{i}".encode(), "tags": "t", "keys": f"k{i}"} for i in range(start, start + n)]


# Spark starts a streaming source's Python worker with a fixed 10 s limit for it to connect back
# (PythonWorkerFactory.createSimpleWorker, not configurable): on a busy shared machine a Python start-up
# can take longer. The query fails at init, before any batch or checkpoint write, so it is started again.
WORKER_START = "Python worker failed to connect back"


def _run(spark: Any, namesrv: str, topic: str, out: Path, checkpoint: Path, **options: str) -> list[int]:
    """One availableNow run into a Parquet sink; returns the input rows of each micro-batch."""
    for attempt in range(3):
        try:
            return _run_once(spark, namesrv, topic, out, checkpoint, **options)
        except Exception as e:  # noqa: BLE001 - only Spark's worker start-up limit is retried
            if WORKER_START not in str(e) or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _run_once(spark: Any, namesrv: str, topic: str, out: Path, checkpoint: Path, **options: str) -> list[int]:
    reader = spark.readStream.format("rocketmq").option("nameserver", namesrv).option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (
        reader.load()
        .selectExpr("CAST(value AS STRING) AS v", "queueId", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "the availableNow query did not finish"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def _output(spark: Any, out: Path) -> list[tuple[str, int, int]]:
    return [(r.v, r.queueId, r.offset) for r in spark.read.parquet(str(out)).collect()]


def test_available_now_with_checkpoint_reads_every_message_exactly_once(
    spark: Any, cluster: Any, tmp_path: Path
) -> None:
    topic = cluster.topic("stream", 4)
    group = f"{topic}_group"
    cluster.produce(topic, _msgs(0, 200), batch=50)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    opts = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "70", "groupId": group}

    batches = _run(spark, cluster.namesrv, topic, out, ckpt, **opts)
    assert sum(batches) == 200 and max(batches) <= 70 and len(batches) == 3
    first = _output(spark, out)
    assert sorted(v for v, _, _ in first) == sorted(f"m{i}" for i in range(200))

    # stop, produce more, restart the same query: only the new messages, once each
    cluster.produce(topic, _msgs(200, 130), batch=50)
    # meanwhile an operator sees the stopped query's lag: the groupId mirror of its checkpoint
    from rmq.testing.daemon import eventually
    from rmq.testing.rmqadmin import js

    eventually(lambda: js("consumerProgress", "-n", cluster.namesrv, "-g", group, "-t", topic)["diffTotal"] == 130,
               30, "rmqadmin consumerProgress shows the stopped query's lag of 130")
    batches = _run(spark, cluster.namesrv, topic, out, ckpt, **opts)
    assert sum(batches) == 130
    rows = _output(spark, out)
    assert len(rows) == 330
    assert sorted(v for v, _, _ in rows) == sorted(f"m{i}" for i in range(330))
    assert len({(q, o) for _, q, o in rows}) == 330

    # a run with nothing new reads nothing
    assert _run(spark, cluster.namesrv, topic, out, ckpt, **opts) == []

    # groupId mirrored the checkpoint's progress to the broker (for lag monitoring)
    from rmq.client.blocking import Admin

    with Admin(namesrv_addr=cluster.namesrv) as admin:
        deadline = time.monotonic() + 10
        while True:
            progress = admin.consumer_progress(group, topic)
            if sum(p.lag for p in progress) == 0 and progress or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert sorted((p.queue.queue_id, p.committed) for p in progress) == sorted(
        (p.queue.queue_id, p.max_offset) for p in progress
    )
    assert sum(p.max_offset for p in progress) == 330


def test_starting_latest_and_starting_timestamp(spark: Any, cluster: Any, tmp_path: Path) -> None:
    topic = cluster.topic("latest", 2)
    cluster.produce(topic, _msgs(0, 40), batch=20)
    time.sleep(0.05)
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    cluster.produce(topic, _msgs(40, 30), batch=15)

    by_time = _run(spark, cluster.namesrv, topic, tmp_path / "t_out", tmp_path / "t_ck", startingTimestamp=str(boundary))
    assert sum(by_time) == 30
    assert sorted(v for v, _, _ in _output(spark, tmp_path / "t_out")) == sorted(f"m{i}" for i in range(40, 70))

    # latest: the first run only pins the current end; what comes after it is read by the next run
    assert _run(spark, cluster.namesrv, topic, tmp_path / "l_out", tmp_path / "l_ck") == []
    cluster.produce(topic, _msgs(70, 10), batch=5)
    assert sum(_run(spark, cluster.namesrv, topic, tmp_path / "l_out", tmp_path / "l_ck")) == 10
    assert sorted(v for v, _, _ in _output(spark, tmp_path / "l_out")) == sorted(f"m{i}" for i in range(70, 80))


def test_recreated_topic_is_data_loss_unless_allowed(spark: Any, cluster: Any, tmp_path: Path) -> None:
    from rmq.client.blocking import Admin

    topic = cluster.topic("loss", 1)
    cluster.produce(topic, _msgs(0, 30), batch=30)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    assert sum(_run(spark, cluster.namesrv, topic, out, ckpt, startingOffsets="earliest")) == 30

    with Admin(namesrv_addr=cluster.namesrv) as admin:
        admin.delete_topic(topic)
        admin.create_topic(topic, 1)
    cluster.produce(topic, _msgs(100, 5), batch=5)  # offsets restart at 0: below what the checkpoint holds

    with pytest.raises(Exception, match=r"queue .*:0 ends at offset 5 but the query already read up to 30"):
        _run(spark, cluster.namesrv, topic, out, ckpt, startingOffsets="earliest")
    assert sum(_run(spark, cluster.namesrv, topic, out, ckpt, failOnDataLoss="false")) == 5
    values = [v for v, _, _ in _output(spark, out)]
    assert sorted(values) == sorted([f"m{i}" for i in range(30)] + [f"m{i}" for i in range(100, 105)])
