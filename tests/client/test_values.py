"""Pure-logic tests: messages, routes, selectors, fault tolerance, subscriptions (no sockets)."""

from __future__ import annotations

import pytest

from rmq.client import LocalTransactionState, Message, SendResult, SendStatus
from rmq.client.options import ConsumerOptions, ProducerOptions, build
from rmq.client.route import TopicRoute, loads_lenient
from rmq.client.selector import (
    DefaultQueuePicker,
    HashSelector,
    LatencyFaultTolerance,
    RoundRobinSelector,
    stable_hash,
)
from rmq.client.subscription import Subscription
from rmq.kernel.model import MessageQueue


def test_message_body_keys_tags_delay():
    m = Message("T", "héllo", tags="TagA", keys=["k1", "k2"], properties={"a": "1"}, delay_level=3)
    assert m.body == "héllo".encode()
    assert m.tags == "TagA"
    assert m.keys == "k1 k2"
    assert m.delay_level == 3
    assert m.properties == {"a": "1", "TAGS": "TagA", "KEYS": "k1 k2", "DELAY": "3"}
    m.delay_level = 0
    assert "DELAY" not in m.properties
    assert Message("T", b"x", keys="single").keys == "single"


@pytest.mark.parametrize("props", [{"": "v"}, {"k": ""}, {"k\x01": "v"}, {"k": "a\x02b"}])
def test_message_rejects_unencodable_properties(props):
    with pytest.raises(ValueError):
        Message("T", b"x", properties=props)


def test_message_reserved_property():
    with pytest.raises(ValueError, match="system property"):
        Message("T", b"x").put_property("TAGS", "x")


def test_send_result_ids():
    r = SendResult(SendStatus.SEND_OK, "A,B", "X", MessageQueue("T", "b", 0), 7)
    assert r.msg_ids == ["A", "B"] and r.ok


@pytest.mark.parametrize(
    ("value", "state"),
    [
        (True, LocalTransactionState.COMMIT_MESSAGE),
        (False, LocalTransactionState.ROLLBACK_MESSAGE),
        (None, LocalTransactionState.UNKNOW),
        ("commit", LocalTransactionState.COMMIT_MESSAGE),
        ("ROLLBACK_MESSAGE", LocalTransactionState.ROLLBACK_MESSAGE),
        ("unknown", LocalTransactionState.UNKNOW),
    ],
)
def test_transaction_state_coerce(value, state):
    assert LocalTransactionState.coerce(value) is state


def test_options_fail_closed():
    with pytest.raises(TypeError, match="unknown option.*send_timout.*known:.*send_timeout"):
        build(ProducerOptions, {"send_timout": 1}, "Producer")
    assert build(ConsumerOptions, {"rebalance_interval": 1.5}, "C").rebalance_interval == 1.5
    with pytest.raises(ValueError):
        build(ConsumerOptions, {"rebalance_interval": 0}, "C")


ROUTE_FASTJSON = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.5:10911",1:"10.0.0.6:10911"},"brokerName":"b-b","cluster":"C"},'
    b'{"brokerAddrs":{1:"10.0.0.7:10911"},"brokerName":"b-a","cluster":"C"}],"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"b-b","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":3},'
    b'{"brokerName":"b-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}]}'
)


def test_route_parse_unquoted_ids_and_queue_lists():
    assert loads_lenient(b'{"a":{0:"x"}}') == {"a": {"0": "x"}}
    r = TopicRoute.parse(ROUTE_FASTJSON)
    assert r.broker("b-b").master_addr == "10.0.0.5:10911"
    assert r.broker("b-a").master_addr is None and r.broker("b-a").any_addr() == "10.0.0.7:10911"
    # producers: writable queues of brokers with a master only
    assert r.publish_queues("T") == [MessageQueue("T", "b-b", i) for i in range(3)]
    # template route (auto-create): min(default queue nums, read nums)
    assert len(r.publish_queues("T", max_queue_nums=2)) == 2
    # consumers: readable queues of every broker, sorted by broker then id
    subs = r.subscribe_queues("T")
    assert subs == sorted(subs) and len(subs) == 6 and subs[0].broker_name == "b-a"


def test_route_perm_and_order_conf():
    body = (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"h:1"},"brokerName":"b","cluster":"C"}],'
        b'"queueDatas":[{"brokerName":"b","perm":4,"readQueueNums":2,"writeQueueNums":2}]}'
    )
    r = TopicRoute.parse(body)
    assert r.publish_queues("T") == []  # read-only topic
    assert len(r.subscribe_queues("T")) == 2
    ordered = TopicRoute.parse(body.replace(b'"queueDatas"', b'"orderTopicConf":"b:3","queueDatas"'))
    assert [q.queue_id for q in ordered.publish_queues("T")] == [0, 1, 2]


def test_stable_hash_matches_java_string_hashcode():
    assert stable_hash("TagA") == 2598919
    assert stable_hash(-5) == 5
    queues = [MessageQueue("T", "b", i) for i in range(8)]
    sel = HashSelector()
    assert sel(queues, None, "order-1") == sel(queues, None, "order-1")
    assert sel(queues, None, "order-1") == queues[abs(stable_hash("order-1")) % 8]
    with pytest.raises(ValueError):
        sel(queues, None, None)


def test_round_robin_visits_every_queue():
    queues = [MessageQueue("T", "b", i) for i in range(5)]
    rr = RoundRobinSelector()
    assert {rr(queues) for _ in range(5)} == set(queues)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_latency_fault_tolerance_isolation_table():
    assert LatencyFaultTolerance.isolation_ms(10) == 0
    assert LatencyFaultTolerance.isolation_ms(600) == 30000
    assert LatencyFaultTolerance.isolation_ms(2500) == 120000
    assert LatencyFaultTolerance.isolation_ms(30000) == 600000
    clock = FakeClock()
    lft = LatencyFaultTolerance(clock)
    lft.update("a", 5)
    assert lft.is_available("a")
    lft.update("b", 0, failed=True)
    assert not lft.is_available("b")
    clock.now += 599
    assert not lft.is_available("b")
    clock.now += 2
    assert lft.is_available("b")


def test_picker_avoids_failed_and_isolated_brokers():
    queues = [MessageQueue("T", b, i) for b in ("a", "b") for i in range(2)]
    plain = DefaultQueuePicker(None)
    assert all(plain.pick(queues, avoid_broker="a").broker_name == "b" for _ in range(10))
    clock = FakeClock()
    lft = LatencyFaultTolerance(clock)
    picker = DefaultQueuePicker(lft)
    lft.update("a", 0, failed=True)
    assert all(picker.pick(queues).broker_name == "b" for _ in range(10))
    lft.update("b", 0, failed=True)
    # everything isolated: still picks something (the least bad broker)
    assert picker.pick(queues) in queues
    assert picker.pick([queues[0]]) == queues[0]


def test_subscription_parse_and_heartbeat_form():
    s = Subscription.parse("T", "TagA || TagB ||  ", "tag")
    assert s.tags == {"TagA", "TagB"} and s.codes == (2598919, 2598920)
    assert s.refilter == {"TagA", "TagB"}
    j = s.to_json()
    assert j["expressionType"] == "TAG" and j["tagsSet"] == ["TagA", "TagB"] and j["topic"] == "T"
    assert isinstance(j["subVersion"], int)
    star = Subscription.parse("T", "*")
    assert star.all and star.refilter is None and star.to_json()["tagsSet"] == []
    assert Subscription.parse("T", "").expression == "*"
    sql = Subscription.parse("T", "a > 5", "SQL92")
    assert sql.expression_type == "SQL92" and sql.refilter is None
    with pytest.raises(ValueError):
        Subscription.parse("T", "", "SQL92")
    with pytest.raises(ValueError):
        Subscription.parse("T", "x", "XPATH")
