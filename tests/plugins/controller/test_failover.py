"""Automatic failover end to end: a name server, three controllers, three brokers of one brokerName in
controller mode with allAckInSyncStateSet.

A send stream runs against whoever is master; the master is SIGKILLed; a new master is elected
from the SyncStateSet and takes sends; every acknowledged message is on it exactly once; the old
master comes back as a slave of the new epoch, with its log cut back to what the new master has.
Then the controller leader is SIGKILLed, and the new master too: the group still elects a master.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import anyio
import pytest

from rmq.client import Admin
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.message import decode_message
from rmq.testing.daemon import ControllerGroup, Daemons, RmqdProcess, call, eventually, runtime_info

pytestmark = pytest.mark.slow


def info(p: RmqdProcess) -> dict[str, str]:
    return runtime_info(p.broker_addr)


def wait(pred: Any, timeout: float, what: str) -> Any:
    return eventually(pred, timeout, what, interval=0.2)


def start_group(tmp_path: Any, procs: Daemons, n_brokers: int, **broker: Any) -> ControllerGroup:
    """A name server, three controllers (with a Raft password) and ``n_brokers`` brokers of broker-a."""
    return procs.controller_group(tmp_path, n_brokers, controllers=3, raft_password="test-raft-secret", **broker)


def send_ext(i: int) -> dict[str, str]:
    return {"producerGroup": "PG", "topic": "FO", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
            "queueId": str(i % 4), "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": "WAIT\x01true"}


def test_master_killed_new_master_elected_nothing_acknowledged_lost(tmp_path: Any) -> None:
    with Daemons() as procs:
        group = start_group(tmp_path, procs, 3, allAckInSyncStateSet=True, controllerHeartBeatTimeoutMills=3000,
                            haMaxTimeSlaveNotCatchup=5000, registerNameServerPeriod=2000, slaveTimeout=3000)
        ns, controllers, brokers, ctl_addrs = group

        def roles() -> dict[str, RmqdProcess]:
            return {info(b)["controllerRole"] + str(k): b for k, b in enumerate(brokers)
                    if b.proc is not None and b.proc.poll() is None}

        master = group.settled()[0]

        acked: dict[bytes, int] = {}
        stop = threading.Event()
        state = {"addr": master.broker_addr}

        def current_master() -> str:
            r = call(ns.namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "FO"})
            if r.code != 0:
                return ""
            addrs = json.loads(r.body)["brokerDatas"][0]["brokerAddrs"]
            return addrs.get("0", "")

        first_after_kill: list[float] = []
        killed_at: list[float] = []

        async def stream() -> None:
            i = 0
            async with TcpRemotingClient(RemotingConfig(name="stream")) as c:
                while not stop.is_set():
                    body = b"m-%06d" % i  # a new body per attempt: a resent one could be stored twice
                    i += 1
                    try:
                        r = await c.invoke(state["addr"], RemotingCommand.request(
                            RequestCode.SEND_MESSAGE, send_ext(i), body), 5)
                    except Exception:
                        r = None
                    if r is not None and r.code == 0:
                        acked[body] = int(r.ext["queueOffset"])
                        if killed_at and not first_after_kill:
                            first_after_kill.append(time.monotonic())
                    else:
                        await anyio.sleep(0.2)
                        try:
                            addr = await anyio.to_thread.run_sync(current_master)
                        except Exception:
                            addr = ""
                        if addr:
                            state["addr"] = addr

        t = threading.Thread(target=anyio.run, args=(stream,))
        t.start()
        wait(lambda: len(acked) >= 200, 60, "sends acknowledged by the first master")
        killed_at.append(time.monotonic())
        master.kill()
        wait(lambda: first_after_kill, 60, "a send acknowledged after the master died")
        failover_s = first_after_kill[0] - killed_at[0]
        n_before = len(acked)
        wait(lambda: len(acked) >= n_before + 100, 60, "sends go on with the new master")
        stop.set()
        t.join(30)
        new = next(b for k, b in roles().items() if k.startswith("MASTER"))
        assert new is not master
        print(f"failover: first acknowledged send {failover_s:.2f} s after the SIGKILL")  # noqa: T201

        # every acknowledged message is on the new master, exactly once
        seen: dict[bytes, int] = {}
        for q in range(4):
            offset = 0
            while True:
                r = call(new.broker_addr, RequestCode.PULL_MESSAGE, {
                    "consumerGroup": "check", "topic": "FO", "queueId": q, "queueOffset": offset, "maxMsgNums": 32,
                    "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
                    "subVersion": 0, "expressionType": "TAG"})
                if r.code != 0:
                    break
                for m in _records(r.body):
                    seen[m.body] = seen.get(m.body, 0) + 1
                offset = int(r.ext["nextBeginOffset"])
        missing = [b for b in acked if b not in seen]
        assert not missing, f"{len(missing)} acknowledged messages missing, e.g. {missing[:3]}"
        assert all(seen[b] == 1 for b in acked)

        # the old master returns as a slave of the new epoch and converges on the new master's log
        master.start()
        wait(lambda: info(master)["controllerRole"] == "SLAVE", 60, "the old master comes back as a slave")
        end = int(info(new)["commitLogMaxOffset"])
        wait(lambda: int(info(master)["commitLogMaxOffset"]) >= end, 60, "the old master caught up")
        a = b"".join(p.read_bytes() for p in sorted((master.workdir / "store" / "commitlog").iterdir()))
        b = b"".join(p.read_bytes() for p in sorted((new.workdir / "store" / "commitlog").iterdir()))
        assert a[:end] == b[:end]

        # what the controllers know, through our client's admin
        async def admin_view() -> tuple[dict[str, str], dict[str, Any]]:
            async with Admin(ns.namesrv_addr) as admin:
                meta = await admin.controller_metadata(ctl_addrs[0])
                data = await admin.sync_state_data(ctl_addrs[0], ["broker-a"])
                return meta, data

        meta, data = anyio.run(admin_view)
        group = data["broker-a"]
        assert group["masterAddress"] == new.broker_addr and group["masterEpoch"] == 2
        assert meta["controllerLeaderAddress"] in ctl_addrs

        # the controller leader dies, then the new master: the group still gets a master
        leader = controllers[ctl_addrs.index(meta["controllerLeaderAddress"])]
        wait(lambda: len(json.loads(info(new)["syncStateSet"])) == 3, 30, "the old master back in the set")
        leader.kill()
        new.kill()
        third = wait(lambda: next((b for k, b in roles().items() if k.startswith("MASTER")), None), 60,
                     "a master after losing the controller leader and the second master")
        assert third is not new
        wait(lambda: send_and_ack(third.broker_addr), 30, "the third master takes sends")


def send_and_ack(addr: str) -> bool:
    return call(addr, RequestCode.SEND_MESSAGE, send_ext(0), b"after").code == 0  # type: ignore[no-any-return]


def _records(body: bytes) -> list[Any]:
    out = []
    pos = 0
    while pos + 4 <= len(body):
        size = int.from_bytes(body[pos : pos + 4], "big")
        out.append(decode_message(body[pos : pos + size]))
        pos += size
    return out


def test_a_master_cut_off_from_the_controllers_stops_taking_writes(tmp_path: Any) -> None:
    import signal

    with Daemons() as procs:
        _ns, controllers, (master,), _ = start_group(tmp_path, procs, 1, controllerHeartBeatTimeoutMills=3000,
                                                     syncBrokerMetadataPeriod=500)
        wait(lambda: info(master)["controllerRole"] == "MASTER", 60, "the only broker is master")
        wait(lambda: send_and_ack(master.broker_addr), 20, "the master takes sends")
        for c in controllers:  # the controllers become unreachable (a partition, as the master sees it)
            assert c.proc is not None
            c.proc.send_signal(signal.SIGSTOP)
        try:
            wait(lambda: "fenced" in info(master), 20, "the master fences itself")
            r = call(master.broker_addr, RequestCode.SEND_MESSAGE, send_ext(1), b"while cut off")
            assert r.code != 0  # not acknowledged: a newer master may exist
        finally:
            for c in controllers:
                assert c.proc is not None
                c.proc.send_signal(signal.SIGCONT)
        wait(lambda: send_and_ack(master.broker_addr), 60, "writes resume once the controllers answer")
        assert any("fenced" in ln for ln in master.log_lines())


def test_a_stalled_slave_leaves_the_sync_state_set_and_rejoins(tmp_path: Any) -> None:
    import signal

    with Daemons() as procs:
        group = start_group(tmp_path, procs, 2, allAckInSyncStateSet=True, controllerHeartBeatTimeoutMills=30000,
                            checkSyncStateSetPeriod=500, haMaxTimeSlaveNotCatchup=3000, slaveTimeout=1000)
        ns, ctl_addrs = group.namesrv, group.controller_addrs

        def sss(b: RmqdProcess) -> list[int]:
            return json.loads(info(b)["syncStateSet"])  # type: ignore[no-any-return]

        master, slave = group.settled()
        assert send_and_ack(master.broker_addr)
        assert slave.proc is not None
        slave.proc.send_signal(signal.SIGSTOP)
        try:
            r = call(master.broker_addr, RequestCode.SEND_MESSAGE, send_ext(1), b"waits for the set")
            assert r.code == 12  # FLUSH_SLAVE_TIMEOUT: a member of the set does not acknowledge
            wait(lambda: len(sss(master)) == 1, 30, "the stalled slave leaves the sync state set")
            assert send_and_ack(master.broker_addr)  # the set is the master alone: sends go through
        finally:
            slave.proc.send_signal(signal.SIGCONT)
        wait(lambda: len(sss(master)) == 2, 30, "the slave rejoins once caught up")
        assert send_and_ack(master.broker_addr)

        # a manual switch through our client's admin (ELECT_MASTER with designateElect)
        slave_id = int(info(slave)["controllerBrokerId"])

        async def switch() -> tuple[dict[str, str], dict[str, Any]]:
            async with Admin(ns.namesrv_addr) as admin:
                elected = await admin.elect_master(ctl_addrs[0], "DefaultCluster", "broker-a", slave_id)
                return elected, await admin.replica_info(ctl_addrs[1], "broker-a")

        elected, replica = anyio.run(switch)
        assert elected["masterBrokerId"] == str(slave_id) and replica["masterAddress"] == slave.broker_addr
        wait(lambda: info(slave)["controllerRole"] == "MASTER" and info(master)["controllerRole"] == "SLAVE", 30,
             "the roles swap")
        wait(lambda: send_and_ack(slave.broker_addr), 30, "the new master takes sends")
