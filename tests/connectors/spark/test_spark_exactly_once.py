"""The exactly-once sink (``exactlyOnce=true``) through Spark against a real rmqd.

Faults are real: a task attempt that sent its halves and then failed (Spark retries it), a
commit that fails before or after its log record (the query dies; a new one restarts from
the checkpoint), a broker restarted under a running stream. After each, the output topic
must hold every input row exactly once, and nothing before its batch committed. The broker
checks half messages every second here (RocketMQ's default is a minute), so the cases that
depend on a check finish quickly.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq.testing.daemon import RmqdProcess, eventually

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

_names = itertools.count()
HALF, OP = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"


@pytest.fixture(scope="module")
def txbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RmqdProcess]:
    """An rmqd that checks halves often (and does not give up on them) so fault cases resolve in seconds."""
    proc = RmqdProcess(tmp_path_factory.mktemp("rmqd-eo"), broker_conf={
        "transactionCheckInterval": 1000, "transactionTimeOut": 1000, "transactionCheckMax": 10_000})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _topic(proc: RmqdProcess, prefix: str, queues: int = 2) -> str:
    from rmq.client.blocking import Admin

    name = f"{prefix}_{os.getpid()}_{next(_names)}"
    with Admin(namesrv_addr=proc.namesrv_addr) as admin:
        admin.create_topic(name, queues)
    return name


def pulled(namesrv: str, topic: str) -> list[Any]:
    """Every message a consumer can pull from ``topic`` now (rmq.client, no Spark)."""
    from rmq.client import PullStatus
    from rmq.client.blocking import PullConsumer

    out: list[Any] = []
    with PullConsumer("eo_test_reader", namesrv_addr=namesrv) as c:
        for mq in c.fetch_queues(topic):
            off = c.min_offset(mq)
            while True:
                res = c.pull(mq, off, 32)
                if res.status is not PullStatus.FOUND:
                    break
                out.extend(res.messages)
                off = res.next_begin_offset
    return out


def pending_halves(namesrv: str) -> int:
    """Half messages the broker has no outcome for yet (half-topic offsets without an op record)."""
    halves = {m.queue_offset for m in pulled(namesrv, HALF)}
    ops = {int(m.body.decode()) for m in pulled(namesrv, OP)}
    return len(halves - ops)


def bodies(namesrv: str, topic: str) -> list[str]:
    return sorted(m.body.decode() for m in pulled(namesrv, topic))


def _sink(w: Any, namesrv: str, topic: str, **options: str) -> Any:
    w = w.format("rocketmq").option("nameserver", namesrv).option("topic", topic).option("exactlyOnce", "true")
    for k, v in options.items():
        w = w.option(k, v)
    return w


def test_batch_write_with_a_retried_task_is_exactly_once(spark: Any, txbroker: RmqdProcess) -> None:
    ns = txbroker.namesrv_addr
    out = _topic(txbroker, "eoBatch", 4)
    rows = [(f"row-{i}", f"k{i % 7}") for i in range(400)]
    df = spark.createDataFrame(rows, "value string, key string").repartition(4)
    # partition 1's first attempt sends all its rows as halves, then fails; Spark runs it again
    _sink(df.write.mode("append"), ns, out, testFailTask="1").save()
    assert bodies(ns, out) == sorted(r[0] for r in rows)
    got = pulled(ns, out)
    assert {m.properties["sparkBatchId"] for m in got} == {"0"}
    assert len({m.properties["sparkQueryId"] for m in got}) == 1
    assert {m.properties["sparkAttempt"] for m in got if m.properties["sparkPartitionId"] == "1"} == {"1"}
    # the failed attempt's halves are rolled back by the broker's check (they are in no commit record)
    eventually(lambda: pending_halves(ns) == 0, 60, "every half message resolved")
    assert bodies(ns, out) == sorted(r[0] for r in rows)


def _stream(spark: Any, ns: str, src: str, out: str, ckpt: Path, **options: str) -> Any:
    df = (
        spark.readStream.format("rocketmq").option("nameserver", ns).option("subscribe", src)
        .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "40").load()
        .selectExpr("key", "upper(CAST(value AS STRING)) AS value")
    )
    return _sink(df.writeStream, ns, out, checkpointLocation=str(ckpt), **options).trigger(availableNow=True).start()


def _produce(ns: str, topic: str, n: int) -> list[str]:
    from rmq.client import Message
    from rmq.client.blocking import Producer

    with Producer("eo_test_producer", namesrv_addr=ns) as p:
        for i in range(0, n, 20):
            p.send_batch([Message(topic, f"in-{j}".encode(), keys=f"k{j % 5}") for j in range(i, min(n, i + 20))])
    return sorted(f"IN-{j}" for j in range(n))


def _run(query: Any) -> BaseException | None:
    try:
        query.awaitTermination(240)
    except Exception as e:  # noqa: BLE001 - the fault under test ends the query
        return e
    finally:
        query.stop()
    return query.exception()


@pytest.mark.parametrize("where", ["beforeLog", "afterLog"])
def test_stream_driver_dies_at_commit_then_restarts(spark: Any, txbroker: RmqdProcess, tmp_path: Path,
                                                    where: str) -> None:
    ns = txbroker.namesrv_addr
    src, out = _topic(txbroker, "eoIn"), _topic(txbroker, "eoOut")
    want = _produce(ns, src, 100)
    ckpt = tmp_path / "ckpt"
    error = _run(_stream(spark, ns, src, out, ckpt, testFailCommit=where, transactionGraceMs="3000"))
    assert error is not None and f"testFailCommit={where}" in str(error)
    if where == "beforeLog":
        assert pulled(ns, out) == [], "a consumer saw rows of a batch that never committed"
    # a new run of the query from the same checkpoint: batch 0 is replayed
    assert _run(_stream(spark, ns, src, out, ckpt, transactionGraceMs="3000")) is None
    # afterLog: the first run's halves were logged as committed; the replay's are rolled back and
    # the first run's committed when the broker checks them (after the grace)
    eventually(lambda: pending_halves(ns) == 0 and bodies(ns, out) == want, 90, "the output resolved")
    assert bodies(ns, out) == want
    records = sorted(p.name for p in (ckpt / "rocketmq-sink").iterdir() if p.suffix in (".commit", ".ended"))
    assert "0.commit" in records and "2.commit" in records


@pytest.mark.slow
def test_stream_survives_a_broker_restart(spark: Any, txbroker: RmqdProcess, tmp_path: Path) -> None:
    """The broker (source and sink) restarts while batches run; the query is restarted from its
    checkpoint whenever it died, until the input is consumed. Output: each row once."""
    import threading

    ns = txbroker.namesrv_addr
    src, out = _topic(txbroker, "eoRsIn"), _topic(txbroker, "eoRsOut")
    want = _produce(ns, src, 400)
    ckpt = tmp_path / "ckpt"
    log = ckpt / "rocketmq-sink"
    restarted = threading.Event()
    at_restart: list[int] = []

    def restart_mid_stream() -> None:
        eventually(lambda: log.is_dir() and sum(p.suffix == ".commit" for p in log.iterdir()) >= 2, 240,
                   "two batches committed")
        txbroker.stop()
        at_restart.append(sum(p.suffix == ".commit" for p in log.iterdir()))
        txbroker.start()
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
    eventually(lambda: pending_halves(ns) == 0 and bodies(ns, out) == want, 120, "the output resolved")
    assert sum(p.suffix == ".commit" for p in log.iterdir()) >= 10  # 400 rows, 40 per batch
