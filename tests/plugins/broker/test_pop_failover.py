"""POP across a controller failover (issue #27 item 3): a name server, one controller, two brokers of
broker-a in controller mode. Messages popped on the master (one acked, two in flight, one never handed
out), then electMaster promotes the slave. The revive records reached the slave through the HA copy,
so the promoted slave hands out only the message never handed out at once, never the acked one,
accepts a receipt from the old master, and redelivers the unacked one after its invisible time with
its attempt count."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.client import Admin
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.message import decode_messages
from rmq.testing.daemon import RmqdProcess, eventually, free_port

pytestmark = pytest.mark.slow

REVIVE = "rmq_sys_REVIVE_LOG_DefaultCluster"


def call(addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
    async def go() -> RemotingCommand:
        async with TcpRemotingClient(RemotingConfig(name="pop-fo")) as c:
            return await c.invoke(addr, RemotingCommand.request(code, {k: str(v) for k, v in (ext or {}).items()},
                                                                body), 10)

    return anyio.run(go)


def info(p: RmqdProcess) -> dict[str, str]:
    return json.loads(call(p.broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO).body)["table"]  # type: ignore[no-any-return]


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
                "syncBrokerMetadataPeriod": 1000, "checkSyncStateSetPeriod": 1000}
        brokers = [start(RmqdProcess(tmp_path / f"b{i}", namesrv=False, broker_conf=conf)) for i in range(2)]

        def settled() -> tuple[RmqdProcess, RmqdProcess] | None:
            roles = [info(b)["controllerRole"] for b in brokers]
            if sorted(roles) != ["MASTER", "SLAVE"]:
                return None
            master = brokers[roles.index("MASTER")]
            if len(json.loads(info(master)["syncStateSet"])) != 2:
                return None
            return master, brokers[roles.index("SLAVE")]

        master, slave = eventually(settled, 60, "a master with its slave in the sync state set", interval=0.2)
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
        due = pop(m, 1, 6_000)
        popped_at = time.time()
        assert [x.body for x in decode_messages(due.body)] == [b"m2"]
        written = revive_records(m)
        assert written == 3  # two checkpoints, one ack
        eventually(lambda: revive_records(slave.broker_addr) == written, 30, "the revive records on the slave")

        async def switch(target: int) -> dict[str, str]:
            async with Admin(ns.namesrv_addr) as admin:
                return await admin.elect_master(ctl_addr, "DefaultCluster", "broker-a", target)

        assert anyio.run(switch, int(info(slave)["controllerBrokerId"]))["masterBrokerId"] != "0"
        eventually(lambda: (s := settled()) and s[0] is slave, 60, "the slave promoted")
        new = slave.broker_addr
        got = eventually(lambda: (r := pop(new, 32, 60_000)).code in (0, ResponseCode.PULL_NOT_FOUND) and r,
                         30, "pops served by the new master")
        assert [x.body for x in decode_messages(got.body)] == [b"m3"], "only what no pop handed out, at once"
        assert time.time() < popped_at + 6, "the machine was too slow to tell early from due"
        assert ack(new, first, 1).code == 0  # the old master's receipt retires m1
        later: list[Any] = []
        deadline = popped_at + 10 + 3
        while time.time() < deadline:
            r = pop(new, 32, 60_000)
            later += [(time.time(), x) for x in decode_messages(r.body)] if r.code == 0 else []
            time.sleep(0.2)
        assert [x.body for _, x in later] == [b"m2"], "m2 after its invisible time; m0 and m1 never"
        assert later[0][0] >= popped_at + 6 - 0.5 and later[0][1].reconsume_times == 1
    finally:
        for p in reversed(procs):
            p.stop()
