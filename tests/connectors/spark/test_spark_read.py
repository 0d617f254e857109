"""Batch reads through Spark against a real rmqd: schema, offsets, options, filters, C++-produced data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]

N = 400  # messages per test topic: 4 queues x 100


def _messages(n: int = N, tags: tuple[str, ...] = ("a", "b", "c", "d")) -> list[dict[str, Any]]:
    return [
        {"body": f"v{i}".encode(), "tags": tags[i % len(tags)], "keys": f"k{i}", "properties": {"seq": str(i)}}
        for i in range(n)
    ]


def _reader(spark: Any, namesrv: str, **options: str) -> Any:
    r = spark.read.format("rocketmq").option("nameserver", namesrv)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _scan_rows(spark: Any, df: Any) -> tuple[int, int]:
    """(rows in the result, rows the rocketmq scan handed to Spark), from the executed plan's metrics."""
    rows = len(df.collect())
    plan = df._jdf.queryExecution().executedPlan()
    nodes = [plan]
    while nodes:
        node = nodes.pop()
        if node.nodeName().startswith("BatchScan"):
            return rows, int(node.metrics().apply("numOutputRows").value())
        children = node.children()
        nodes.extend(children.apply(i) for i in range(children.size()))
    raise AssertionError("no BatchScan in the plan")


def test_discovery_module_is_what_spark_looks_for(discovery_path: Path) -> None:
    """Spark imports each top-level ``pyspark_*`` module found by pkgutil and registers its DefaultSource."""
    code = textwrap.dedent(
        """
        import pkgutil, importlib
        from pyspark.sql.datasource import DataSource
        found = {}
        for info in pkgutil.iter_modules():
            if info.name.startswith("pyspark_"):
                mod = importlib.import_module(info.name)
                if issubclass(getattr(mod, "DefaultSource", object), DataSource):
                    found[mod.DefaultSource.name()] = mod.DefaultSource.__module__
        print(found)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(discovery_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert "'rocketmq': 'rmq.connectors.spark._source'" in out.stdout


def test_batch_read_schema_values_and_partitions(spark: Any, cluster: Any) -> None:
    topic = cluster.topic("read", 4)
    cluster.produce(topic, _messages())
    df = _reader(spark, cluster.namesrv, subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,broker:string,queueId:int,tags:string,msgId:string,"
        "headers:array<struct<key:string,value:binary>>>"
    )
    rows = df.collect()
    assert len(rows) == N
    by_value = {bytes(r.value): r for r in rows}
    assert set(by_value) == {f"v{i}".encode() for i in range(N)}
    r7 = by_value[b"v7"]
    assert (bytes(r7.key), r7.tags, r7.topic, r7.timestampType) == (b"k7", "d", topic, 1)
    assert [(h.key, bytes(h.value)) for h in r7.headers] == [("seq", b"7")]
    assert len(r7.msgId) == 32 and r7.timestamp.year >= 2024
    # partition = index of (broker, queueId) in the sorted queue list; offsets 0..99 per queue
    assert {(r.broker, r.queueId, r.partition) for r in rows} == {("broker-a", q, q) for q in range(4)}
    for q in range(4):
        assert sorted(r.offset for r in rows if r.queueId == q) == list(range(100))
    # the producer sent batches of 100 round robin: batch i went to queue i % 4, in order
    assert [bytes(r.value) for r in sorted((r for r in rows if r.queueId == 1), key=lambda r: r.offset)][:2] == [
        b"v100", b"v101"
    ]


def test_offset_ranges_min_partitions_and_assign(spark: Any, cluster: Any) -> None:
    topic = cluster.topic("ranges", 4)
    cluster.produce(topic, _messages())
    starting = json.dumps({topic: {"broker-a:0": 90, "broker-a:1": -2}})
    ending = json.dumps({topic: {"broker-a:0": 95, "broker-a:1": 3, "broker-a:2": 0, "broker-a:3": 0}})
    df = _reader(spark, cluster.namesrv, subscribe=topic, startingOffsets=starting, endingOffsets=ending)
    got = sorted((r.queueId, r.offset) for r in df.select("queueId", "offset").collect())
    assert got == [(0, o) for o in range(90, 95)] + [(1, o) for o in range(3)]

    split = _reader(spark, cluster.namesrv, subscribe=topic, minPartitions="16")
    assert split.rdd.getNumPartitions() == 16
    assert split.count() == N and split.select("queueId", "offset").distinct().count() == N

    assigned = _reader(spark, cluster.namesrv, assign=json.dumps({topic: [1, "broker-a:3"]}))
    assert sorted({r.queueId for r in assigned.select("queueId").collect()}) == [1, 3]
    assert assigned.count() == 200


def test_subscribe_pattern_selects_topics_by_regex(spark: Any, cluster: Any) -> None:
    a = cluster.topic("patA", 2)
    b = cluster.topic("patB", 2)
    other = cluster.topic("nopat", 2)
    for t in (a, b, other):
        cluster.produce(t, _messages(10))
    prefix = a.split("_")[1]  # pid: only this run's topics
    df = _reader(spark, cluster.namesrv, subscribePattern=rf"pat[AB]_{prefix}_\d+")
    counts = {r.topic: r["count"] for r in df.groupBy("topic").count().collect()}
    assert counts == {a: 10, b: 10}


def test_filter_pushdown_reduces_rows_the_scan_delivers(spark: Any, cluster: Any) -> None:
    topic = cluster.topic("pushdown", 4)
    cluster.produce(topic, _messages())
    df = _reader(spark, cluster.namesrv, subscribe=topic)
    from pyspark.sql.functions import col

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        rows, scanned = _scan_rows(spark, df.where(col("tags") == "a"))
        assert (rows, scanned) == (N // 4, N)  # Spark filtered: the scan delivered everything

        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        rows, scanned = _scan_rows(spark, df.where(col("tags") == "a"))
        assert (rows, scanned) == (N // 4, N // 4)  # the broker filtered
        rows, scanned = _scan_rows(spark, df.where(col("tags").isin("b", "c") & (col("offset") < 50)))
        assert rows == 2 * 50 * 4 // 4 and scanned == N // 2  # tags pushed, the offset condition kept by Spark
        # pushed tags meet the filter option: the broker gets the intersection
        both = _reader(spark, cluster.namesrv, subscribe=topic, filter="a || b")
        assert _scan_rows(spark, both.where(col("tags") == "b")) == (N // 4, N // 4)
        assert _scan_rows(spark, both.where(col("tags") == "c")) == (0, 0)
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_filter_option_tag_and_sql92(spark: Any, cluster: Any) -> None:
    topic = cluster.topic("filteropt", 2)
    cluster.produce(topic, _messages(100))
    tagged = _reader(spark, cluster.namesrv, subscribe=topic, filter="a || c")
    assert sorted({r.tags for r in tagged.collect()}) == ["a", "c"] and tagged.count() == 50
    sql = _reader(spark, cluster.namesrv, subscribe=topic, filter="seq >= 90", filterType="SQL92")
    assert sorted(int(bytes(r.value)[1:]) for r in sql.collect()) == list(range(90, 100))


def test_read_messages_produced_by_the_cpp_client(spark: Any, cluster: Any) -> None:
    pytest.importorskip("rocketmq.client")
    topic = cluster.topic("cpp", 4)
    code = textwrap.dedent(
        f"""
        from rocketmq.client import Message, Producer
        p = Producer("spark_cpp_producer")
        p.set_namesrv_addr({cluster.namesrv!r})
        p.start()
        try:
            for i in range(40):
                m = Message({topic!r})
                m.set_keys(f"ck{{i}}")
                m.set_tags("cpp")
                m.set_property("origin", "c++")
                m.set_body(f"cpp-{{i}}")
                p.send_sync(m)
        finally:
            p.shutdown()
        """
    )
    # own process: librocketmq keeps threads and global state we do not want in the test runner
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, capture_output=True)
    rows = _reader(spark, cluster.namesrv, subscribe=topic, includeHeaders="true").collect()
    assert sorted(bytes(r.value).decode() for r in rows) == sorted(f"cpp-{i}" for i in range(40))
    assert {r.tags for r in rows} == {"cpp"} and all(bytes(r.key).startswith(b"ck") for r in rows)
    assert all(("origin", b"c++") in [(h.key, bytes(h.value)) for h in r.headers] for r in rows)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t"}, "rocketmq option 'nameserver': required"),
        ({"subscribe": "t", "startingOffsets": "latest"}, "'latest' is not allowed as a batch starting offset"),
        ({"subscribe": "no_such_topic_xyz"}, "rocketmq option 'subscribe': topic 'no_such_topic_xyz' does not exist"),
        ({"subscribe": "t", "maxOfsetsPerTrigger": "5"}, "unknown option; did you mean 'maxOffsetsPerTrigger'?"),
    ],
)
def test_bad_options_fail_with_one_line(spark: Any, cluster: Any, options: dict[str, str], message: str) -> None:
    r = spark.read.format("rocketmq")
    if "nameserver" not in message:
        r = r.option("nameserver", cluster.namesrv)
    with pytest.raises(Exception) as info:
        r.options(**options).load().collect()
    # Spark wraps the worker's traceback; the error itself is one line naming the option
    lines = [ln for ln in str(info.value).splitlines() if "RocketMQOptionError: " in ln]
    assert lines, str(info.value)
    assert message in lines[0] and lines[0].split("RocketMQOptionError: ", 1)[1].startswith("rocketmq option '")


def test_explicit_register_on_a_session(spark: Any, cluster: Any) -> None:
    from rmq.connectors.spark import register

    register(spark)  # same class again: harmless, and what users with editable installs call
    topic = cluster.topic("register", 1)
    cluster.produce(topic, _messages(3))
    assert _reader(spark, cluster.namesrv, subscribe=topic).count() == 3
