"""confirmOffset in controller mode (issue #27 item 2): consumers see only what every SyncStateSet member
holds, on the master and on the slaves, and a restarted master confirms no more than its slaves held.

A name server, three controllers, broker-a as a master and two slaves, allAckInSyncStateSet (RocketMQ
5.2+ confirms the master's whole log without it: ``CommitLog.getConfirmOffset``), and a large
haMaxTimeSlaveNotCatchup so the stalled slave stays in the SyncStateSet. Slave A is stalled with
SIGSTOP; WAIT=false sends are stored on the master (and copied to slave B) but neither the master
nor B serves them until A resumes and acknowledges.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from rmq.protocol.codes import RequestCode
from rmq.testing.daemon import Daemons, RmqdProcess

from .test_failover import _records, call, info, start_group, wait

pytestmark = pytest.mark.slow


def send(addr: str, body: bytes, wait_store: bool) -> Any:
    return call(addr, RequestCode.SEND_MESSAGE, {
        "producerGroup": "PG", "topic": "CF", "defaultTopic": "TBW102", "defaultTopicQueueNums": "1",
        "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0",
        "properties": f"WAIT\x01{'true' if wait_store else 'false'}"}, body)


def readable(addr: str) -> list[bytes]:
    """Every body a consumer pulling queue 0 of CF from ``addr`` gets now."""
    out: list[bytes] = []
    offset = 0
    while True:
        r = call(addr, RequestCode.PULL_MESSAGE, {
            "consumerGroup": "check", "topic": "CF", "queueId": 0, "queueOffset": offset, "maxMsgNums": 32,
            "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0,
            "expressionType": "TAG"})
        if r.code != 0:
            return out
        out += [m.body for m in _records(r.body)]
        offset = int(r.ext["nextBeginOffset"])


def offsets(p: RmqdProcess) -> tuple[int, int]:
    """(confirmOffset, commitLogMaxOffset) from runtime info."""
    t = info(p)
    return int(t.get("confirmOffset", -1)), int(t["commitLogMaxOffset"])


def test_consumers_read_only_what_every_sync_state_set_member_holds(tmp_path: Path) -> None:
    stopped: list[RmqdProcess] = []
    with Daemons() as procs:
        try:
            ns, _ctls, brokers, _ = start_group(
                tmp_path, procs, 3, allAckInSyncStateSet=True, haMaxTimeSlaveNotCatchup=300_000,
                controllerHeartBeatTimeoutMills=60_000, brokerHeartbeatInterval=500, syncBrokerMetadataPeriod=1000,
                checkSyncStateSetPeriod=1000, registerNameServerPeriod=2000, slaveTimeout=3000)

            def role(b: RmqdProcess) -> str:
                return info(b)["controllerRole"]

            def settled() -> bool:
                ms = [b for b in brokers if role(b) == "MASTER"]
                return len(ms) == 1 and len(json.loads(info(ms[0])["syncStateSet"])) == 3

            wait(settled, 90, "one master with all three brokers in its SyncStateSet")
            master = next(b for b in brokers if role(b) == "MASTER")
            a, b = (x for x in brokers if x is not master)
            first = [b"held-%03d" % i for i in range(10)]
            for body in first:
                assert send(master.broker_addr, body, True).code == 0
            wait(lambda: readable(master.broker_addr) == first, 30, "the master serves what all members hold")
            wait(lambda: readable(b.broker_addr) == first, 30, "a slave serves what its master confirmed")

            def stall(x: RmqdProcess) -> None:
                assert x.proc is not None
                x.proc.send_signal(signal.SIGSTOP)
                stopped.append(x)

            def resume(x: RmqdProcess) -> None:
                assert x.proc is not None
                x.proc.send_signal(signal.SIGCONT)
                stopped.remove(x)

            def stall_a_then_send(prefix: bytes) -> tuple[int, list[bytes]]:
                """Slave A stalls once it holds the master's whole log, then 20 WAIT=false sends: (the log
                end A holds, the bodies sent)."""
                end = offsets(master)[1]
                wait(lambda: offsets(a)[1] == end, 30, "slave A holds the master's whole log")
                stall(a)
                bodies = [b"%s-%03d" % (prefix, i) for i in range(20)]
                for body in bodies:
                    assert send(master.broker_addr, body, False).code == 0
                return end, bodies

            # slave A stalls: WAIT=false sends are stored (and copied to B), served by nobody
            end, second = stall_a_then_send(b"more")
            m_max = offsets(master)[1]
            wait(lambda: offsets(b)[1] == m_max, 30, "slave B holds every byte")
            assert readable(master.broker_addr) == first
            assert readable(b.broker_addr) == first
            assert call(master.broker_addr, RequestCode.GET_MAX_OFFSET, {"topic": "CF", "queueId": 0}).ext[
                "offset"] == "10"
            assert offsets(master)[0] == end < m_max  # in runtime info
            assert offsets(b)[0] <= end  # B learns the master's confirm offset, not its own end

            # A resumes and acknowledges: everything is served, by the master and by B
            resume(a)
            wait(lambda: readable(master.broker_addr) == first + second, 30, "the master serves all once A acks")
            wait(lambda: readable(b.broker_addr) == first + second, 30, "slave B serves all once told")
            wait(lambda: offsets(b)[0] == m_max, 30, "B's confirm offset reaches the log end")

            # the master restarts while A stalls: it confirms no more than A held
            end, third = stall_a_then_send(b"late")
            assert offsets(master)[0] == end
            master.kill()
            master.start()
            wait(lambda: role(master) == "MASTER", 60, "the master is master again (same epoch)")
            m_confirm, m_max = offsets(master)
            assert m_confirm <= end < m_max, (m_confirm, end, m_max)
            assert readable(master.broker_addr) == first + second
            resume(a)
            wait(lambda: readable(master.broker_addr) == first + second + third, 60, "all served once A acks")
            wait(lambda: readable(b.broker_addr) == first + second + third, 30, "and by slave B")
        finally:
            for x in stopped:
                if x.proc is not None:
                    x.proc.send_signal(signal.SIGCONT)
