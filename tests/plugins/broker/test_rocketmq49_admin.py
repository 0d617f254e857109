"""Admin and permission details as RocketMQ 4.9 has them: subscription-group and topic edits are on disk
before the answer (a SIGKILL right after cannot take them back); system topics are neither sendable
nor creatable; a broker without write permission refuses sends to order topics only."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.testing.daemon import RmqdProcess

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def send_cmd(topic: str) -> RemotingCommand:
    ext = {"a": "PG", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": str(int(time.time() * 1000)),
           "h": "0", "i": "", "j": "0"}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"x")


def topic_cmd(topic: str, order: bool = False) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "readQueueNums": "1", "writeQueueNums": "1", "perm": "6", "order": str(order).lower()})


async def test_edits_survive_a_sigkill_right_after_the_answer(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    async with TcpRemotingClient(RemotingConfig(name="adm49")) as c:
        body = json.dumps({"groupName": "G49Kill", "retryMaxTimes": 7}).encode()
        r = await c.invoke(proc.broker_addr, RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body), 5)
        assert r.code == 0
        assert (await c.invoke(proc.broker_addr, topic_cmd("T49Kill"), 5)).code == 0
    proc.kill()  # no time for a periodic flush
    proc.start()
    async with TcpRemotingClient(RemotingConfig(name="adm49b")) as c:
        r = await c.invoke(proc.broker_addr, RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}), 5)
        groups = json.loads(r.body)["subscriptionGroupTable"]
        assert groups["G49Kill"]["retryMaxTimes"] == 7
        r = await c.invoke(proc.broker_addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG, {}), 5)
        assert "T49Kill" in json.loads(r.body)["topicConfigTable"]


async def test_system_topics_and_broker_permission(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory(broker_conf={"brokerPermission": 4})  # read only
    async with TcpRemotingClient(RemotingConfig(name="perm49")) as c:
        for topic in ("SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer",
                      "rmq_sys_anything", "RMQ_SYS_TRANS_HALF_TOPIC"):
            r = await c.invoke(proc.broker_addr, send_cmd(topic), 5)
            assert r.code == ResponseCode.NO_PERMISSION and "is forbidden" in r.remark, (topic, r.remark)
            r = await c.invoke(proc.broker_addr, topic_cmd(topic), 5)
            assert r.code != 0, topic
        assert (await c.invoke(proc.broker_addr, topic_cmd("Plain49"), 5)).code == 0
        assert (await c.invoke(proc.broker_addr, topic_cmd("Order49", order=True), 5)).code == 0
        r = await c.invoke(proc.broker_addr, send_cmd("Plain49"), 5)
        assert r.code == 0, r.remark  # 4.9: the routes keep writers away; only order topics are refused here
        r = await c.invoke(proc.broker_addr, send_cmd("Order49"), 5)
        assert r.code == ResponseCode.NO_PERMISSION and "sending message is forbidden" in r.remark


async def test_runtime_info_has_rocketmq_statistics(rmqd_factory: Any) -> None:
    import anyio

    proc: RmqdProcess = rmqd_factory()
    async with TcpRemotingClient(RemotingConfig(name="stats49")) as c:
        assert (await c.invoke(proc.broker_addr, topic_cmd("Stat49"), 5)).code == 0
        for _ in range(20):
            assert (await c.invoke(proc.broker_addr, send_cmd("Stat49"), 5)).code == 0
        await anyio.sleep(2.2)  # two samples
        r = await c.invoke(proc.broker_addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}), 5)
        table = json.loads(r.body)["table"]
    assert int(table["msgPutTotalTodayNow"]) >= 20
    tps = [float(x) for x in table["putTps"].split()]
    assert len(tps) == 3 and all(t >= 0 for t in tps) and len(table["getTransferedTps"].split()) == 3
    assert float(table["commitLogDiskRatio"]) > 0 and int(table["dispatchBehindBytes"]) >= 0


async def test_update_broker_config_at_run_time(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    async with TcpRemotingClient(RemotingConfig(name="upd49")) as c:
        async def update(text: str) -> RemotingCommand:
            return await c.invoke(proc.broker_addr, RemotingCommand.request(
                RequestCode.UPDATE_BROKER_CONFIG, {}, text.encode()), 5)

        assert (await update("autoCreateTopicEnable=false\nmaxMessageSize=100\n")).code == 0
        r = await c.invoke(proc.broker_addr, send_cmd("NoAutoTopic"), 5)
        assert r.code == ResponseCode.TOPIC_NOT_EXIST  # takes effect at once
        r = await c.invoke(proc.broker_addr, RemotingCommand.request(RequestCode.GET_BROKER_CONFIG, {}), 5)
        assert "autoCreateTopicEnable=false" in r.body.decode() and "maxMessageSize=100" in r.body.decode()
        r = await update("listenPort=1234")
        assert r.code == ResponseCode.SYSTEM_ERROR and "takes effect only at start" in r.remark
        r = await update("noSuchKey=1")
        assert r.code == ResponseCode.SYSTEM_ERROR and "unknown broker setting" in r.remark
        r = await update("maxMessageSize=lots")
        assert r.code == ResponseCode.SYSTEM_ERROR


async def test_benchmark_topic_is_a_system_topic(rmqd_factory: Any) -> None:
    """As every RocketMQ broker, rmqd carries BenchmarkTest (1024 queues, read-write): mqadmin topicList
    lists it on a Java broker, and its benchmark tools send there."""
    proc: RmqdProcess = rmqd_factory()
    async with TcpRemotingClient(RemotingConfig(name="bench49")) as c:
        r = await c.invoke(proc.broker_addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG, {}), 5)
    tc = json.loads(r.body)["topicConfigTable"]["BenchmarkTest"]
    assert (tc["readQueueNums"], tc["writeQueueNums"], tc["perm"]) == (1024, 1024, 6)
