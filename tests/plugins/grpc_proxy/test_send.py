"""SendMessage on the gRPC endpoint as RocketMQ 5's proxy: several messages of one topic in one request
are one batch (an entry per message), and a message group's queue is the proxy's
``Hashing.consistentHash(group.hashCode(), writeQueues)``; rmq's stubs play the client."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import anyio
import grpc
import pytest

from rmq.client import PullConsumer, PullStatus
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.grpc_proxy.hashing import consistent_hash, java_string_hash
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.plugins.grpc_proxy.v2 import service_pb2_grpc as sg
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.testing.daemon import RmqdProcess

pytestmark = [pytest.mark.anyio, pytest.mark.grpc]
MD = (("x-mq-client-id", "send@1@1@x"),)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_java_string_hash_and_guava_consistent_hash_known_values() -> None:
    """Values fixed by Java and by Guava's own tests (HashingTest's LCG compatibility test), and
    consistentHash's defining property: growing n to n+1 moves a key only to bucket n."""
    assert [consistent_hash(i, 100) for i in range(1, 6)] == [55, 62, 8, 45, 59]
    assert java_string_hash("") == 0 and java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -(2**31)  # Java's famous Integer.MIN_VALUE string
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # UTF-16 code units, not code points
    for h in (-1, 0, 1, 2, 2**63 - 1, -(2**63), java_string_hash("order-1")):
        last = 0
        for n in range(1, 3000):
            b = consistent_hash(h, n)
            if b != last:
                assert b == n - 1, (h, n, b)
                last = b
    with pytest.raises(ValueError):
        consistent_hash(5, 0)


async def create(addr: str, topic: str, queues: int, message_type: str) -> None:
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
           "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false",
           "attributes": f"+message.type={message_type}"}
    async with TcpRemotingClient(RemotingConfig(name="send-admin")) as c:
        r = await c.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext), 5)
    assert r.code == 0, r.remark


def message(topic: str, body: bytes, group: str = "", kind: int = d.NORMAL) -> d.Message:
    sp = d.SystemProperties(message_id=f"ID-{topic}-{body.decode()}", message_type=kind)
    if group:
        sp.message_group = group
    return d.Message(topic=d.Resource(name=topic), body=body, system_properties=sp)


async def stored(ns: str, topic: str, want: int) -> dict[bytes, tuple[int, int]]:
    """body -> (queue id, queue offset) of every message of ``topic``, waiting for ``want`` of them."""
    got: dict[bytes, tuple[int, int]] = {}
    deadline = time.monotonic() + 10
    async with PullConsumer("SEND_CHECK", ns) as pc:
        mqs = await pc.fetch_queues(topic)
        while len(got) < want and time.monotonic() < deadline:
            for mq in mqs:
                r = await pc.pull(mq, 0, 64)
                if r.status is PullStatus.FOUND:
                    got.update({m.body: (m.queue_id, m.queue_offset) for m in r.messages})
    return got


async def test_fifo_group_lands_on_the_proxys_queue(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    await create(proc.broker_addr, "GsFifo", 8, "FIFO")
    groups = [f"order-{i}" for i in range(12)] + ["Aa", "polygenelubricants", "顺序"]
    async with grpc.aio.insecure_channel(proc.grpc_endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        for i, g in enumerate(groups):
            for j in range(2):
                r = await stub.SendMessage(s.SendMessageRequest(messages=[
                    message("GsFifo", f"{i}-{j}".encode(), g, d.FIFO)]), metadata=MD)
                assert r.status.code == d.Code.OK, r.status
    got = await stored(proc.namesrv_addr, "GsFifo", 2 * len(groups))
    for i, g in enumerate(groups):
        want = consistent_hash(java_string_hash(g), 8)
        assert got[f"{i}-0".encode()][0] == got[f"{i}-1".encode()][0] == want, (g, got[f"{i}-0".encode()], want)


async def test_several_messages_are_one_batch(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    await create(proc.broker_addr, "GsBatch", 2, "NORMAL")
    await create(proc.broker_addr, "GsOther", 1, "NORMAL")
    async with grpc.aio.insecure_channel(proc.grpc_endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        batch = [message("GsBatch", f"b{i}".encode()) for i in range(5)]
        r = await stub.SendMessage(s.SendMessageRequest(messages=batch), metadata=MD)
        assert r.status.code == d.Code.OK, r.status
        assert [e.message_id for e in r.entries] == [m.system_properties.message_id for m in batch]
        assert all(e.status.code == d.Code.OK for e in r.entries)
        assert [e.offset for e in r.entries] == list(range(r.entries[0].offset, r.entries[0].offset + 5))
        mixed = await stub.SendMessage(s.SendMessageRequest(messages=[message("GsBatch", b"x1"),
                                                                      message("GsOther", b"x2")]), metadata=MD)
        assert mixed.status.code == d.Code.MESSAGE_CORRUPTED
        bad = await stub.SendMessage(s.SendMessageRequest(messages=[message("GsBatch", b"y1"),
                                                                    message("GsBatch", b"")]), metadata=MD)
        assert bad.status.code == d.Code.MESSAGE_BODY_EMPTY and len(bad.entries) == 2  # nothing stored
    got = await stored(proc.namesrv_addr, "GsBatch", 5)
    assert sorted(got) == [f"b{i}".encode() for i in range(5)]
    assert len({q for q, _ in got.values()}) == 1  # one batch, one queue, in order
    assert [got[f"b{i}".encode()][1] for i in range(5)] == [e.offset for e in r.entries]


async def send_until_ok(stub: Any, m: d.Message) -> Any:
    """Send ``m`` (one message id: the broker's retries) until the answer is OK, for up to 60 s."""
    deadline = time.monotonic() + 60
    while True:
        r = await stub.SendMessage(s.SendMessageRequest(messages=[m]), metadata=MD, timeout=30)
        if r.status.code == d.Code.OK or time.monotonic() > deadline:
            return r
        await anyio.sleep(0.2)


async def max_offset(p: RmqdProcess, topic: str) -> str:
    async with TcpRemotingClient(RemotingConfig(name="send-admin")) as c:
        top = await c.invoke(p.broker_addr, RemotingCommand.request(
            RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"}), 5)
    return str(top.ext["offset"])


async def test_a_send_retried_while_no_slave_holds_it_is_stored_once(rmqd_factory: Any) -> None:
    """A SYNC_MASTER without its slave stores a message and answers HA_NOT_AVAILABLE, which the SDKs
    retry with the same message id: the retries are answered from the copy stored first, never by a
    second copy (a consumer would see the message twice, the second while the first is invisible);
    once a slave holds it, the retry is answered OK with that copy's offset."""
    master: RmqdProcess = rmqd_factory(broker_conf={"brokerRole": "SYNC_MASTER"})
    await create(master.broker_addr, "GsRetry", 1, "NORMAL")
    once, other = message("GsRetry", b"once"), message("GsRetry", b"other")
    async with grpc.aio.insecure_channel(master.grpc_endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        for m in (once, once, once, other):  # the SDK's three attempts, then another message
            r = await stub.SendMessage(s.SendMessageRequest(messages=[m]), metadata=MD)
            assert r.status.code == d.Code.HA_NOT_AVAILABLE, r.status
        rmqd_factory(namesrv=False, broker_conf={"brokerRole": "SLAVE", "brokerId": 1,
                                                 "namesrvAddr": master.namesrv_addr})
        r = await send_until_ok(stub, once)  # the slave caught up: answered OK, from the first copy
        assert r.status.code == d.Code.OK and r.entries[0].offset == 0, r
    assert await max_offset(master, "GsRetry") == "2"  # "once" and "other", one copy each
    assert sorted(await stored(master.namesrv_addr, "GsRetry", 2)) == [b"once", b"other"]


async def test_a_retry_while_the_first_attempt_waits_for_the_slave_is_that_attempt(rmqd_factory: Any) -> None:
    """The SDK gives up on a send after 3 s, slaveTimeout's length, and sends again while the broker
    still waits for a slave that stopped answering: the retry waits for that attempt and answers from
    its copy (SLAVE_PERSISTENCE_TIMEOUT, then OK once the slave holds it); nothing is stored twice."""
    master: RmqdProcess = rmqd_factory(broker_conf={"brokerRole": "SYNC_MASTER", "slaveTimeout": 2000})
    slave: RmqdProcess = rmqd_factory(namesrv=False, broker_conf={"brokerRole": "SLAVE", "brokerId": 1,
                                                                  "namesrvAddr": master.namesrv_addr})
    await create(master.broker_addr, "GsWait", 1, "NORMAL")
    msg = message("GsWait", b"waited")
    async with grpc.aio.insecure_channel(master.grpc_endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        r = await send_until_ok(stub, message("GsWait", b"warm"))  # the slave connected and holds it
        assert r.status.code == d.Code.OK, r.status
        assert slave.proc is not None
        os.kill(slave.proc.pid, signal.SIGSTOP)  # connected, and silent
        try:
            with pytest.raises(grpc.aio.AioRpcError) as gave_up:
                await stub.SendMessage(s.SendMessageRequest(messages=[msg]), metadata=MD, timeout=0.5)
            assert gave_up.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            r = await stub.SendMessage(s.SendMessageRequest(messages=[msg]), metadata=MD, timeout=30)
            assert r.status.code == d.Code.SLAVE_PERSISTENCE_TIMEOUT, r.status
        finally:
            os.kill(slave.proc.pid, signal.SIGCONT)
        r = await send_until_ok(stub, msg)
        assert r.status.code == d.Code.OK and r.entries[0].offset == 1, r
    assert await max_offset(master, "GsWait") == "2"  # "warm" and "waited", one copy each
