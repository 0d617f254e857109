"""NameServer processors over real TCP (in-process kernel): routes, expiry, KV config, versions."""

from __future__ import annotations

import json
import zlib
from typing import Any

import anyio
import pytest

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.namesrv.routes import DataVersion, TopicConfigData, encode_compressed_register_body
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand

pytestmark = pytest.mark.anyio


def register_body(topics: dict[str, int], counter: int = 1) -> bytes:
    table = {
        t: {"order": False, "perm": 6, "readQueueNums": n, "topicFilterType": "SINGLE_TAG", "topicName": t,
            "topicSysFlag": 0, "writeQueueNums": n}
        for t, n in topics.items()
    }
    return json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": {
        "dataVersion": {"counter": counter, "timestamp": 1700000000000}, "topicConfigTable": table}}).encode()


async def register(client: TcpRemotingClient, addr: str, name: str, baddr: str, body: bytes,
                   cluster: str = "DefaultCluster", bid: int = 0, **extra: str) -> RemotingCommand:
    ext = {"brokerName": name, "brokerAddr": baddr, "clusterName": cluster, "haServerAddr": "x:1",
           "brokerId": str(bid), "compressed": "false", "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF)}
    ext.update(extra)
    return await client.invoke(addr, RemotingCommand.request(RequestCode.REGISTER_BROKER, ext, body), 3)


async def route(client: TcpRemotingClient, addr: str, topic: str) -> tuple[int, Any, bytes]:
    resp = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), 3)
    return resp.code, resp.remark, resp.body


async def until_code(client: TcpRemotingClient, addr: str, topic: str, code: int, timeout: float) -> None:
    for _ in range(int(timeout / 0.02)):
        if (await route(client, addr, topic))[0] == code:
            return
        await anyio.sleep(0.02)
    raise AssertionError(f"route of {topic} never answered {code}")


async def test_register_and_route(namesrv: Any) -> None:
    _, client, addr = namesrv
    resp = await register(client, addr, "broker-a", "10.0.0.5:10911", register_body({"T1": 4, "T2": 8}))
    assert resp.code == ResponseCode.SUCCESS
    code, _, body = await route(client, addr, "T1")
    assert code == ResponseCode.SUCCESS
    # standard JSON, quoted broker id, numbers for perm and queue counts
    assert b'"brokerAddrs":{"0":"10.0.0.5:10911"}' in body
    doc = json.loads(body)
    assert doc["queueDatas"] == [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                                  "writeQueueNums": 4}]
    assert doc["brokerDatas"][0]["cluster"] == "DefaultCluster"
    assert doc["filterServerTable"] == {}
    code, remark, _ = await route(client, addr, "nope")
    assert code == ResponseCode.TOPIC_NOT_EXIST and "nope" in remark


async def test_compressed_register_and_lists(namesrv: Any) -> None:
    _, client, addr = namesrv
    body = encode_compressed_register_body(DataVersion(1, 1), [TopicConfigData("C1", 2, 2, 6)], [])
    resp = await register(client, addr, "broker-b", "10.0.0.6:10911", body, cluster="C", compressed="true")
    assert resp.code == ResponseCode.SUCCESS
    await register(client, addr, "broker-a", "10.0.0.5:10911", register_body({"A1": 4}))
    code, _, body = await route(client, addr, "C1")
    assert code == 0 and json.loads(body)["queueDatas"][0]["readQueueNums"] == 2

    r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3)
    info = json.loads(r.body)
    assert info["clusterAddrTable"] == {"C": ["broker-b"], "DefaultCluster": ["broker-a"]}
    assert info["brokerAddrTable"]["broker-b"]["brokerAddrs"] == {"0": "10.0.0.6:10911"}

    r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER), 3)
    assert json.loads(r.body)["topicList"] == ["A1", "C1"]
    r = await client.invoke(addr, RemotingCommand.request(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "C"}), 3)
    assert json.loads(r.body)["topicList"] == ["C1"]

    r = await client.invoke(addr, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "C1"}), 3)
    assert r.code == 0
    assert (await route(client, addr, "C1"))[0] == ResponseCode.TOPIC_NOT_EXIST


async def test_topic_dropped_when_broker_no_longer_has_it(namesrv: Any) -> None:
    _, client, addr = namesrv
    await register(client, addr, "broker-a", "10.0.0.5:10911", register_body({"X": 4, "Y": 4}, 1))
    await register(client, addr, "broker-a", "10.0.0.5:10911", register_body({"X": 4}, 2))
    assert (await route(client, addr, "Y"))[0] == ResponseCode.TOPIC_NOT_EXIST
    assert (await route(client, addr, "X"))[0] == 0


async def test_crc_mismatch_and_garbage_body(namesrv: Any) -> None:
    _, client, addr = namesrv
    resp = await register(client, addr, "b", "1.2.3.4:5", register_body({"X": 1}), bodyCrc32="12345")
    assert resp.code == ResponseCode.SYSTEM_ERROR and "crc32" in resp.remark
    resp = await register(client, addr, "b", "1.2.3.4:5", b"{not json", bodyCrc32="0")
    assert resp.code == ResponseCode.SYSTEM_ERROR


async def test_unregister_and_slave_master_addr(namesrv: Any) -> None:
    _, client, addr = namesrv
    await register(client, addr, "broker-a", "10.0.0.5:10911", register_body({"X": 4}))
    resp = await register(client, addr, "broker-a", "10.0.0.7:10911", register_body({"X": 4}), bid=1)
    assert resp.ext["masterAddr"] == "10.0.0.5:10911" and resp.ext["haServerAddr"] == "x:1"
    doc = json.loads((await route(client, addr, "X"))[2])
    assert doc["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.5:10911", "1": "10.0.0.7:10911"}
    for baddr, bid in (("10.0.0.5:10911", "0"), ("10.0.0.7:10911", "1")):
        r = await client.invoke(addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, {
            "brokerName": "broker-a", "brokerAddr": baddr, "clusterName": "DefaultCluster", "brokerId": bid}), 3)
        assert r.code == 0
    assert (await route(client, addr, "X"))[0] == ResponseCode.TOPIC_NOT_EXIST


async def test_expiry_and_connection_close(namesrv: Any) -> None:
    svc, client, addr = namesrv
    await register(client, addr, "broker-a", "10.0.0.5:10911", register_body({"X": 4}))
    # expiry: brokerChannelExpiredTime=600 ms, scan every 200 ms
    await until_code(client, addr, "X", ResponseCode.TOPIC_NOT_EXIST, 5)
    # connection close drops a broker at once
    async with TcpRemotingClient(RemotingConfig(name="other")) as other:
        await register(other, addr, "broker-c", "10.0.0.8:10911", register_body({"Z": 1}))
        assert (await route(client, addr, "Z"))[0] == 0
    await until_code(client, addr, "Z", ResponseCode.TOPIC_NOT_EXIST, 2)
    assert not svc.routes.broker_live_table


async def test_kv_config_and_data_version(namesrv: Any) -> None:
    _, client, addr = namesrv
    req = RemotingCommand.request
    r = await client.invoke(addr, req(RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k", "value": "v"}), 3)
    assert r.code == 0
    r = await client.invoke(addr, req(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}), 3)
    assert r.code == 0 and r.ext["value"] == "v"
    r = await client.invoke(addr, req(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ns"}), 3)
    assert json.loads(r.body) == {"table": {"k": "v"}}
    r = await client.invoke(addr, req(RequestCode.DELETE_KV_CONFIG, {"namespace": "ns", "key": "k"}), 3)
    assert r.code == 0
    r = await client.invoke(addr, req(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"}), 3)
    assert r.code == ResponseCode.QUERY_NOT_FOUND

    await register(client, addr, "broker-a", "10.0.0.5:10911", register_body({"X": 4}, counter=7))
    hdr = {"brokerName": "broker-a", "brokerAddr": "10.0.0.5:10911", "clusterName": "DefaultCluster",
           "brokerId": "0"}
    same = json.dumps({"counter": 7, "timestamp": 1700000000000}).encode()
    r = await client.invoke(addr, req(RequestCode.QUERY_DATA_VERSION, hdr, same), 3)
    assert r.code == 0 and r.ext["changed"] == "false" and json.loads(r.body)["counter"] == 7
    other = json.dumps({"counter": 8, "timestamp": 1700000000001}).encode()
    r = await client.invoke(addr, req(RequestCode.QUERY_DATA_VERSION, hdr, other), 3)
    assert r.ext["changed"] == "true"


async def test_unknown_code(namesrv: Any) -> None:
    _, client, addr = namesrv
    r = await client.invoke(addr, RemotingCommand.request(9999), 3)
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def test_plugin_options_are_strict(tmp_path: Any) -> None:
    from rmq.plugins.broker import BrokerPlugin
    from rmq.plugins.namesrv import NamesrvPlugin

    with pytest.raises(ValueError, match="unknown option 'kv_config_path'; known options: none"):
        NamesrvPlugin({"kv_config_path": "x"})
    with pytest.raises(ValueError, match="unknown option 'anything'; known options: max_auto_created_topics, max_auto_created_groups, slave_sync_period_ms, slave_topic_probe_ms"):
        BrokerPlugin({"anything": 1})


async def test_kv_config_persisted(tmp_path: Any) -> None:
    from rmq.plugins.namesrv.kvconfig import KVConfigManager

    kv = KVConfigManager(tmp_path / "kvConfig.json")
    kv.put("ORDER_TOPIC_CONFIG", "T", "broker-a:4")
    kv.put("ns", "k", "v")
    again = KVConfigManager(tmp_path / "kvConfig.json")
    again.load()
    assert again.get("ORDER_TOPIC_CONFIG", "T") == "broker-a:4" and again.namespace("ns") == {"k": "v"}
    assert json.loads((tmp_path / "kvConfig.json").read_text())["configTable"]["ns"] == {"k": "v"}


def test_order_topic_conf_in_route() -> None:
    from rmq.plugins.namesrv.routes import RegisterBody, RouteInfoManager

    rm = RouteInfoManager()
    rm.register_broker("C", "1.1.1.1:1", "b", 0, "", RegisterBody(DataVersion(1, 1), [TopicConfigData("T", 2, 2, 6)],
                                                                   []), None, 0.0)
    assert rm.pickup_route("T", "b:2")["orderTopicConf"] == "b:2"
    assert "orderTopicConf" not in rm.pickup_route("T")


def test_a_prime_slave_registering_again_is_answered_success() -> None:
    """Seen in every fault-matrix cell's broker log ("register to namesrv failed: TypeError"): the merge
    branch of a broker that sends enableActingMaster (a master with an unchanged dataVersion, a prime
    slave always) returned (added, []) as ``added`` and the log line failed on it."""
    from rmq.plugins.namesrv.routes import RegisterBody, RouteInfoManager

    rm = RouteInfoManager()
    body = RegisterBody(DataVersion(1, 1), [TopicConfigData("T", 2, 2, 6)], [])
    rm.register_broker("C", "1.1.1.1:2", "b", 1, "", body, None, 0.0, acting_master=True)
    grown = RegisterBody(DataVersion(1, 1), [TopicConfigData("T", 2, 2, 6), TopicConfigData("U", 2, 2, 6)], [])
    rm.register_broker("C", "1.1.1.1:2", "b", 1, "", grown, None, 1.0, acting_master=True)
    assert set(rm.topic_queue_table) >= {"T", "U"}


def test_a_deposed_master_does_not_take_id_0_back_from_a_newer_epoch() -> None:
    """Found by the nemesis (issue #31, master cut off from the controllers but not from the name
    server): the old master kept registering as id 0 and the routes flipped between it (fenced) and the
    new master. RocketMQ 5's name server ignores a registration for an id a live broker of a higher
    ``stateVersion`` (the controller's master epoch) holds; 4.9 brokers send none and are unaffected."""
    from rmq.plugins.namesrv.routes import RegisterBody, RouteInfoManager

    rm = RouteInfoManager()
    topics = [TopicConfigData("T", 2, 2, 6)]
    rm.register_broker("C", "10.0.0.1:1", "b", 0, "", RegisterBody(DataVersion(1, 1, 1), topics, []), None, 0.0)
    rm.register_broker("C", "10.0.0.2:1", "b", 0, "", RegisterBody(DataVersion(1, 1, 2), topics, []), None, 1.0)
    assert rm.broker_addr_table["b"]["brokerAddrs"] == {0: "10.0.0.2:1"}  # the newer epoch takes the id
    assert rm.register_broker("C", "10.0.0.1:1", "b", 0, "", RegisterBody(DataVersion(1, 2, 1), topics, []), None,
                              2.0) == ("", "")
    assert rm.broker_addr_table["b"]["brokerAddrs"] == {0: "10.0.0.2:1"}  # the deposed master is ignored
    assert "10.0.0.1:1" not in rm.broker_live_table
    rm.register_broker("C", "10.0.0.1:1", "b", 3, "", RegisterBody(DataVersion(1, 3, 2), topics, []), None, 3.0)
    assert rm.broker_addr_table["b"]["brokerAddrs"] == {0: "10.0.0.2:1", 3: "10.0.0.1:1"}  # back as a slave
    # without state versions (4.9, classic master/slave) the last registration wins, as before
    rm.register_broker("C", "10.0.0.3:1", "c", 0, "", RegisterBody(DataVersion(1, 1), topics, []), None, 0.0)
    rm.register_broker("C", "10.0.0.4:1", "c", 0, "", RegisterBody(DataVersion(1, 1), topics, []), None, 1.0)
    assert rm.broker_addr_table["c"]["brokerAddrs"] == {0: "10.0.0.4:1"}
