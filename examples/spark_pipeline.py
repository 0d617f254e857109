"""A streaming pipeline on RocketMQ with PySpark: JSON orders in, 10-second window stats out, exactly once.

Reads the ``orders`` topic (JSON like ``{"order_id": "o1", "customer": "c7", "amount": 12.5,
"ts": 1700000000123}``, ``ts`` in epoch milliseconds), parses it, aggregates per 10-second
event-time window (watermark 10 s), and writes each finished window to two sinks, each a query
with its own checkpoint under ``--checkpoint``:

* the ``order_stats`` topic (JSON, keyed by window start) through the rocketmq sink in exactly-once
  mode: a task retried by Spark, a lost executor or a driver restarted from the checkpoint never
  puts a window twice (``--at-least-once`` sends plainly, faster, duplicates possible on retries);
* Parquet files through Spark's file sink, whose own log makes it exactly once too.

    python examples/spark_pipeline.py --nameserver 127.0.0.1:9876 \\
        --checkpoint /tmp/orders-ckpt --output /tmp/order-stats [--available-now]

With ``--available-now`` it processes what is in the topic and exits; otherwise it runs
until interrupted. Restarting with the same ``--checkpoint`` continues where it stopped.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

ORDER_SCHEMA = "order_id string, customer string, amount double, ts long"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nameserver", required=True, help="RocketMQ name server, host:port")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory (the query's progress)")
    p.add_argument("--output", required=True, help="Parquet output directory")
    p.add_argument("--input-topic", default="orders")
    p.add_argument("--output-topic", default="order_stats")
    p.add_argument("--starting-offsets", default="earliest", help="earliest | latest (first run only)")
    p.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    p.add_argument("--max-per-trigger", type=int, default=None, help="messages per micro-batch")
    p.add_argument("--at-least-once", action="store_true", help="plain sends to the topic (no transactions)")
    return p.parse_args(argv)


def build_stats(spark: Any, args: argparse.Namespace) -> Any:
    """The streaming DataFrame of finished windows."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("rocketmq")
        .option("nameserver", args.nameserver)
        .option("subscribe", args.input_topic)
        .option("startingOffsets", args.starting_offsets)
    )
    if args.max_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_per_trigger))
    orders = (
        reader.load()
        .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
        .select("o.*")
        .where(F.col("order_id").isNotNull() & F.col("amount").isNotNull() & F.col("ts").isNotNull())
        .withColumn("event_time", F.timestamp_millis("ts"))
    )
    return (
        orders.withWatermark("event_time", "10 seconds")
        .groupBy(F.window("event_time", "10 seconds"))
        .agg(
            F.count("*").alias("orders"),
            F.round(F.sum("amount"), 2).alias("revenue"),
            F.round(F.max("amount"), 2).alias("max_amount"),
            F.approx_count_distinct("customer").alias("customers"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "orders",
            "revenue",
            "max_amount",
            "customers",
        )
    )


def start(spark: Any, args: argparse.Namespace) -> list[Any]:
    """Start both queries (topic, Parquet) over the same finished windows; returns them."""
    from pyspark.sql import functions as F

    stats = build_stats(spark, args)

    def trigger(writer: Any) -> Any:
        return writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime="2 seconds")

    to_topic = (
        stats.select(
            F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("key"),
            F.to_json(F.struct(*stats.columns)).alias("value"),
            F.lit("window-stats").alias("tags"),
        )
        .writeStream.format("rocketmq")
        .outputMode("append")
        .option("nameserver", args.nameserver)
        .option("topic", args.output_topic)
        .option("exactlyOnce", str(not args.at_least_once).lower())
        .option("checkpointLocation", f"{args.checkpoint}/topic")
    )
    to_parquet = (
        stats.writeStream.format("parquet")
        .outputMode("append")
        .option("path", args.output)
        .option("checkpointLocation", f"{args.checkpoint}/parquet")
    )
    return [trigger(to_topic).start(), trigger(to_parquet).start()]


def main(argv: Sequence[str] | None = None) -> None:
    from pyspark.sql import SparkSession

    from rmq.connectors.spark import register

    args = parse_args(argv)
    spark = (
        SparkSession.builder.appName("rocketmq-orders")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    register(spark)  # Spark also finds it by itself when rmq is installed (not editable)
    queries = start(spark, args)
    try:
        for query in queries:
            query.awaitTermination()
    except KeyboardInterrupt:
        for query in queries:
            query.stop()


if __name__ == "__main__":
    main()
