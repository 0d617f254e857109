"""Request-reply (RocketMQ 4.4+) against a real rmqd with our client: a request answered by a consumer's
reply (create_reply_message + send, code 325), pushed back to the requester (326); the reply topic in
the route; the stored copy; a timeout; and the broker's answers for a requester it cannot reach."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from rmq.client import (
    Admin,
    Message,
    Producer,
    PushConsumer,
    RequestTimeoutError,
    create_reply_message,
)
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import encode_properties
from rmq.testing.daemon import RmqdProcess

pytestmark = pytest.mark.anyio

FAST = {"rebalance_interval": 1.0, "heartbeat_interval": 2.0, "persist_interval": 0.5, "pull_retry_delay": 0.2}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_request_and_reply_round_trip(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    ns = proc.namesrv_addr
    async with Admin(ns) as a:
        await a.create_topic("ReqT", 1)
        assert "DefaultCluster_REPLY_TOPIC" in await a.list_topics()
    async with Producer("RESPONDER_P", ns) as responder:

        async def answer(m: Any) -> None:  # one message per call (consume_batch_size 1)
            await responder.send(create_reply_message(m, b"reply:" + m.body))

        async with PushConsumer("RESPONDER_C", ns, listener=answer, consume_from_where="FIRST_OFFSET", **FAST) as c:
            c.subscribe("ReqT")
            async with Producer("REQUESTER_P", ns) as requester:
                t0 = time.monotonic()
                reply = await requester.request(Message("ReqT", b"ping"), timeout=15)
                assert reply.body == b"reply:ping" and time.monotonic() - t0 < 15
                assert reply.properties["MSG_TYPE"] == "reply" and reply.properties["REPLY_TO_CLIENT"]
                assert "ARRIVE_TIME" in reply.properties and "PUSH_REPLY_TIME" in reply.properties
                again = await requester.request(Message("ReqT", b"second"), timeout=15)
                assert again.body == b"reply:second"
    async with Admin(ns) as a:  # storeReplyMessageEnable (default): the replies are stored too
        stats = await a.topic_stats("DefaultCluster_REPLY_TOPIC")
        assert sum(s.max_offset for s in stats) == 2


async def test_request_timeout_and_unreachable_requesters(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    ns = proc.namesrv_addr
    async with Admin(ns) as a:
        await a.create_topic("ReqQuiet", 1)
    async with Producer("REQUESTER_Q", ns) as requester:
        with pytest.raises(RequestTimeoutError, match="wait reply message timeout, 500 ms"):
            await requester.request(Message("ReqQuiet", b"anyone?"), timeout=0.5)

    def reply_cmd(props: dict[str, str]) -> RemotingCommand:
        ext = {"a": "P", "b": "DefaultCluster_REPLY_TOPIC", "c": "TBW102", "d": "4", "e": "0", "f": "0",
               "g": str(int(time.time() * 1000)), "h": "0", "i": encode_properties(props), "j": "0"}
        return RemotingCommand.request(RequestCode.SEND_REPLY_MESSAGE_V2, ext, b"late")

    async with TcpRemotingClient(RemotingConfig(name="reply-test")) as c:
        r = await c.invoke(proc.broker_addr, reply_cmd({"REPLY_TO_CLIENT": "nobody@1", "CORRELATION_ID": "x"}), 5)
        assert r.code == ResponseCode.SYSTEM_ERROR and r.remark == "push reply message fail, channel of <nobody@1> not found."
        r = await c.invoke(proc.broker_addr, reply_cmd({"CORRELATION_ID": "x"}), 5)
        assert r.code == ResponseCode.SYSTEM_ERROR and "REPLY_TO_CLIENT] is null" in r.remark
        r = await c.invoke(proc.broker_addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}), 5)
        assert r.code == 0 and json.loads(r.body)  # still serving
    with pytest.raises(ValueError, match=r"property\[CLUSTER\] is null"):
        create_reply_message(Message("X", b"not stored"), b"r")

