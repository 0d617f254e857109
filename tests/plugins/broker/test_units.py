"""Pure helpers of the broker: heartbeat normalisation, property edits, topic names, locks, hold service."""

from __future__ import annotations

import json

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.plugins.broker.clients import SubscriptionData, parse_heartbeat
from rmq.plugins.broker.locks import RebalanceLockManager
from rmq.plugins.broker.longpoll import PullHoldService
from rmq.protocol.common import java_hash, prop_value, set_props
from rmq.protocol.names import validate_topic


def test_parse_heartbeat_cpp_and_java_forms() -> None:
    cpp = {"clientID": "9-1.2.3.4@DEFAULT", "consumerDataSet": [{
        "consumeFromWhere": 4, "consumeType": 1, "groupName": "G", "messageModel": 0,
        "subscriptionDataSet": [{"codeSet": [0], "subString": "TagA || TagB", "subVersion": "1700000000123",
                                 "tagsSet": ["TagA", "TagB"], "topic": "T"}, {"subString": "*", "subVersion": "5",
                                                                               "topic": "%RETRY%G"}]}]}
    hb = parse_heartbeat(json.dumps(cpp).encode())
    c = hb.consumers[0]
    assert (c.consume_type, c.message_model, c.consume_from_where) == (
        "CONSUME_PASSIVELY", "BROADCASTING", "CONSUME_FROM_FIRST_OFFSET")
    assert c.subscriptions[0].codeSet == [java_hash("TagA"), java_hash("TagB")]
    assert c.subscriptions[0].subVersion == 1700000000123
    assert c.subscriptions[1].tagsSet == [] and hb.producer_groups == []
    java = {"clientID": "ip@pid", "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
            "consumerDataSet": [{"groupName": "G", "consumeType": "CONSUME_ACTIVELY", "messageModel": "CLUSTERING",
                                 "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
                                 "subscriptionDataSet": []}]}
    hb = parse_heartbeat(json.dumps(java).encode())
    assert hb.producer_groups == ["CLIENT_INNER_PRODUCER"]
    assert hb.consumers[0].consume_type == "CONSUME_ACTIVELY" and hb.consumers[0].message_model == "CLUSTERING"
    with pytest.raises(ValueError):
        parse_heartbeat(b"[1,2]")
    sd = SubscriptionData.build("T", "b || a", None, 3)
    assert sd.tagsSet == ["a", "b"] and sd.expressionType == "TAG"


def test_property_helpers() -> None:
    p = "TAGS\x01a\x02XDELAY\x013\x02DELAY\x012\x02KEYS\x01k"
    assert prop_value(p, "DELAY") == "2" and prop_value(p, "TAGS") == "a" and prop_value(p, "NONE") is None
    assert prop_value("DELAY\x015", "DELAY") == "5"
    out = set_props(p + "\x02", {"DELAY": None, "REAL_TOPIC": "T", "TAGS": "b"})
    assert out == "TAGS\x01b\x02XDELAY\x013\x02KEYS\x01k\x02REAL_TOPIC\x01T"


def test_topic_names() -> None:
    assert validate_topic("Good_Topic-1%|x") is None
    assert "127" in validate_topic("a" * 128)
    assert validate_topic("a" * 127) is None
    assert "illegal" in validate_topic("a b")
    assert "blank" in validate_topic("")


def test_lock_expiry() -> None:
    m = RebalanceLockManager(max_live=60)
    q = ("T", "b", 0)
    assert m.try_lock_batch("G", [q], "A", now=0) == [q]
    assert m.try_lock_batch("G", [q], "B", now=59) == []
    assert m.try_lock_batch("G", [q], "B", now=61) == [q]
    assert m.holder("G", q, now=62) == "B"


@pytest.mark.anyio
async def test_hold_service_missed_notification_and_recheck() -> None:
    hold = PullHoldService()
    current = {"max": 3}
    # data already past the offset when parking: returns at once
    assert await hold.hold("T", 0, 2, None, 5, lambda: current["max"]) is True
    woke: list[bool] = []

    async def waiter() -> None:
        woke.append(await hold.hold("T", 0, 3, None, 5, lambda: current["max"]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.05)
        hold.notify("T", 0, 3, 0, None)  # not past the offset: still held
        await anyio.sleep(0.02)
        assert not woke
        current["max"] = 4
        assert hold.check_all(lambda t, q: current["max"]) == 1
    assert woke == [True] and not hold.waiters


@pytest.mark.anyio
async def test_hold_service_releases_a_pull_whose_consumer_closed() -> None:
    """A held pull is served even after its consumer's connection closed (the transport finishes
    what it read): the periodic check wakes it, so it never holds the connection's slot for its
    whole suspend time (up to an hour)."""

    class Conn:
        closed = False

    hold = PullHoldService()
    conn = Conn()
    woke: list[bool] = []

    async def waiter() -> None:
        woke.append(await hold.hold("T", 0, 3, None, 3600, lambda: 3, conn))  # type: ignore[arg-type]

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await anyio.sleep(0.05)
        assert hold.check_all(lambda t, q: 3) == 0  # nothing new, consumer there: still held
        conn.closed = True
        assert hold.check_all(lambda t, q: 3) == 1
    assert woke == [True] and not hold.waiters


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=3), kids,
                                                                                     max_size=4), max_leaves=12)


@given(st.one_of(json_values, st.dictionaries(st.sampled_from(["c", "t", "q", "so", "pt", "b", "bitSet", "queueId"]),
                                              json_values, max_size=8)))
def test_batch_ack_entries_parse_or_refuse(entry: object) -> None:
    from rmq.plugins.broker.pop import _batch_entry

    try:
        group, topic, qid, start, pop_time, bits = _batch_entry(entry)
    except (ValueError, TypeError, KeyError, OverflowError):
        return
    assert isinstance(bits, bytes) and isinstance(qid, int) and isinstance(start, int)
