"""Broker behaviours checked against RocketMQ 4.9 on a real rmqd: the VIP channel
(BrokerController's fastRemotingServer on listenPort - 2), ``regionId``, the trace topic."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.message import decode_messages
from rmq.testing.daemon import RmqdProcess

from .conftest import Env

pytestmark = pytest.mark.anyio


class RemoteEnv(Env):
    """The in-process suite's request helpers, pointed at a real rmqd's address."""

    def __init__(self, client: TcpRemotingClient, addr: str, ns_addr: str) -> None:
        self.client, self.addr, self.ns_addr = client, addr, ns_addr


@asynccontextmanager
async def remote(proc: RmqdProcess) -> AsyncIterator[RemoteEnv]:
    async with TcpRemotingClient(RemotingConfig(name="test")) as client:
        yield RemoteEnv(client, proc.broker_addr, proc.namesrv_addr)


async def test_vip_channel_serves_all_but_pull(rmqd_factory: Any) -> None:
    """A 4.4-era Java client (vipChannelEnabled) sends to port - 2; RocketMQ registers every
    processor there except PULL_MESSAGE, whose long polls stay on the main port."""
    proc = rmqd_factory(broker_conf={"regionId": "Hangzhou"})
    vip = f"127.0.0.1:{proc.broker_port - 2}"
    async with remote(proc) as env:
        main = env.addr
        env.addr = vip
        r = await env.send("VipT", b"over the VIP channel", tags="t", code=RequestCode.SEND_MESSAGE_V2)
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert r.ext["MSG_REGION"] == "Hangzhou" and r.ext["TRACE_ON"] == "true"
        hb = json.dumps({"clientID": "c1", "producerDataSet": [{"groupName": "PG"}], "consumerDataSet": []})
        assert (await env.call(RequestCode.HEART_BEAT, body=hb.encode())).code == ResponseCode.SUCCESS
        r = await env.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "VipT"})
        assert r.code == ResponseCode.SUCCESS and '"maxOffset":1' in r.body.decode()
        r = await env.pull("VipT", 0, 0)
        assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        env.addr = main
        r = await env.pull("VipT", 0, 0)
        assert r.code == ResponseCode.SUCCESS
        assert [m.body for m in decode_messages(r.body)] == [b"over the VIP channel"]


async def test_region_id_default_and_trace_topic(rmqd_factory: Any) -> None:
    """BrokerConfig.regionId defaults to DefaultRegion; traceTopicEnable creates
    msgTraceTopicName with one queue (TopicConfigManager), off by default."""
    plain = rmqd_factory()
    traced = rmqd_factory(broker_conf={"traceTopicEnable": True, "msgTraceTopicName": "MyTrace",
                                       "brokerName": "broker-t"})
    async with remote(plain) as env:
        r = await env.send("RegionT", b"x")
        assert r.code == ResponseCode.SUCCESS and r.ext["MSG_REGION"] == "DefaultRegion"
        r = await env.call(RequestCode.GET_ALL_TOPIC_CONFIG)
        assert "RMQ_SYS_TRACE_TOPIC" not in json.loads(r.body)["topicConfigTable"]
    async with remote(traced) as env:
        r = await env.call(RequestCode.GET_ALL_TOPIC_CONFIG)
        tc = json.loads(r.body)["topicConfigTable"]["MyTrace"]
        assert (tc["readQueueNums"], tc["writeQueueNums"], tc["perm"]) == (1, 1, 6)
        r = await env.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "MyTrace"}, addr=env.ns_addr)
        assert r.code == ResponseCode.SUCCESS and json.loads(r.body)["queueDatas"][0]["writeQueueNums"] == 1
        r = await env.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "MyTrace"})
        assert r.code != ResponseCode.SUCCESS  # a system topic, as RocketMQ's addSystemTopic makes it


@pytest.mark.parametrize(("conf", "needle"), [
    ({"region": "Hangzhou"}, "RocketMQ's key is regionId"),
    ({"traceTopicEnable": True, "msgTraceTopicName": "bad name"}, "broker.msgTraceTopicName"),
])
@pytest.mark.integration
def test_refused_at_start(tmp_path: Path, conf: dict[str, Any], needle: str) -> None:
    proc = RmqdProcess(tmp_path, namesrv=False, broker_conf=conf)
    done = subprocess.run(proc.command(), capture_output=True, timeout=60, cwd=proc.workdir, env=proc.env)
    errors = [line for line in done.stderr.decode().splitlines() if "error" in line.lower()]
    assert done.returncode == 2 and len(errors) == 1 and needle in errors[0], done.stderr.decode()[-2000:]
