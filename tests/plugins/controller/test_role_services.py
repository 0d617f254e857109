"""Master-only services follow the role: a name server, one controller, two brokers of broker-a in
controller mode, switched back and forth with electMaster (issue #27 item 1).

Both brokers start as RocketMQ's do in controller mode (fenced, then the controller names the
master), so a broker never is a master "at start". After every switch: the master runs the
schedule, timer and transaction check services and the third-party ``role_journal`` plugin
(``roleServices`` in runtime info, and the plugin's own journal), the slave runs none of them; a
delay-level message sent to the master is delivered; a consumer retry sent back to the old master
(parked behind delay level 3) is delivered by the new one after its promotion.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmq.protocol.codes import RequestCode
from rmq.testing.daemon import Daemons, RmqdProcess, call

from .test_failover import _records, info, wait

pytestmark = pytest.mark.slow

# the waits below read the loop's current brokers and bodies on purpose
# ruff: noqa: B023

MASTER_SERVICES = {"schedule", "timer", "transaction_check", "pop_revive", "role_journal"}
RETRY_DELAY_S = 8  # delay level 3, which a first send-back uses: longer than a switch takes


def services(p: RmqdProcess) -> set[str]:
    return {s for s in info(p).get("roleServices", "").split(",") if s}


def journal(p: RmqdProcess) -> list[dict[str, Any]]:
    path = p.workdir / "store" / "config" / "role-journal.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def send(addr: str, topic: str, body: bytes, props: str = "") -> Any:
    return call(addr, RequestCode.SEND_MESSAGE, {
        "producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "1",
        "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": props}, body)


def pulled(addr: str, topic: str) -> list[Any]:
    out, offset = [], 0
    while True:
        r = call(addr, RequestCode.PULL_MESSAGE, {
            "consumerGroup": "check", "topic": topic, "queueId": 0, "queueOffset": offset, "maxMsgNums": 32,
            "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0,
            "expressionType": "TAG"})
        if r.code != 0:
            return out
        out += _records(r.body)
        offset = int(r.ext["nextBeginOffset"])


def test_master_only_services_run_exactly_while_the_broker_is_master(tmp_path: Path) -> None:
    with Daemons() as procs:
        group = procs.controller_group(tmp_path, 2, broker_extra={"plugins": {"extensions": ["role_journal"]}},
                                       messageDelayLevel=f"1s 1s {RETRY_DELAY_S}s {RETRY_DELAY_S}s")
        master, slave = group.settled()
        parked: bytes | None = None
        for cycle in range(4):
            # the services of the role, and only those, run on each broker
            wait(lambda: services(master) == MASTER_SERVICES, 30, f"cycle {cycle}: master services on the master")
            assert services(slave) == set(), f"cycle {cycle}: {services(slave)} run on the slave"
            assert journal(master)[-1] == {**journal(master)[-1], "event": "enter", "role": "MASTER"}
            assert not journal(slave) or journal(slave)[-1]["event"] == "exit"

            if parked is not None:  # sent back to the old master before the switch: the new one delivers it
                retry = wait(lambda: [m for m in pulled(master.broker_addr, "%RETRY%CG") if m.body == parked],
                             RETRY_DELAY_S + 30, f"cycle {cycle}: the consumer retry delivered after promotion")
                assert retry[-1].store_host == master.broker_addr and retry[-1].reconsume_times == 1

            # a delay-level message sent to the master is delivered
            body = b"delayed-%d" % cycle
            assert send(master.broker_addr, "RS", body, "DELAY\x011\x02WAIT\x01false\x02").code == 0
            wait(lambda: any(m.body == body for m in pulled(master.broker_addr, "RS")), 30,
                 f"cycle {cycle}: the delay-level message delivered")

            # a consumer retry: sent back, parked behind delay level 3, then the master is switched
            parked = b"retry-%d" % cycle
            r = send(master.broker_addr, "RT", parked, "WAIT\x01false\x02")
            assert r.code == 0
            phys = int(r.ext["msgId"][-16:], 16)
            r = call(master.broker_addr, RequestCode.CONSUMER_SEND_MSG_BACK, {
                "group": "CG", "offset": phys, "delayLevel": 0, "originMsgId": r.ext["msgId"], "originTopic": "RT"})
            assert r.code == 0, r.remark
            wait(lambda: len(json.loads(info(master)["syncStateSet"])) == 2, 30, "the slave in sync before the switch")
            old = master
            group.elect(slave)
            master, slave = group.settled(master=slave)  # the roles swap, the old master in the new one's set
            assert slave is old
        # each broker was promoted and demoted; the third-party service entered and exited with the role
        for b in group.brokers:
            events = [(e["event"], e["role"]) for e in journal(b)]
            assert events.count(("enter", "MASTER")) >= 2 and events.count(("exit", "MASTER")) >= 2, events
            assert all(a[0] != c[0] for a, c in zip(events, events[1:], strict=False)), events  # enter, exit, ...
