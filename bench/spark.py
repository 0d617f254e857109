"""Throughput of the Spark connector: batch read and sink, rows/s (figures printed, never asserted).

    python bench/spark.py                        # starts its own rmqd in a temp dir
    python bench/spark.py --messages 1000000 --size 100 --queues 8 --master local[2]
    python bench/spark.py --nameserver 127.0.0.1:9876 --topic bench_existing --skip-produce

Steps: produce the topic with the client's batch sends (time printed), read it back whole
with ``spark.read.format("rocketmq")`` (a warm-up pass, then the timed pass), then write
the same number of rows with the sink. The reader side is also timed without Spark
(the connector's pull + Arrow conversion in one process) to show Spark's share.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from broker import process_cpu  # bench/ is on sys.path when run as a script


def produce(namesrv: str, topic: str, n: int, size: int, queues: int) -> float:
    """Send n messages of ``size`` bytes in batches, several batches in flight; returns seconds."""
    from rmq.client import Admin, Message, Producer

    async def run() -> float:
        async with Admin(namesrv_addr=namesrv) as admin:
            await admin.create_topic(topic, queues)
        body = b"x" * size
        async with Producer("bench_spark_producer", namesrv_addr=namesrv) as p:
            mqs = sorted(await p.fetch_publish_queues(topic))
            batch = 500
            slots = asyncio.Semaphore(16)
            t0 = time.perf_counter()

            async def send(i: int) -> None:
                async with slots:
                    msgs = [Message(topic, body, keys=f"k{j}") for j in range(i, min(i + batch, n))]
                    await p.send_batch(msgs, queue=mqs[(i // batch) % len(mqs)])

            await asyncio.gather(*(send(i) for i in range(0, n, batch)))
            return time.perf_counter() - t0

    return asyncio.run(run())


def read_without_spark(namesrv: str, topic: str) -> tuple[int, float]:
    """The connector's own read path (pull spans + Arrow batches) for every queue, in this process."""
    from rmq.connectors.spark._access import Session
    from rmq.connectors.spark._offsets import partition_indexes
    from rmq.connectors.spark._reader import RangePartition, ReadSpec, read_range
    from rmq.connectors.spark._schema import arrow_schema

    with Session(namesrv) as s:
        qs = s.queues(topic)
        bounds = s.bounds(qs)
    idx = partition_indexes(qs)
    spec = ReadSpec(namesrv, 10.0, None, "TAG", None, True, False, False, 256)
    schema = arrow_schema(False)
    t0 = time.perf_counter()
    rows = 0
    for q in qs:
        part = RangePartition(q.topic, q.broker, q.queue_id, idx[q], bounds[q].min, bounds[q].max)
        rows += sum(b.num_rows for b in read_range(spec, part, schema))
    return rows, time.perf_counter() - t0


def broker_cpu(pid: int | None) -> float:
    """CPU seconds of our own rmqd so far; NaN for a cluster we did not start."""
    return float("nan") if pid is None else process_cpu(pid)


def served(pid: int | None, cpu0: float, rows: int, secs: float) -> str:
    """What serving the read cost rmqd: on a shared 2-core box it bounds the whole pipeline."""
    cpu = broker_cpu(pid) - cpu0
    if pid is None or cpu != cpu:
        return ""
    return f"  (rmqd {cpu / max(rows, 1) * 1e6:.2f} µs CPU/row, {cpu / secs * 100:.0f}% of a core)"


def spark_session(master: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from rmq.connectors.spark import register

    spark = (
        SparkSession.builder.master(master)
        .appName("rmq-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def spark_read(spark: Any, namesrv: str, topic: str) -> tuple[int, int, float]:
    from pyspark.sql import functions as F

    df = spark.read.format("rocketmq").option("nameserver", namesrv).option("subscribe", topic).load()
    t0 = time.perf_counter()
    row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes"), F.max("offset")).first()
    return int(row["n"]), int(row["bytes"] or 0), time.perf_counter() - t0


def spark_write(spark: Any, namesrv: str, topic: str, n: int, size: int, partitions: int,
                exactly_once: bool = False) -> float:
    from rmq.client.blocking import Admin

    with Admin(namesrv_addr=namesrv) as admin:
        admin.create_topic(topic, 8)
    df = spark.range(0, n, 1, partitions).selectExpr(
        "CAST(id AS STRING) AS key", f"CAST(repeat('y', {size}) AS BINARY) AS value"
    )
    log = tempfile.mkdtemp(prefix="rmq-spark-bench-log-")
    t0 = time.perf_counter()
    (df.write.format("rocketmq").option("nameserver", namesrv).option("topic", topic)
     .option("exactlyOnce", str(exactly_once).lower()).option("commitLogLocation", log).mode("append").save())
    secs = time.perf_counter() - t0
    shutil.rmtree(log, ignore_errors=True)
    return secs


WARM_UP_S = 10.0


def stream_latency(spark: Any, namesrv: str, rate: float, seconds: float, exactly_once: bool) -> list[float]:
    """Produce at ``rate`` msgs/s (send time in the body), run source → upper() → sink as a stream
    (processingTime 0), and time each output row's arrival at a pulling consumer: end-to-end ms."""
    import threading

    from rmq.client import Message, PullStatus
    from rmq.client.blocking import Admin, Producer, PullConsumer

    tag = f"{os.getpid()}_{int(exactly_once)}_{time.monotonic_ns()}"
    src, dst = f"bench_lat_in_{tag}", f"bench_lat_out_{tag}"
    with Admin(namesrv_addr=namesrv) as admin:
        admin.create_topic(src, 2)
        admin.create_topic(dst, 2)
    ckpt = tempfile.mkdtemp(prefix="rmq-spark-lat-")
    query = (spark.readStream.format("rocketmq").option("nameserver", namesrv).option("subscribe", src).load()
             .selectExpr("upper(CAST(value AS STRING)) AS value")
             .writeStream.format("rocketmq").option("nameserver", namesrv).option("topic", dst)
             .option("exactlyOnce", str(exactly_once).lower()).option("checkpointLocation", ckpt).start())
    lat: list[float] = []
    stop = threading.Event()

    def consume() -> None:
        with PullConsumer("bench_lat_reader", namesrv_addr=namesrv) as c:
            offs = {mq: 0 for mq in c.fetch_queues(dst)}
            while not stop.is_set():
                for mq, off in offs.items():
                    res = c.pull(mq, off, 64)
                    if res.status is PullStatus.FOUND:
                        now = time.time() * 1000
                        lat.extend(now - float(m.body) for m in res.messages if not m.body.upper().startswith(b"W"))
                        offs[mq] = res.next_begin_offset
                time.sleep(0.005)

    try:
        eventually_active(query)
        t = threading.Thread(target=consume, daemon=True)
        t.start()
        with Producer("bench_lat_producer", namesrv_addr=namesrv) as p:
            t0 = time.monotonic()
            warm = int(rate * WARM_UP_S)  # the first rows meet cold Python workers: sent, not counted
            for i in range(warm + int(rate * seconds)):
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                p.send(Message(src, f"{'w' if i < warm else ''}{time.time() * 1000:.3f}".encode()))
        time.sleep(5)  # the last rows' way through
        stop.set()
        t.join(10)
    finally:
        query.stop()
        shutil.rmtree(ckpt, ignore_errors=True)
    return sorted(lat)


def eventually_active(query: Any) -> None:
    """Wait until the stream ran its first (empty) batch: Spark's start-up is not latency."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not query.recentProgress:
        time.sleep(0.2)


def pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Spark connector throughput")
    ap.add_argument("--nameserver", help="use this cluster instead of starting an rmqd")
    ap.add_argument("--topic", default=None)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100, help="body bytes")
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--skip-produce", action="store_true")
    ap.add_argument("--skip-write", action="store_true")
    ap.add_argument("--eo-messages", type=int, default=100_000,
                    help="rows for the exactly-once sink pass (one half message per request: slower)")
    ap.add_argument("--latency-rate", type=float, default=200.0, help="streaming latency: input msgs/s")
    ap.add_argument("--latency-seconds", type=float, default=30.0, help="streaming latency: seconds of input")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--max-transfer", type=int, default=None,
                    help="own rmqd only: maxTransferCountOnMessageInMemory (messages per pull; broker default 32)")
    args = ap.parse_args(argv)

    proc = None
    if args.nameserver is None:
        from rmq.testing.daemon import RmqdProcess

        conf: dict[str, Any] = {"mappedFileSizeCommitLog": 1024 * 1024 * 1024}
        if args.max_transfer:
            conf["maxTransferCountOnMessageInMemory"] = args.max_transfer
            conf["maxTransferBytesOnMessageInMemory"] = max(256 * 1024, args.max_transfer * (args.size + 200))
        proc = RmqdProcess(Path(tempfile.mkdtemp(prefix="rmq-spark-bench-")), broker_conf=conf)
        proc.start()
        namesrv = proc.namesrv_addr
    else:
        namesrv = args.nameserver
    topic = args.topic or f"bench_spark_{os.getpid()}"
    n, size = args.messages, args.size
    try:
        per_pull = args.max_transfer or "broker default"
        print(f"rmq spark bench: {n:,} messages x {size} B, {args.queues} queues, {args.master}, "
              f"namesrv {namesrv}, messages per pull: {per_pull}")
        if not args.skip_produce:
            secs = produce(namesrv, topic, n, size, args.queues)
            print(f"produce (client batch send):   {secs:7.2f} s  {n / secs:12,.0f} msgs/s")
        pid = proc.proc.pid if proc is not None and proc.proc is not None else None
        c0 = broker_cpu(pid)
        rows, secs = read_without_spark(namesrv, topic)
        print(f"read, connector alone (1 proc): {secs:7.2f} s  {rows / secs:12,.0f} rows/s{served(pid, c0, rows, secs)}")
        spark = spark_session(args.master)
        try:
            spark_read(spark, namesrv, topic)  # warm-up: JVM, Python workers, connections
            c0 = broker_cpu(pid)
            rows, nbytes, secs = spark_read(spark, namesrv, topic)
            print(f"spark batch read:               {secs:7.2f} s  {rows / secs:12,.0f} rows/s"
                  f"  {nbytes / secs / 1e6:8.1f} MB/s  ({rows:,} rows){served(pid, c0, rows, secs)}")
            if not args.skip_write:
                secs = spark_write(spark, namesrv, f"{topic}_sink", n, size, spark.sparkContext.defaultParallelism)
                print(f"spark sink (write):             {secs:7.2f} s  {n / secs:12,.0f} rows/s")
                m = min(n, args.eo_messages)
                secs = spark_write(spark, namesrv, f"{topic}_sink_alo", m, size, spark.sparkContext.defaultParallelism)
                print(f"spark sink at least once:       {secs:7.2f} s  {m / secs:12,.0f} rows/s  ({m:,} rows)")
                secs = spark_write(spark, namesrv, f"{topic}_sink_eo", m, size, spark.sparkContext.defaultParallelism,
                                   exactly_once=True)
                print(f"spark sink exactly once:        {secs:7.2f} s  {m / secs:12,.0f} rows/s  ({m:,} rows)")
            if not args.skip_latency:
                for eo in (False, True):
                    lat = stream_latency(spark, namesrv, args.latency_rate, args.latency_seconds, eo)
                    print(f"stream e2e latency {'exactly once ' if eo else 'at least once'} at "
                          f"{args.latency_rate:g} msgs/s: p50 {pct(lat, 0.5):6.0f} ms  p90 {pct(lat, 0.9):6.0f} ms  "
                          f"p99 {pct(lat, 0.99):6.0f} ms  ({len(lat):,} rows)")
        finally:
            spark.stop()
    finally:
        if proc is not None:
            proc.stop()
            shutil.rmtree(proc.workdir, ignore_errors=True)  # GiB of store: never left behind


if __name__ == "__main__":
    main()
