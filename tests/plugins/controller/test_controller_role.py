"""Three rmqd processes in the controller role (Raft by pysyncobj) answering RocketMQ's controller codes:
a broker set registers, elects, alters its SyncStateSet; the state survives the leader's SIGKILL and a
full restart; followers say who leads."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.testing.daemon import RmqdProcess, call, free_port

pytestmark = pytest.mark.integration  # starts rmqd processes itself (tests/conftest.py: tiers)


def beat(addr: str, bid: int, epoch: int = 0, max_offset: int = 0) -> None:
    call(addr, RequestCode.BROKER_HEARTBEAT, {"clusterName": "C", "brokerName": "b", "brokerAddr": f"127.0.0.1:{bid}",
                                              "brokerId": bid, "epoch": epoch, "maxOffset": max_offset,
                                              "heartbeatTimeoutMills": 60_000})


@pytest.fixture
def controllers(tmp_path: Any) -> Any:
    ports = [free_port() for _ in range(3)]
    peers = ";".join(f"n{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
    procs = [RmqdProcess(tmp_path / f"c{i}", namesrv=False, broker=False, extra={"controller": {
        "controllerDLegerPeers": peers, "controllerDLegerSelfId": f"n{i}", "listenHost": "127.0.0.1",
        "controllerStorePath": str(tmp_path / f"c{i}" / "ctl"), "scanNotActiveBrokerInterval": 1000,
        "raftPassword": "test-raft-secret"}})
        for i in range(3)]
    for p, port in zip(procs, ports, strict=True):
        p.ctl_addr = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
        p.start()
    yield procs
    for p in procs:
        p.stop()


def leader(procs: list[RmqdProcess], timeout: float = 30) -> RmqdProcess:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.proc is None or p.proc.poll() is not None:
                continue
            try:
                r = call(addr(p), RequestCode.CONTROLLER_GET_METADATA_INFO)
            except Exception:
                continue
            if r.ext.get("isLeader") == "true":
                return p
        time.sleep(0.1)
    raise AssertionError("no controller leader")


def addr(p: RmqdProcess) -> str:
    return p.ctl_addr  # type: ignore[attr-defined,no-any-return]


def test_broker_set_lifecycle_on_three_controllers(controllers: list[RmqdProcess]) -> None:
    lead = leader(controllers)
    la = addr(lead)
    follower = next(p for p in controllers if p is not lead)
    meta = call(addr(follower), RequestCode.CONTROLLER_GET_METADATA_INFO).ext
    assert meta["isLeader"] == "false" and meta["controllerLeaderAddress"] == la and meta["peers"].count(";") == 3
    r = call(addr(follower), RequestCode.CONTROLLER_APPLY_BROKER_ID,
             {"clusterName": "C", "brokerName": "b", "appliedBrokerId": 1, "registerCheckCode": "127.0.0.1:1;x"})
    assert r.code == ResponseCode.CONTROLLER_NOT_LEADER
    for bid in (1, 2, 3):
        nxt = call(la, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": "C", "brokerName": "b"})
        assert nxt.ext["nextBrokerId"] == str(bid)
        r = call(la, RequestCode.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "C", "brokerName": "b",
                                                               "appliedBrokerId": bid,
                                                               "registerCheckCode": f"127.0.0.1:{bid};t{bid}"})
        assert r.code == 0, r.remark
        beat(la, bid)
        r = call(la, RequestCode.CONTROLLER_REGISTER_BROKER, {"clusterName": "C", "brokerName": "b", "brokerId": bid,
                                                               "brokerAddress": f"127.0.0.1:{bid}"})
        assert r.code == 0 and json.loads(r.body)["syncStateSet"] == ([] if bid == 1 else [1])
        if bid == 1:  # no master yet: the first broker asks for itself
            r = call(la, RequestCode.CONTROLLER_ELECT_MASTER, {"clusterName": "C", "brokerName": "b", "brokerId": 1})
            assert r.code == 0 and r.ext["masterBrokerId"] == "1" and r.ext["masterEpoch"] == "1"
    r = call(la, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
             {"brokerName": "b", "masterBrokerId": 1, "masterEpoch": 1},
             json.dumps({"syncStateSet": [1, 2, 3], "syncStateSetEpoch": 1}).encode())
    assert r.code == 0 and r.ext["newSyncStateSetEpoch"] == "2"
    # the leader dies: a new one has the same state
    lead.kill()
    rest = [p for p in controllers if p is not lead]
    lead2 = leader(rest)
    data = json.loads(call(addr(lead2), RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=b'["b"]').body)
    info = data["replicasInfoTable"]["b"]
    assert info["masterBrokerId"] == 1 and info["masterEpoch"] == 1 and info["syncStateSetEpoch"] == 2
    assert [m["brokerId"] for m in info["inSyncReplicas"]] == [1, 2, 3]
    # the master (id 1) stops heartbeating: the new leader elects the most advanced in-sync replica
    for _ in range(3):
        call(addr(lead2), RequestCode.BROKER_HEARTBEAT, {"clusterName": "C", "brokerName": "b",
             "brokerAddr": "127.0.0.1:1", "brokerId": 1, "heartbeatTimeoutMills": 1})
        beat(addr(lead2), 2, 1, 100)
        beat(addr(lead2), 3, 1, 300)
        time.sleep(0.3)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        beat(addr(lead2), 2, 1, 100)
        beat(addr(lead2), 3, 1, 300)
        r = call(addr(lead2), RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "b"})
        if r.ext.get("masterBrokerId") == "3":
            break
        time.sleep(0.3)
    assert r.ext.get("masterBrokerId") == "3" and r.ext["masterEpoch"] == "2", r.ext
    # every node, the killed one included, comes back with the state from its journal
    for p in controllers:
        p.stop()
    for p in controllers:
        p.start()
    lead3 = leader(controllers)
    r = call(addr(lead3), RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "b"})
    assert r.code == 0 and r.ext["masterEpoch"] == "2" and json.loads(r.body)["syncStateSet"] == [3]
