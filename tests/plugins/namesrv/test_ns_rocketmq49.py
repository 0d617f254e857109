"""NameServer behaviours checked against RocketMQ 4.9's DefaultRequestProcessor, RouteInfoManager
and KVConfigManager: write-perm restore, system topic list, the persisted KV config."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.testing.daemon import RmqdProcess

from .test_namesrv import register, register_body, route

pytestmark = pytest.mark.anyio
req = RemotingCommand.request


async def test_add_write_perm_restores_read_write(namesrv: Any) -> None:
    """RouteInfoManager.operateWritePermOfBroker: ADD sets perm = READ|WRITE (6), whatever it was,
    and the reply's addTopicCount header counts the broker's topics."""
    _, client, addr = namesrv
    body = json.loads(register_body({"RO": 2, "INH": 2, "RW": 2}))
    table = body["topicConfigSerializeWrapper"]["topicConfigTable"]
    table["RO"]["perm"], table["INH"]["perm"] = 4, 4 | 1  # read-only; read + inherit
    await register(client, addr, "broker-a", "10.0.0.5:10911", json.dumps(body).encode())
    await register(client, addr, "broker-b", "10.0.0.6:10911", register_body({"OTHER": 2}))
    r = await client.invoke(addr, req(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}), 3)
    assert r.code == ResponseCode.SUCCESS and r.ext["wipeTopicCount"] == "3"
    r = await client.invoke(addr, req(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"}), 3)
    assert r.code == ResponseCode.SUCCESS and r.ext["addTopicCount"] == "3"
    for topic in ("RO", "INH", "RW"):
        _, _, raw = await route(client, addr, topic)
        assert json.loads(raw)["queueDatas"][0]["perm"] == 6, topic
    r = await client.invoke(addr, req(RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "nobody"}), 3)
    assert r.code == ResponseCode.SUCCESS and r.ext["addTopicCount"] == "0"


async def test_system_topic_list_names_a_broker(namesrv: Any) -> None:
    """RouteInfoManager.getSystemTopicList: cluster and broker names, plus brokerAddr of a broker."""
    _, client, addr = namesrv
    r = await client.invoke(addr, req(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS), 3)
    assert json.loads(r.body) == {"topicList": []}  # no broker: no brokerAddr, as fastjson omits a null
    await register(client, addr, "broker-a", "10.0.0.5:10911", register_body({"T": 1}), cluster="C1")
    await register(client, addr, "broker-a", "10.0.0.7:10911", register_body({"T": 1}), cluster="C1", bid=1)
    r = await client.invoke(addr, req(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS), 3)
    assert json.loads(r.body) == {"topicList": ["C1", "broker-a"], "brokerAddr": "10.0.0.5:10911"}


def _call(ns_addr: str, cmd: RemotingCommand) -> RemotingCommand:
    async def go() -> RemotingCommand:
        async with TcpRemotingClient(RemotingConfig(name="test")) as client:
            return await client.invoke(ns_addr, cmd, 5)

    return anyio.run(go)


def test_kv_config_written_before_reply_and_loaded_at_start(rmqd_factory: Any, tmp_path: Path) -> None:
    path = tmp_path / "kv" / "kvConfig.json"
    ns = rmqd_factory(broker=False, namesrv_conf={"kvConfigPath": str(path)})
    put = req(RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T", "value": "broker-a:4"})
    assert _call(ns.namesrv_addr, put).code == ResponseCode.SUCCESS
    assert json.loads(path.read_text())["configTable"] == {"ORDER_TOPIC_CONFIG": {"T": "broker-a:4"}}
    assert _call(ns.namesrv_addr, req(RequestCode.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"})).code == 0
    assert _call(ns.namesrv_addr, req(RequestCode.DELETE_KV_CONFIG, {"namespace": "n", "key": "k"})).code == 0
    assert "n" not in json.loads(path.read_text())["configTable"]
    ns.stop()
    ns.start()
    r = _call(ns.namesrv_addr, req(RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T"}))
    assert r.code == ResponseCode.SUCCESS and r.ext["value"] == "broker-a:4"
    r = _call(ns.namesrv_addr, req(RequestCode.GET_KV_CONFIG, {"namespace": "n", "key": "k"}))
    assert r.code == ResponseCode.QUERY_NOT_FOUND


@pytest.mark.integration
def test_corrupt_kv_config_refuses_start(tmp_path: Path) -> None:
    path = tmp_path / "kvConfig.json"
    path.write_text('{"configTable": {"n": ')
    proc = RmqdProcess(tmp_path / "d", broker=False, namesrv_conf={"kvConfigPath": str(path)})
    done = subprocess.run(proc.command(), capture_output=True, timeout=60, cwd=proc.workdir, env=proc.env)
    assert done.returncode == 2
    errors = [line for line in done.stderr.decode().splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and str(path) in errors[0] and "kvConfigPath" in errors[0], done.stderr.decode()[-2000:]
