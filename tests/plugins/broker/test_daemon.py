"""rmqd processes: clean shutdown, several name servers, unregister on exit, drop on crash, store host."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rmq.kernel.net import local_ipv4 as reachable_ipv4
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.message import decode_offset_msg_id
from rmq.testing.daemon import call


def send(addr: str, topic: str, body: bytes, queue_id: int = 0) -> RemotingCommand:
    return call(addr, RequestCode.SEND_MESSAGE, {
        "producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": queue_id, "sysFlag": 0, "bornTimestamp": 0, "flag": 0, "properties": "TAGS\x01t"}, body)


def route_code(ns: str, topic: str) -> int:
    return call(ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code


def eventually(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(what)


def test_clean_shutdown_persists_and_unregisters(rmqd: Any) -> None:
    r = send(rmqd.broker_addr, "Shut", b"x", queue_id=1)
    assert r.code == 0
    ip, port, _ = decode_offset_msg_id(r.ext["msgId"])
    assert (ip, port) == ("127.0.0.1", rmqd.broker_port)  # the reachable address, not 0.0.0.0
    call(rmqd.broker_addr, RequestCode.UPDATE_CONSUMER_OFFSET,
         {"consumerGroup": "G", "topic": "Shut", "queueId": 1, "commitOffset": 1})
    store = Path(rmqd.workdir) / "store"
    assert (store / "abort").exists()
    assert rmqd.stop() == 0
    assert not (store / "abort").exists()
    assert (store / "checkpoint").exists()
    assert "Shut@G" in (store / "config" / "consumerOffset.json").read_text()
    assert "Shut" in json.loads((store / "config" / "topics.json").read_text())["topicConfigTable"]
    log = "\n".join(rmqd.log_lines())
    assert "unregistered from namesrv" in log and "broker metadata persisted" in log and "rmqd stopped" in log


def test_broker_registers_to_every_namesrv_and_unregisters(rmqd_factory: Any) -> None:
    ns1 = rmqd_factory(broker=False)
    ns2 = rmqd_factory(broker=False)
    broker = rmqd_factory(namesrv=False, broker_conf={
        "namesrvAddr": f"{ns1.namesrv_addr};{ns2.namesrv_addr}", "registerNameServerPeriod": 1000})
    assert send(broker.broker_addr, "Multi", b"x").code == 0
    for ns in (ns1, ns2):
        eventually(lambda ns=ns: route_code(ns.namesrv_addr, "Multi") == 0, 5, "route on every namesrv")
        info = json.loads(call(ns.namesrv_addr, RequestCode.GET_BROKER_CLUSTER_INFO).body)
        assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": broker.broker_addr}
    # a namesrv restarted empty learns the broker again within one registration period
    ns2.stop()
    ns2.start()
    eventually(lambda: route_code(ns2.namesrv_addr, "Multi") == 0, 5, "re-registered after namesrv restart")
    broker.stop()
    for ns in (ns1, ns2):
        assert route_code(ns.namesrv_addr, "Multi") == ResponseCode.TOPIC_NOT_EXIST


def test_namesrv_drops_crashed_broker_on_connection_close(rmqd_factory: Any) -> None:
    ns = rmqd_factory(broker=False)
    broker = rmqd_factory(namesrv=False, broker_conf={"namesrvAddr": ns.namesrv_addr})
    assert send(broker.broker_addr, "Crash", b"x").code == 0
    eventually(lambda: route_code(ns.namesrv_addr, "Crash") == 0, 5, "route registered")
    broker.kill()
    eventually(lambda: route_code(ns.namesrv_addr, "Crash") == ResponseCode.TOPIC_NOT_EXIST, 5, "route dropped")
    assert any("connection closed" in ln for ln in ns.log_lines())
    # after the crash the broker recovers and serves its messages again
    broker.start()
    r = call(broker.broker_addr, RequestCode.GET_MAX_OFFSET, {"topic": "Crash", "queueId": 0})
    assert r.code == 0 and r.ext["offset"] == "1"


def test_reachable_ipv4() -> None:
    ip = reachable_ipv4()
    parts = ip.split(".")
    assert len(parts) == 4 and all(0 <= int(p) <= 255 for p in parts)


def test_registration_retried_soon_when_the_namesrv_comes_up_late(rmqd_factory: Any) -> None:
    """A broker whose start-up registration failed (name server not up yet, or the round timed out on a
    loaded host) retries within seconds, not a whole registerNameServerPeriod (30 s) later."""
    from rmq.testing.daemon import free_port

    ns_port = free_port()
    broker = rmqd_factory(namesrv=False, broker_conf={"namesrvAddr": f"127.0.0.1:{ns_port}"})
    assert send(broker.broker_addr, "Late", b"x").code == 0
    eventually(lambda: any("register to namesrv" in ln and "failed" in ln for ln in broker.log_lines()), 10,
               "the failed first round is logged")
    ns = rmqd_factory(broker=False, namesrv_port=ns_port)
    eventually(lambda: route_code(ns.namesrv_addr, "Late") == 0, 15, "registered well before the 30 s period")


def test_a_broker_without_namesrv_addr_reads_the_environment(rmqd_factory: Any) -> None:
    """As RocketMQ's broker: no namesrvAddr configured and no name server in the process → $NAMESRV_ADDR."""
    ns = rmqd_factory(broker=False)
    broker = rmqd_factory(namesrv=False, env={"NAMESRV_ADDR": ns.namesrv_addr})
    assert send(broker.broker_addr, "FromEnv", b"x").code == 0
    eventually(lambda: route_code(ns.namesrv_addr, "FromEnv") == 0, 15, "registered to $NAMESRV_ADDR")
