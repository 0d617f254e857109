"""The source reads from the slave when the master is gone (issue #32 item 3), as the Java client does: the
pull goes where the broker suggested, and to the slave once the master left the route."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rmq.protocol.codes import RequestCode
from rmq.testing.daemon import call, eventually, runtime_info

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(300)]


def _offsets(addr: str) -> int:
    return int(runtime_info(addr).get("commitLogMaxOffset", -1))


def test_a_batch_read_after_the_master_died_is_served_by_the_slave(spark: Any, rmqd_factory: Any) -> None:
    from rmq.client.blocking import Admin

    ns = rmqd_factory(broker=False)
    base = {"namesrvAddr": ns.namesrv_addr, "registerNameServerPeriod": 2000}
    master = rmqd_factory(namesrv=False, broker_conf={**base, "brokerRole": "SYNC_MASTER"})
    slave = rmqd_factory(namesrv=False, broker_conf={**base, "brokerRole": "SLAVE", "brokerId": 1})
    eventually(lambda: int(runtime_info(master.broker_addr).get("haConnectionCount", 0)) == 1, 30, "slave connected")
    topic = "SlaveRead"
    with Admin(namesrv_addr=ns.namesrv_addr) as admin:
        admin.create_topic(topic, 2)
    eventually(lambda: topic in json.loads(call(slave.broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG).body)[
        "topicConfigTable"], 60, "the topic on the slave")

    from rmq.client import Message
    from rmq.client.blocking import Producer

    bodies = [f"m-{i}" for i in range(40)]
    with Producer("P_SLAVE_READ", namesrv_addr=ns.namesrv_addr) as p:
        for b in bodies:
            assert p.send(Message(topic, b.encode())).status.name == "SEND_OK"  # SYNC_MASTER: on the slave too

    def read() -> list[str]:
        df = spark.read.format("rocketmq").option("nameserver", ns.namesrv_addr).option("subscribe", topic).load()
        return sorted(bytes(r.value).decode() for r in df.select("value").collect())

    assert read() == sorted(bodies)  # the master serves; the source's session now knows both brokers
    assert _offsets(slave.broker_addr) == _offsets(master.broker_addr)
    master.stop()
    assert read() == sorted(bodies)
