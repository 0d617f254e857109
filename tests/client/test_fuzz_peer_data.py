"""Fuzz: what a name server or broker sends our client is decoded or refused as BadResponseError, never crashes it.

Routes, offset tables, lock answers, pull and send responses (header fields and bodies).
``make fuzz`` runs the same properties with the ``rmq-fuzz`` profile.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.client.consumer import pull_result
from rmq.client.errors import BadResponseError, BrokerError, ClientError
from rmq.client.instance import mq_from_json, parse_offset_table
from rmq.client.producer import parse_send_response
from rmq.client.route import MAX_QUEUE_NUMS, TopicRoute
from rmq.kernel.model import MessageQueue
from rmq.protocol.command import RemotingCommand
from rmq.protocol.message import encode_message
from rmq.testing.fuzz import fuzz_settings

ROUTE = {
    "brokerDatas": [{"brokerAddrs": {"0": "10.0.0.5:10911", "1": "10.0.0.6:10911"}, "brokerName": "b", "cluster": "C"}],
    "filterServerTable": {},
    "queueDatas": [{"brokerName": "b", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}],
}
ODD = st.one_of(st.none(), st.booleans(), st.integers(), st.sampled_from([2**31, -1, 2**63, 10**30, MAX_QUEUE_NUMS + 1]),
                st.floats(allow_nan=False), st.text(max_size=6), st.just([]), st.just({}))


@st.composite
def routes(draw: st.DrawFn) -> bytes:
    doc = json.loads(json.dumps(ROUTE))
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["q", "b", "addrs"]))
        if where == "q":
            doc["queueDatas"][0][draw(st.sampled_from(["brokerName", "perm", "readQueueNums", "writeQueueNums",
                                                       "topicSysFlag"]))] = draw(ODD)
        elif where == "b":
            doc["brokerDatas"][0][draw(st.sampled_from(["brokerName", "cluster", "brokerAddrs"]))] = draw(ODD)
        else:
            doc["brokerDatas"][0]["brokerAddrs"] = {draw(st.text(max_size=22)): draw(ODD)}
    if draw(st.booleans()):
        doc[draw(st.sampled_from(["queueDatas", "brokerDatas", "orderTopicConf"]))] = draw(ODD)
    text = json.dumps(doc)
    if draw(st.booleans()):
        text = text.replace('"0":', "0:")  # fastjson's unquoted ids
    data = text.encode()
    if draw(st.booleans()):
        i = draw(st.integers(0, len(data)))
        data = data[:i] + draw(st.binary(max_size=3)) + data[i + draw(st.integers(0, 3)):]
    return data


@fuzz_settings(300)
@given(st.one_of(routes(), st.binary(max_size=60)))
def test_route_any_body(body: bytes) -> None:
    try:
        route = TopicRoute.parse(body)
    except BadResponseError:
        return
    pub = route.publish_queues("T")
    sub = route.subscribe_queues("T")
    assert len(pub) <= MAX_QUEUE_NUMS * max(1, len(route.queue_datas))
    assert len(sub) <= MAX_QUEUE_NUMS * max(1, len(route.queue_datas))
    for bd in route.broker_datas:
        assert all(type(k) is int and type(v) is str for k, v in bd.addrs.items())


def test_route_refuses_absurd_queue_counts() -> None:
    doc = json.loads(json.dumps(ROUTE))
    doc["queueDatas"][0]["writeQueueNums"] = 2**31 - 1
    with pytest.raises(BadResponseError, match="writeQueueNums"):
        TopicRoute.parse(json.dumps(doc))
    doc = json.loads(json.dumps(ROUTE))
    doc["orderTopicConf"] = "b:99999999999"
    assert TopicRoute.parse(json.dumps(doc)).publish_queues("T") == []


@fuzz_settings(300)
@given(st.one_of(
    st.text(max_size=80),
    st.builds(lambda q, o: '{"offsetTable":{{"brokerName":"b","queueId":' + q + ',"topic":"t"}:' + o + "}}",
              st.sampled_from(["0", "-1", "2147483648", "9" * 5000, '"x"']),
              st.sampled_from(["5", "-9223372036854775809", "9" * 5000, "1e3"])),
))
def test_offset_table_any_body(text: str) -> None:
    table = parse_offset_table(text)
    for mq, off in table.items():
        assert -(2**31) <= mq.queue_id < 2**31 and -(2**63) <= off < 2**63


@fuzz_settings(200)
@given(st.one_of(ODD, st.dictionaries(st.sampled_from(["topic", "brokerName", "queueId"]), ODD, max_size=3)))
def test_lock_answer_entries(d: Any) -> None:
    try:
        mq = mq_from_json(d)
    except BadResponseError:
        return
    assert isinstance(mq, MessageQueue) and -(2**31) <= mq.queue_id < 2**31


ext_values = st.one_of(st.integers(-(2**70), 2**70).map(str), st.text(max_size=8), st.just(""))


@fuzz_settings(300)
@given(st.sampled_from([0, 19, 20, 21, 1, 17]),
       st.dictionaries(st.sampled_from(["nextBeginOffset", "minOffset", "maxOffset", "suggestWhichBrokerId"]),
                       ext_values, max_size=4),
       st.one_of(st.binary(max_size=40), st.just(encode_message("t", b"x")),
                 st.just(encode_message("t", b"x")).map(lambda r: r[:-1]),
                 st.just(encode_message("t", b"x")).map(lambda r: struct.pack(">i", 5) + r[4:])))
def test_pull_response_any_header_and_body(code: int, ext: dict[str, str], body: bytes) -> None:
    resp = RemotingCommand(code, ext=ext, body=body, flag=1)
    try:
        res = pull_result(resp, None)
    except (BadResponseError, BrokerError) as exc:
        assert isinstance(exc, ClientError)
        return
    assert all(-(2**63) <= v < 2**63 for v in (res.next_begin_offset, res.min_offset, res.max_offset))


@fuzz_settings(200)
@given(st.sampled_from([0, 10, 1]),
       st.dictionaries(st.sampled_from(["queueId", "queueOffset", "msgId"]), ext_values, max_size=3))
def test_send_response_any_header(code: int, ext: dict[str, str]) -> None:
    mq = MessageQueue("t", "b", 1)
    try:
        res = parse_send_response(RemotingCommand(code, ext=ext, flag=1), mq, "ID")
    except (BadResponseError, BrokerError):
        return
    assert -(2**31) <= res.queue.queue_id < 2**31
