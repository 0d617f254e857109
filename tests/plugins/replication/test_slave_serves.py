"""A slave serves what it holds, and topic changes reach it within a second (issue #27 item 5).

A topic auto-created on a SYNC_MASTER that dies a moment later is on the slave as messages and
consume queues, not yet as a config: the slave must still serve it (read-only) and route it.
The slaves here sync metadata every 10 minutes, so only the new mechanisms can deliver.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import anyio

from rmq.client import Message, MessageExt, Producer, PushConsumer
from rmq.protocol.codes import RequestCode
from rmq.testing.daemon import call, eventually, runtime_info

from .conftest import SEG

FAST = {"rebalance_interval": 0.5, "heartbeat_interval": 1.0, "persist_interval": 0.5, "pull_retry_delay": 0.2,
        "route_interval": 0.5}


def pair(rmqd_factory: Any, probe_ms: int) -> tuple[Any, Any, Any]:
    """A name server, a SYNC_MASTER and its slave (metadata sync every 10 min, topic probe ``probe_ms``)."""
    ns = rmqd_factory(broker=False)
    base = {"namesrvAddr": ns.namesrv_addr, "mappedFileSizeCommitLog": SEG, "registerNameServerPeriod": 2000}
    opts = {"plugin": {"processors": {"broker": {"slave_sync_period_ms": 600_000, "slave_topic_probe_ms": probe_ms}}}}
    master = rmqd_factory(namesrv=False, broker_conf={**base, "brokerRole": "SYNC_MASTER"}, extra=opts)
    slave = rmqd_factory(namesrv=False, broker_conf={**base, "brokerRole": "SLAVE", "brokerId": 1}, extra=opts)
    eventually(lambda: int(runtime_info(master.broker_addr).get("haConnectionCount", 0)) == 1, 20, "slave connected")
    eventually(lambda: runtime_info(slave.broker_addr).get("masterAddr", "") != "", 20, "slave knows its master")
    return ns, master, slave


def slave_topics(slave: Any) -> dict[str, Any]:
    return json.loads(call(slave.broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]


def produce(ns: Any, topic: str, n: int) -> set[bytes]:
    """``n`` sends through TBW102 auto-creation; the bodies the broker acknowledged."""
    async def go() -> set[bytes]:
        acked: set[bytes] = set()
        async with Producer("P_HELD", ns.namesrv_addr) as p:
            async def one(i: int) -> None:
                body = b"held-%d" % i
                r = await p.send(Message(topic, body))
                if r.status.name == "SEND_OK":
                    acked.add(body)

            async with anyio.create_task_group() as tg:
                for i in range(n):
                    tg.start_soon(one, i)
        return acked

    return anyio.run(go)


def consume(ns: Any, topic: str, group: str, want: set[bytes], timeout: float) -> set[bytes]:
    """Bodies a fresh push consumer of ``group`` reads from the first offset, until it has ``want``."""
    async def go() -> set[bytes]:
        got: set[bytes] = set()
        done = anyio.Event()

        async def listener(msg: MessageExt) -> None:
            got.add(msg.body)
            if got >= want:
                done.set()

        async with PushConsumer(group, ns.namesrv_addr, listener=listener, consume_from_where="FIRST_OFFSET",
                                **FAST) as c:
            c.subscribe(topic)
            with anyio.move_on_after(timeout):
                await done.wait()
        return got

    return anyio.run(go)


def route_perm(ns: Any, topic: str) -> int:
    r = call(ns.namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    if r.code != 0:
        return -1
    qds = json.loads(r.body)["queueDatas"]
    return int(qds[0]["perm"]) if qds else -1


def test_a_topic_the_master_died_with_is_served_and_routed_by_the_slave(rmqd_factory: Any) -> None:
    """No probe: the slave never gets the topic's config, yet a consumer started after the master's
    SIGKILL reads every acknowledged message from it, through a route the slave registered."""
    ns, master, slave = pair(rmqd_factory, probe_ms=0)
    t0 = time.monotonic()
    acked = produce(ns, "HeldTopic", 400)
    assert len(acked) == 400  # SYNC_MASTER: every acknowledged message is on the slave
    time.sleep(max(0.0, 1.0 - (time.monotonic() - t0)))  # the fault lands ~1 s after the topic was made
    master.kill()
    assert "HeldTopic" not in slave_topics(slave)  # no config: what follows is served from the queues
    # the slave registers what it holds, read-only (perm 4): the route now comes from the slave
    eventually(lambda: route_perm(ns, "HeldTopic") == 4, 15, "the slave's read-only route")
    got = consume(ns, "HeldTopic", "CG_HELD", acked, 60)
    assert got >= acked, f"{len(acked - got)} of {len(acked)} acknowledged messages not read from the slave"
    stats = call(slave.broker_addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "HeldTopic"})
    assert stats.code == 0  # fastjson's map keys are objects: sum the queues' ends from the text
    assert sum(int(m) for m in re.findall(rb'"maxOffset":(\d+)', stats.body)) == 400


def test_topic_changes_on_the_master_reach_the_slave_within_a_second(rmqd_factory: Any) -> None:
    """The probe: admin create, update and delete and auto-creation on send show on the slave long
    before the (here 10-minute) metadata sync; the slave serves the topic once the master is gone."""
    ns, master, slave = pair(rmqd_factory, probe_ms=200)
    eventually(lambda: "TBW102" in slave_topics(slave), 20, "the slave's first sync")

    def create(topic: str, queues: int) -> None:
        r = call(master.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
            "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
        assert r.code == 0

    create("Probed", 4)
    t0 = time.monotonic()
    eventually(lambda: "Probed" in slave_topics(slave), 10, "an admin-created topic on the slave", interval=0.02)
    took = time.monotonic() - t0
    create("Probed", 6)
    eventually(lambda: slave_topics(slave).get("Probed", {}).get("readQueueNums") == 6, 10, "an update")
    r = call(master.broker_addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Probed"})
    assert r.code == 0
    eventually(lambda: "Probed" not in slave_topics(slave), 10, "a deletion")
    acked = produce(ns, "ProbedAuto", 100)
    assert len(acked) == 100
    eventually(lambda: "ProbedAuto" in slave_topics(slave), 10, "an auto-created topic")
    master.kill()
    assert slave_topics(slave)["ProbedAuto"]["perm"] == 6  # the master's own config, not a held one
    assert consume(ns, "ProbedAuto", "CG_PROBED", acked, 60) >= acked
    print(f"admin-created topic visible on the slave after {took * 1000:.0f} ms")
