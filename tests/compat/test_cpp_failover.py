"""The official C++ client through an automatic failover: a steady sync send stream to a broker group in
controller mode, the master SIGKILLed; the stream resumes on the elected master without restarting the
client, and every message the client saw acknowledged is on the new master exactly once."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from rmq.protocol.codes import RequestCode
from rmq.protocol.message import decode_message
from rmq.testing.daemon import RmqdProcess, free_port


@pytest.mark.slow  # spans the C++ client's 30 s route refresh, a master death and an election: ~65-100 s
def test_cpp_producer_resumes_on_the_new_master(rmqd_factory: Any, cpp: Any, compat: Any, tmp_path: Any) -> None:
    ports = [free_port() for _ in range(3)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
    ns = rmqd_factory(broker=False)
    for i in range(3):
        rmqd_factory(namesrv=False, broker=False, extra={"controller": {
            "controllerDLegerPeers": peers, "controllerDLegerSelfId": f"n{i}", "listenHost": "127.0.0.1",
            "scanNotActiveBrokerInterval": 1000, "controllerStorePath": str(tmp_path / f"ctl{i}"),
            "raftPassword": "test-raft-secret"}})
    conf = {"namesrvAddr": ns.namesrv_addr, "enableControllerMode": True,
            "controllerAddr": ";".join(f"127.0.0.1:{p}" for p in ports), "allAckInSyncStateSet": True,
            "controllerHeartBeatTimeoutMills": 3000, "brokerHeartbeatInterval": 500, "syncBrokerMetadataPeriod": 1000,
            "checkSyncStateSetPeriod": 1000, "registerNameServerPeriod": 2000, "mappedFileSizeCommitLog": 1024 * 1024}
    brokers: list[RmqdProcess] = [rmqd_factory(namesrv=False, broker_conf=conf) for _ in range(2)]

    def table(b: RmqdProcess) -> dict[str, str]:
        return json.loads(compat.admin(b.broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]  # type: ignore[no-any-return]

    def master() -> RmqdProcess | None:
        for b in brokers:
            if b.proc is not None and b.proc.poll() is None and table(b).get("controllerRole") == "MASTER":
                return b
        return None

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = master()
        if m is not None and len(json.loads(table(m)["syncStateSet"])) == 2:
            break
        time.sleep(0.2)
    m = master()
    assert m is not None
    r = compat.admin(m.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": "CompatFO", "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
    assert r.code == 0
    deadline = time.monotonic() + 10
    while compat.admin(ns.namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "CompatFO"}).code != 0:
        assert time.monotonic() < deadline, "route of CompatFO"
        time.sleep(0.1)
    n = 500  # 50 s at 100 ms per send: the C++ client re-reads routes every 30 s
    p = cpp("produce", namesrv=ns.namesrv_addr, topic="CompatFO", count=n, method="sync", interval_ms=100,
            stop_on_error=False)
    p.wait(lambda: len([ln for ln in p.lines if ln.get("status") == 0]) >= 30, 60, "sends before the kill")
    m.kill()
    lines = p.finish(180)
    ok = [ln for ln in lines if "i" in ln and ln.get("status") == 0]
    failed = [ln for ln in lines if "i" in ln and "error" in ln]
    assert ok[-1]["i"] == n - 1, failed[-3:]  # the stream ended on the new master, same client
    new = master()
    assert new is not None and new is not m
    bodies: dict[str, int] = {}
    for q in range(4):
        offset = 0
        while True:
            r = compat.admin(new.broker_addr, RequestCode.PULL_MESSAGE, {
                "consumerGroup": "check", "topic": "CompatFO", "queueId": q, "queueOffset": offset,
                "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
                "subVersion": 0, "expressionType": "TAG"})
            if r.code != 0:
                break
            pos = 0
            while pos < len(r.body):
                size = int.from_bytes(r.body[pos : pos + 4], "big")
                body = decode_message(r.body[pos : pos + size]).body.decode()
                bodies[body] = bodies.get(body, 0) + 1
                pos += size
            offset = int(r.ext["nextBeginOffset"])
    for ln in ok:
        assert bodies.get(f"body-{ln['i']}") == 1, ln
