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

import pytest

from rmq.protocol.codes import RequestCode
from rmq.testing.daemon import Daemons, RmqdProcess, call

from .test_failover import info, wait
from .test_role_services import pulled, send

pytestmark = pytest.mark.slow

DELAY_S = 15  # longer than the switch takes: the old master must not be the one that delivers it
NO_SYNC = {"plugin": {"processors": {"broker": {"slave_sync_period_ms": 3_600_000, "slave_topic_probe_ms": 0}}}}


def topics(p: RmqdProcess) -> set[str]:
    r = call(p.broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG)
    assert r.code == 0
    return set(json.loads(r.body)["topicConfigTable"])


def test_a_promoted_slave_delivers_a_timer_message_for_a_topic_it_had_not_synced(tmp_path: Path) -> None:
    with Daemons() as procs:
        group = procs.controller_group(tmp_path, 2, broker_extra=NO_SYNC, timerPrecisionMs=100)
        master, slave = group.settled()
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

        old = master
        master, _ = group.elect(slave)
        got = wait(lambda: [m for m in pulled(master.broker_addr, "TT") if m.body == b"timed"], DELAY_S + 30,
                   "the timer message delivered by the promoted slave")
        assert got[0].store_host == master.broker_addr != old.broker_addr
        assert "TT" in topics(master)
