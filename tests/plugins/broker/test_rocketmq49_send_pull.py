"""Send and pull details as RocketMQ 4.9 has them: stored messages carry CLUSTER and lose WAIT=true; an
invalid topic is SYSTEM_ERROR (see test_send_pull); a pull answer's remark
is the GetMessageStatus name; LITE_PULL_MESSAGE (361) is served like a pull; a corrected pull offset
publishes an OffsetMovedEvent to OFFSET_MOVED_EVENT."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import encode_properties
from rmq.protocol.message import decode_messages
from rmq.testing.daemon import RmqdProcess

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pull_cmd(topic: str, offset: int, code: int = RequestCode.PULL_MESSAGE, group: str = "CG49") -> RemotingCommand:
    return RemotingCommand.request(code, {
        "consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": str(offset), "maxMsgNums": "32",
        "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
        "expressionType": "TAG"})


async def test_cluster_property_pull_remarks_lite_pull_and_offset_moved_event(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    addr = proc.broker_addr
    async with TcpRemotingClient(RemotingConfig(name="rmq49")) as c:
        async def call(cmd: RemotingCommand) -> RemotingCommand:
            return await c.invoke(addr, cmd, 5)

        r = await call(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "T49", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}))
        assert r.code == 0
        r = await call(pull_cmd("T49", 0))
        assert r.code == ResponseCode.PULL_NOT_FOUND and r.remark == "NO_MESSAGE_IN_QUEUE"
        for i in range(3):
            ext = {"a": "PG", "b": "T49", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": str(int(time.time() * 1000)),
                   "h": "0", "i": encode_properties({"UNIQ_KEY": f"U{i}", "WAIT": "true"}), "j": "0"}
            assert (await call(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"m%d" % i))).code == 0
        r = await call(pull_cmd("T49", 0))
        assert r.code == 0 and r.remark == "FOUND"
        msgs = decode_messages(r.body)
        assert [m.properties["CLUSTER"] for m in msgs] == ["DefaultCluster"] * 3
        assert not any("WAIT" in m.properties for m in msgs)  # sent with WAIT=true, stored without it
        r = await call(pull_cmd("T49", 3))
        assert r.code == ResponseCode.PULL_NOT_FOUND and r.remark == "OFFSET_OVERFLOW_ONE"
        r = await call(pull_cmd("T49", 1, code=361))  # LITE_PULL_MESSAGE
        assert r.code == 0 and [m.body for m in decode_messages(r.body)] == [b"m1", b"m2"]
        r = await call(pull_cmd("T49", 99))
        assert r.code == ResponseCode.PULL_OFFSET_MOVED and r.remark == "OFFSET_OVERFLOW_BADLY"
        events: list[Any] = []
        deadline = time.monotonic() + 5
        while not events and time.monotonic() < deadline:
            r = await call(pull_cmd("OFFSET_MOVED_EVENT", 0, group="CG49_EV"))
            if r.code == 0:
                events = decode_messages(r.body)
        assert events, "an OffsetMovedEvent expected"
        body = json.loads(events[0].body)
        assert body["consumerGroup"] == "CG49" and body["offsetRequest"] == 99 and body["offsetNew"] == 3
        assert body["messageQueue"] == {"topic": "T49", "brokerName": "broker-a", "queueId": 0}
        assert events[0].tags == "CG49"
