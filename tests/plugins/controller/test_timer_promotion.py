"""A timer message parked on a master for a topic its slave has no config of yet is delivered by the
slave once it is promoted (controller mode, a switch by electMaster).

The slave holds the parked message (replicated into ``rmq_sys_wheel_timer``) but not the topic's
config: the metadata sync had not copied it (here it is held off for the whole test), and the topic
has no consume queue on the slave, so promotion adopts nothing for it. The new master's timer service
replays the staging queue and, when the message is due, must give the topic a config as the delay
level service does; before, the store refused the put and the timer message was dropped.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from rmq.client import Admin
from rmq.protocol.codes import RequestCode
from rmq.testing.daemon import RmqdProcess, free_port

from .test_failover import call, info, wait
from .test_role_services import pulled, send

pytestmark = pytest.mark.slow

DELAY_S = 15  # longer than the switch takes: the old master must not be the one that delivers it
NO_SYNC = {"plugin": {"processors": {"broker": {"slave_sync_period_ms": 3_600_000, "slave_topic_probe_ms": 0}}}}


def topics(p: RmqdProcess) -> set[str]:
    r = call(p.broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG)
    assert r.code == 0
    return set(json.loads(r.body)["topicConfigTable"])


def test_a_promoted_slave_delivers_a_timer_message_for_a_topic_it_had_not_synced(tmp_path: Path) -> None:
    procs: list[RmqdProcess] = []

    def start(p: RmqdProcess) -> RmqdProcess:
        procs.append(p)
        return p.start()

    try:
        ns = start(RmqdProcess(tmp_path / "ns", broker=False))
        ctl_addr = f"127.0.0.1:{free_port()}"
        start(RmqdProcess(tmp_path / "c0", namesrv=False, broker=False, extra={"controller": {
            "controllerDLegerPeers": f"n0-{ctl_addr}", "controllerDLegerSelfId": "n0", "listenHost": "127.0.0.1",
            "scanNotActiveBrokerInterval": 1000, "controllerStorePath": str(tmp_path / "c0" / "ctl")}}))
        conf = {"namesrvAddr": ns.namesrv_addr, "enableControllerMode": True, "controllerAddr": ctl_addr,
                "mappedFileSizeCommitLog": 1024 * 1024, "brokerHeartbeatInterval": 500,
                "syncBrokerMetadataPeriod": 1000, "checkSyncStateSetPeriod": 1000, "timerPrecisionMs": 100}
        brokers = [start(RmqdProcess(tmp_path / f"b{i}", namesrv=False, broker_conf=conf, extra=NO_SYNC))
                   for i in range(2)]

        def settled() -> tuple[RmqdProcess, RmqdProcess] | None:
            roles = [info(b)["controllerRole"] for b in brokers]
            if sorted(roles) != ["MASTER", "SLAVE"]:
                return None
            master = brokers[roles.index("MASTER")]
            if len(json.loads(info(master)["syncStateSet"])) != 2:
                return None
            return master, brokers[roles.index("SLAVE")]

        master, slave = wait(settled, 60, "a master with its slave in the sync state set")
        # the slave's one metadata sync (on learning its master) is done before the topic exists
        wait(lambda: "topic config synced from master" in slave.log_path.read_text(), 30, "the slave's first sync")
        r = call(master.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "TT", "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
        assert r.code == 0, r.remark
        r = send(master.broker_addr, "TT", b"timed", f"TIMER_DELAY_SEC\x01{DELAY_S}\x02WAIT\x01false\x02")
        assert r.code == 0, r.remark
        end = int(info(master)["commitLogMaxOffset"])
        wait(lambda: int(info(slave)["commitLogMaxOffset"]) >= end, 30, "the parked message replicated")
        assert "TT" not in topics(slave)  # what makes the case: the new master has no config for the topic

        async def switch(target: int) -> dict[str, str]:
            async with Admin(ns.namesrv_addr) as admin:
                return await admin.elect_master(ctl_addr, "DefaultCluster", "broker-a", target)

        slave_id = int(info(slave)["controllerBrokerId"])
        assert anyio.run(switch, slave_id)["masterBrokerId"] == str(slave_id)
        old = master
        master, _ = wait(lambda: (s := settled()) and s[0] is slave and s, 60, "roles swap")
        got = wait(lambda: [m for m in pulled(master.broker_addr, "TT") if m.body == b"timed"], DELAY_S + 30,
                   "the timer message delivered by the promoted slave")
        assert got[0].store_host == master.broker_addr != old.broker_addr
        assert "TT" in topics(master)
    finally:
        for p in reversed(procs):
            p.stop()
