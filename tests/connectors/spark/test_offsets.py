"""Offset math and option parsing without Spark or a broker (pure functions)."""

from __future__ import annotations

import json

import pytest

from rmq.connectors.spark._offsets import (
    Bounds,
    DataLossError,
    QueueRef,
    check_data_loss,
    offsets_from_json,
    offsets_to_json,
    partition_indexes,
    plan_ranges,
    rate_limit,
    resolve,
)
from rmq.connectors.spark._options import (
    OffsetSpec,
    RocketMQOptionError,
    parse_sink_options,
    parse_source_options,
)

A0, A1, B0 = QueueRef("t", "broker-a", 0), QueueRef("t", "broker-a", 1), QueueRef("t", "broker-b", 0)
U0 = QueueRef("u", "broker-a", 0)


def no_search(q: QueueRef, ts: int) -> int:
    raise AssertionError("not a timestamp spec")


def test_offset_json_is_nested_and_sorted_whatever_the_input_order() -> None:
    offsets = {U0: 1, B0: 7, A1: 3, A0: 2, QueueRef("t", "broker-a", 10): 4}
    doc = offsets_to_json(offsets)
    assert json.dumps(doc) == json.dumps(
        {"t": {"broker-a:0": 2, "broker-a:1": 3, "broker-a:10": 4, "broker-b:0": 7}, "u": {"broker-a:0": 1}},
        sort_keys=True,
    )
    assert offsets_from_json(json.loads(json.dumps(doc))) == offsets


def test_partition_index_is_per_topic_and_sorted_by_broker_then_queue_id() -> None:
    idx = partition_indexes([B0, QueueRef("t", "broker-a", 10), A1, A0, U0])
    assert idx == {A0: 0, A1: 1, QueueRef("t", "broker-a", 10): 2, B0: 3, U0: 0}


def test_resolve_earliest_latest_json_and_timestamp() -> None:
    bounds = {A0: Bounds(5, 50), A1: Bounds(0, 10)}
    assert resolve(OffsetSpec("earliest"), bounds, no_search, option="o") == {A0: 5, A1: 0}
    assert resolve(OffsetSpec("latest", default=-1), bounds, no_search, option="o") == {A0: 50, A1: 10}
    spec = OffsetSpec("json", queues={"t": {"broker-a:0": 7, "broker-a:1": -1}}, default=-2)
    assert resolve(spec, bounds, no_search, option="o") == {A0: 7, A1: 10}
    partial = OffsetSpec("json", queues={"t": {"broker-a:1": 3}}, default=-2)
    assert resolve(partial, bounds, no_search, option="o") == {A0: 5, A1: 3}
    by_time = resolve(OffsetSpec("timestamp", timestamp_ms=99), bounds, lambda q, ts: 1000, option="o")
    assert by_time == {A0: 50, A1: 10}  # clamped into [min, max]


def test_resolve_rejects_unknown_queues_naming_the_known_ones() -> None:
    spec = OffsetSpec("json", queues={"t": {"broker-z:0": 1}})
    with pytest.raises(RocketMQOptionError, match=r"unknown queue t/broker-z:0 \(queues of 't': broker-a:0\)"):
        resolve(spec, {A0: Bounds(0, 1)}, no_search, option="startingOffsets")


def test_data_loss_fails_clearly_or_skips_ahead() -> None:
    bounds = {A0: Bounds(100, 200), A1: Bounds(0, 5)}
    with pytest.raises(DataLossError, match=r"offsets 40\.\.99 of queue t/broker-a:0 .*failOnDataLoss=false"):
        check_data_loss({A0: 40, A1: 0}, bounds, fail=True)
    assert check_data_loss({A0: 40, A1: 0}, bounds, fail=False) == {A0: 100, A1: 0}


def test_rate_limit_splits_by_lag_exactly_and_deterministically() -> None:
    start = {A0: 0, A1: 0, B0: 0}
    latest = {A0: 100, A1: 50, B0: 0}
    end = rate_limit(start, latest, 30)
    assert end == {A0: 20, A1: 10, B0: 0}
    end = rate_limit(start, {A0: 10, A1: 10, B0: 10}, 10)
    assert sum(end.values()) == 10 and end == {A0: 4, A1: 3, B0: 3}
    assert rate_limit(start, latest, 1000) == latest
    # never beyond a queue's lag, whatever the rounding
    for limit in range(1, 160):
        end = rate_limit(start, latest, limit)
        assert sum(end.values()) == min(limit, 150)
        assert all(start[q] <= end[q] <= latest[q] for q in latest)


def test_plan_ranges_drops_empty_queues_and_splits_for_min_partitions() -> None:
    start = {A0: 0, A1: 10, B0: 5}
    end = {A0: 90, A1: 10, B0: 15}
    ranges = plan_ranges(start, end)
    assert [(r.queue, r.partition, r.start, r.end) for r in ranges] == [(A0, 0, 0, 90), (B0, 2, 5, 15)]
    split = plan_ranges(start, end, min_partitions=10)
    assert [(r.start, r.end) for r in split if r.queue == A0] == [(i * 10, i * 10 + 10) for i in range(9)]
    assert [(r.start, r.end) for r in split if r.queue == B0] == [(5, 15)]
    assert sum(r.size for r in split) == 100


def test_source_options_defaults_differ_for_batch_and_stream() -> None:
    batch = parse_source_options({"nameserver": "127.0.0.1:9876", "subscribe": "a, b"}, streaming=False)
    assert batch.selection.topics == ("a", "b")
    assert batch.starting.kind == "earliest" and batch.ending is not None and batch.ending.kind == "latest"
    stream = parse_source_options({"NAMESERVER": "h:1", "subscribePattern": "or.*"}, streaming=True)
    assert stream.starting.kind == "latest" and stream.ending is None and stream.selection.pattern == "or.*"


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "t"}, False, "'nameserver': required"),
        ({"nameserver": "localhost"}, False, "'nameserver': expected host:port"),
        ({"nameserver": "h:1"}, False, "exactly one of subscribe, subscribePattern or assign (got none)"),
        ({"nameserver": "h:1", "subscribe": "t", "assign": "{}"}, False, "(got subscribe and assign)"),
        ({"nameserver": "h:1", "subscribe": "t", "startingOffset": "earliest"}, False,
         "unknown option; did you mean 'startingOffsets'?"),
        ({"nameserver": "h:1", "subscribe": "t", "startingOffsets": "latest"}, False,
         "'latest' is not allowed as a batch starting offset"),
        ({"nameserver": "h:1", "subscribe": "t", "endingOffsets": "earliest"}, False, "not allowed as an ending"),
        ({"nameserver": "h:1", "subscribe": "t", "endingOffsets": "latest"}, True, "only for batch queries"),
        ({"nameserver": "h:1", "subscribe": "t", "startingOffsets": "{bad"}, True, "expected earliest, latest or JSON"),
        ({"nameserver": "h:1", "subscribe": "t", "startingOffsets": '{"t": {"0": 1}}'}, True,
         "'0' is not 'brokerName:queueId'"),
        ({"nameserver": "h:1", "subscribe": "t", "startingOffsets": '{"t": {"b:0": -3}}'}, True, "integer >= -2"),
        ({"nameserver": "h:1", "subscribePattern": "(", "x": "1"}, True, "unknown option"),
        ({"nameserver": "h:1", "subscribePattern": "("}, True, "not a valid regular expression"),
        ({"nameserver": "h:1", "assign": '{"t": []}'}, True, "non-empty list of queues"),
        ({"nameserver": "h:1", "subscribe": "bad topic"}, True, "not a valid topic name"),
        ({"nameserver": "h:1", "subscribe": "t", "maxOffsetsPerTrigger": "0"}, True, "must be >= 1"),
        ({"nameserver": "h:1", "subscribe": "t", "maxOffsetsPerTrigger": "9"}, False, "only for streaming"),
        ({"nameserver": "h:1", "subscribe": "t", "filterType": "XPATH"}, True, "expected TAG or SQL92"),
        ({"nameserver": "h:1", "subscribe": "t", "filterType": "sql92"}, True, "SQL92 needs a filter"),
        ({"nameserver": "h:1", "subscribe": "t", "filter": "a || "}, True, "not a tag expression"),
        ({"nameserver": "h:1", "subscribe": "t", "failOnDataLoss": "maybe"}, True, "expected true or false"),
        ({"nameserver": "h:1", "subscribe": "t", "startingOffsets": "earliest", "startingTimestamp": "1"}, True,
         "either startingOffsets or startingTimestamp"),
    ],
)
def test_bad_source_options_fail_with_one_line(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(RocketMQOptionError) as info:
        parse_source_options(options, streaming=streaming)
    text = str(info.value)
    assert message in text and "\n" not in text and text.startswith("rocketmq option '")


def test_sink_options() -> None:
    cfg = parse_sink_options({"nameserver": "h:1", "topic": "out", "checkpointLocation": "/tmp/x"})
    assert cfg.topic == "out" and cfg.batch_size == 256
    with pytest.raises(RocketMQOptionError, match="'batchSize': must be >= 1"):
        parse_sink_options({"nameserver": "h:1", "batchSize": "0"})
