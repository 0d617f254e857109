"""Admin codes, metadata files in RocketMQ's shape, restart with the mmap store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmq.kernel.metafile import ConfigFile, dumps
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.jsonbody import loads as loads_lenient
from rmq.protocol.message import decode_messages

pytestmark = pytest.mark.anyio


async def test_admin_codes(broker_env: Any) -> None:
    async with broker_env() as env:
        await env.send("A", b"x", keys="order-1 order-2", tags="t")
        await env.send("A", b"y", keys="order-3")
        r = await env.call(RequestCode.GET_ALL_TOPIC_CONFIG)
        doc = json.loads(r.body)
        assert doc["topicConfigTable"]["A"]["readQueueNums"] == 4 and "dataVersion" in doc
        assert doc["topicConfigTable"]["SCHEDULE_TOPIC_XXXX"]["readQueueNums"] == 18
        r = await env.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "A"})
        body = r.body.decode()
        assert '{"brokerName":"broker-a","queueId":0,"topic":"A"}:{"lastUpdateTimestamp":' in body
        assert '"maxOffset":2' in body
        assert (await env.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Z"})).code == ResponseCode.TOPIC_NOT_EXIST
        await env.pull("A", 0, 0, group="G", commit=1)
        r = await env.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "G", "topic": "A"})
        assert '"brokerOffset":2,"consumerOffset":1' in r.body.decode()
        r = await env.call(RequestCode.QUERY_MESSAGE, {"topic": "A", "key": "order-2", "maxNum": 32,
                                                      "beginTimestamp": 0, "endTimestamp": 2**62})
        assert r.code == 0 and [m.body for m in decode_messages(r.body)] == [b"x"]
        r = await env.call(RequestCode.QUERY_MESSAGE, {"topic": "A", "key": "nope", "maxNum": 32,
                                                      "beginTimestamp": 0, "endTimestamp": 2**62})
        assert r.code == ResponseCode.QUERY_NOT_FOUND
        r = await env.call(RequestCode.GET_BROKER_RUNTIME_INFO)
        assert json.loads(r.body)["table"]["brokerAddr"] == env.addr
        r = await env.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        assert "G" in json.loads(r.body)["subscriptionGroupTable"]
        assert (await env.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "G"})).code == 0
        r = await env.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "A"})
        assert r.code == 0 and "A" not in env.broker.topics.table
        route = await env.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "A"}, addr=env.ns_addr)
        assert route.code == ResponseCode.TOPIC_NOT_EXIST
        r = await env.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "SCHEDULE_TOPIC_XXXX"})
        assert r.code == ResponseCode.SYSTEM_ERROR
        r = await env.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "bad name", "readQueueNums": 1})
        assert r.code == ResponseCode.SYSTEM_ERROR
        assert (await env.call(9999)).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_metadata_files_survive_restart(broker_env: Any, tmp_path: Path) -> None:
    async with broker_env(store="mmap") as env:
        for i in range(3):
            await env.send("Keep", str(i).encode(), queue_id=1)
        await env.pull("Keep", 1, 0, group="G", commit=2)
        assert (await env.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "Admin8", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6})).code == 0
    cfg = tmp_path / "store" / "config"
    topics = json.loads((cfg / "topics.json").read_text())
    assert topics["topicConfigTable"]["Keep"] == {
        "order": False, "perm": 6, "readQueueNums": 4, "topicFilterType": "SINGLE_TAG", "topicName": "Keep",
        "topicSysFlag": 0, "writeQueueNums": 4}
    assert (cfg / "topics.json.bak").exists()
    offsets = (cfg / "consumerOffset.json").read_text()
    assert '"Keep@G":{' in offsets and "1:2" in offsets.replace("\t", "").replace("\n", "")
    assert loads_lenient(offsets)["offsetTable"]["Keep@G"] == {"1": 2}
    assert "G" in json.loads((cfg / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
    assert not (tmp_path / "store" / "abort").exists()
    async with broker_env(store="mmap") as env:
        assert env.broker.topics.get("Admin8").readQueueNums == 8
        r = await env.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "Keep", "queueId": 1})
        assert r.ext["offset"] == "2"
        p = await env.pull("Keep", 1, 2)
        assert [m.body for m in decode_messages(p.body)] == [b"2"]
        r = await env.send("Keep", b"3", queue_id=1)
        assert r.ext["queueOffset"] == "3"


def test_config_file_protocol(tmp_path: Path) -> None:
    f = ConfigFile(tmp_path / "x.json")
    assert f.load() is None
    f.write(dumps({"offsetTable": {"t@g": {"0": 5, "12": 7}}}, int_keys=True))
    assert (tmp_path / "x.json").read_text() == '{"offsetTable":{"t@g":{0:5,12:7}}}'
    f.write(dumps({"offsetTable": {}}))
    assert loads_lenient((tmp_path / "x.json.bak").read_text())["offsetTable"]["t@g"]["12"] == 7
    (tmp_path / "x.json").write_text("{corrupt")
    assert f.load()["offsetTable"]["t@g"]["0"] == 5  # falls back to the backup
    assert loads_lenient('{"a":{0:1, -1:2}}') == {"a": {"0": 1, "-1": 2}}
