"""examples/spark_pipeline.py end to end with availableNow against the suite's rmqd."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "spark_pipeline.py"
BASE_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("spark_pipeline_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pipeline_aggregates_windows_to_topic_and_parquet(spark: Any, cluster: Any, tmp_path: Path) -> None:
    orders_topic, stats_topic = cluster.topic("orders", 2), cluster.topic("order_stats", 2)
    orders = []
    for i in range(30):  # windows [0,10) [10,20) [20,30) seconds: 10 orders each
        orders.append({"order_id": f"o{i}", "customer": f"c{i % 4}", "amount": 1.5 + i, "ts": BASE_MS + i * 1000})
    orders.append({"order_id": "late", "customer": "c0", "amount": 1.0, "ts": BASE_MS + 45_000})  # closes them
    messages = [{"body": json.dumps(o).encode(), "keys": o["order_id"]} for o in orders]
    messages.insert(5, {"body": b"not json"})  # malformed input is dropped, not fatal
    cluster.produce(orders_topic, messages, batch=8)

    example = _load_example()
    args = example.parse_args(
        [
            "--nameserver", cluster.namesrv,
            "--checkpoint", str(tmp_path / "ckpt"),
            "--output", str(tmp_path / "out"),
            "--input-topic", orders_topic,
            "--output-topic", stats_topic,
            "--available-now",
        ]
    )
    queries = example.start(spark, args)
    try:
        for query in queries:
            assert query.awaitTermination(180)
    finally:
        for query in queries:
            query.stop()
    assert [q.exception() for q in queries] == [None, None]

    expected = {
        BASE_MS + w * 10_000: (10, round(sum(1.5 + i for i in range(w * 10, w * 10 + 10)), 2)) for w in range(3)
    }
    parquet = spark.read.parquet(str(tmp_path / "out")).collect()
    got = {int(r.window_start.timestamp() * 1000): (r.orders, r.revenue) for r in parquet}
    assert got == expected

    stats = spark.read.format("rocketmq").option("nameserver", cluster.namesrv).option("subscribe", stats_topic).load()
    docs = [json.loads(bytes(r.value)) for r in stats.collect()]
    assert sorted((d["orders"], d["revenue"]) for d in docs) == sorted(expected.values())
    assert {r.tags for r in stats.collect()} == {"window-stats"}
    # exactly once: the windows went out as transactional halves of the query's batches, then committed
    headers = (spark.read.format("rocketmq").option("nameserver", cluster.namesrv).option("subscribe", stats_topic)
               .option("includeHeaders", "true").load().collect())
    assert all({h.key: bytes(h.value).decode() for h in r.headers}.get("sparkQueryId") == queries[0].id
               for r in headers), headers[:1]
