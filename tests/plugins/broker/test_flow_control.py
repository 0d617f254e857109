"""waitTimeMillsInSendQueue and osPageCacheBusyTimeOutMills have RocketMQ's effect: sends that queued
up while the broker was stalled (here: rmqd stopped with SIGSTOP, as a disk or page-cache stall would
block it) are answered SYSTEM_BUSY at once, nothing of them is stored, and sends after the stall
succeed again."""

from __future__ import annotations

import os
import signal
import socket
import time
from typing import Any

import anyio
import pytest

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import encode_properties
from rmq.protocol.frame import FrameDecoder, encode
from rmq.testing.daemon import RmqdProcess

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def send_cmd(i: int) -> RemotingCommand:
    ext = {"a": "flow_p", "b": "FlowT", "c": "TBW102", "d": "4", "e": "0", "f": "0",
           "g": str(time.time_ns() // 1_000_000), "h": "0", "i": encode_properties({"UNIQ_KEY": f"U{i:08d}"}),
           "j": "0", "k": "false", "m": "false"}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"m%d" % i)


async def stalled_sends(proc: RmqdProcess, stall: float, n: int = 20) -> tuple[list[RemotingCommand], int]:
    """n sends issued while rmqd is stopped for ``stall`` seconds; (answers, stored count after)."""
    assert proc.proc is not None
    async with TcpRemotingClient(RemotingConfig(name="flow")) as c:
        assert (await c.invoke(proc.broker_addr, send_cmd(0), 5)).code == 0  # topic created, connection up
        answers: list[RemotingCommand] = []

        async def one(i: int) -> None:
            answers.append(await c.invoke(proc.broker_addr, send_cmd(i), 15))

        os.kill(proc.proc.pid, signal.SIGSTOP)
        try:
            async with anyio.create_task_group() as tg:
                for i in range(1, n + 1):
                    tg.start_soon(one, i)
                await anyio.sleep(stall)
                os.kill(proc.proc.pid, signal.SIGCONT)
        finally:
            os.kill(proc.proc.pid, signal.SIGCONT)
        await anyio.sleep(0.1)  # the busy answer lasts one 10 ms tick past the stall
        after = await c.invoke(proc.broker_addr, send_cmd(n + 1), 5)
        assert after.code == 0, after.remark  # the stall is over: sends are served again
        r = await c.invoke(proc.broker_addr, RemotingCommand.request(
            RequestCode.GET_MAX_OFFSET, {"topic": "FlowT", "queueId": "0"}), 5)
        return answers, int(r.ext["offset"])


async def test_page_cache_busy_sends_fail_fast(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory(broker_conf={"osPageCacheBusyTimeOutMills": 1000})
    answers, stored = await stalled_sends(proc, 1.6)
    busy = [a for a in answers if a.code == ResponseCode.SYSTEM_BUSY]
    assert busy and all(a.code in (0, ResponseCode.SYSTEM_BUSY) for a in answers)
    assert all((a.remark or "").startswith("[PCBUSY_CLEAN_QUEUE]broker busy") for a in busy)
    assert stored == 2 + len(answers) - len(busy)  # refused sends stored nothing


async def test_wait_in_send_queue_sends_fail_fast(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory(broker_conf={"osPageCacheBusyTimeOutMills": 60_000,
                                                  "waitTimeMillsInSendQueue": 200})
    answers, stored = await stalled_sends(proc, 0.8)
    busy = [a for a in answers if a.code == ResponseCode.SYSTEM_BUSY]
    assert busy and all((a.remark or "").startswith("[TIMEOUT_CLEAN_QUEUE]broker busy") for a in busy)
    assert stored == 2 + len(answers) - len(busy)



async def test_an_in_process_broker_is_not_flow_controlled_by_its_test_stalling(broker_env: Any) -> None:
    """An in-process broker shares the test's process: a busy machine descheduling it for half a second
    looks like a stalled loop, and RocketMQ's 200 ms queue wait would fail the send read right after
    with SYSTEM_BUSY. rmq.testing.make_kernel gives such a broker a wait no test outlives (the flow
    control itself is tested above, on rmqd with RocketMQ's values)."""
    async with broker_env() as env:
        host, port = env.addr.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=10)
        dec = FrameDecoder()

        def answer() -> RemotingCommand:
            while True:
                got = dec.feed(sock.recv(65536))
                if got:
                    return got[0]

        with sock:
            sock.sendall(encode(send_cmd(1)))
            assert (await anyio.to_thread.run_sync(answer)).code == 0  # accepted, topic created
            sock.sendall(encode(send_cmd(2)))  # in the broker's socket buffer, unread ...
            time.sleep(0.5)  # noqa: ASYNC251 - ... while the whole process stalls, as a descheduled one does
            r = await anyio.to_thread.run_sync(answer)
        assert r.code == 0, r.remark
