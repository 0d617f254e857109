"""POP across a controller failover (issue #27 item 3): a name server, one controller, two brokers of
broker-a in controller mode. Messages popped on the master (one acked, two in flight, one never handed
out), then electMaster promotes the slave. The revive records reached the slave through the HA copy,
so the promoted slave hands out only the message never handed out at once, never the acked one,
accepts a receipt from the old master, and redelivers the unacked one after its invisible time with
its attempt count."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.message import decode_messages
from rmq.testing.daemon import Daemons, call, eventually

pytestmark = pytest.mark.slow

REVIVE = "rmq_sys_REVIVE_LOG_DefaultCluster"
# m2's invisible time: the failover must end before it (elections take seconds on a busy shared machine)
DUE_S = 20


def pop(addr: str, n: int, invisible_ms: int) -> RemotingCommand:
    return call(addr, 200050, {"consumerGroup": "CG_FO", "topic": "PopFO", "queueId": "-1", "maxMsgNums": n,
                               "invisibleTime": invisible_ms, "pollTime": 0, "bornTime": 0, "initMode": 0,
                               "expType": "TAG", "exp": "*", "order": "false"})


def ack(addr: str, popped: RemotingCommand, offset: int) -> RemotingCommand:
    e = popped.ext
    extra = f"{offset} {e['popTime']} {e['invisibleTime']} {e['reviveQid']} 0 broker-a 0 {offset}"
    return call(addr, 200051, {"consumerGroup": "CG_FO", "topic": "PopFO", "queueId": 0, "offset": offset,
                               "extraInfo": extra})


def revive_records(addr: str) -> int:
    """How many revive records a broker's store holds (a slave serves what it holds, read-only)."""
    n = 0
    for q in range(8):
        r = call(addr, RequestCode.GET_MAX_OFFSET, {"topic": REVIVE, "queueId": q})
        n += int(r.ext.get("offset", 0)) if r.code == 0 else 0
    return n


def test_a_promoted_slave_keeps_the_pop_state(tmp_path: Path) -> None:
    with Daemons() as procs:
        group = procs.controller_group(tmp_path, 2)
        master, slave = group.settled()
        assert call(master.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "PopFO", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6, "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": 0, "order": "false"}).code == 0
        for i in range(4):
            assert call(master.broker_addr, RequestCode.SEND_MESSAGE, {
                "producerGroup": "PG", "topic": "PopFO", "queueId": 0, "sysFlag": 0, "bornTimestamp": 0, "flag": 0,
                "properties": ""}, b"m%d" % i).code == 0
        m = master.broker_addr
        first = eventually(lambda: (r := pop(m, 2, 10_000)).code == 0 and r, 30, "the first pop")
        assert [x.body for x in decode_messages(first.body)] == [b"m0", b"m1"]
        assert ack(m, first, 0).code == 0
        due = pop(m, 1, DUE_S * 1000)
        popped_at = time.time()
        assert [x.body for x in decode_messages(due.body)] == [b"m2"]
        written = revive_records(m)
        assert written == 3  # two checkpoints, one ack
        eventually(lambda: revive_records(slave.broker_addr) == written, 30, "the revive records on the slave")

        group.elect(slave)
        new = slave.broker_addr
        got = eventually(lambda: (r := pop(new, 32, 60_000)).code in (0, ResponseCode.PULL_NOT_FOUND) and r,
                         30, "pops served by the new master")
        assert time.time() < popped_at + DUE_S, "the machine was too slow to tell early from due"
        assert [x.body for x in decode_messages(got.body)] == [b"m3"], "only what no pop handed out, at once"
        assert ack(new, first, 1).code == 0  # the old master's receipt retires m1
        later: list[Any] = []
        deadline = popped_at + DUE_S + 7  # the revive scan brings it back within seconds of due
        while time.time() < deadline:
            r = pop(new, 32, 60_000)
            later += [(time.time(), x) for x in decode_messages(r.body)] if r.code == 0 else []
            time.sleep(0.2)
        assert [x.body for _, x in later] == [b"m2"], "m2 after its invisible time; m0 and m1 never"
        assert later[0][0] >= popped_at + DUE_S - 0.5 and later[0][1].reconsume_times == 1
