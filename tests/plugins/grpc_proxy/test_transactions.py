"""gRPC transactions across a broker restart: the proxy's table of halves (where each is, for
END_TRANSACTION) is memory only, so a check relayed after the restart records where the half now is,
as RocketMQ's proxy does on CHECK_TRANSACTION_STATE, and the check's answer commits or rolls the half
back instead of failing until TRANS_CHECK_MAX_TIME_TOPIC. rmq's stubs play the 5.x producer."""

from __future__ import annotations

import time
from typing import Any

import anyio
import grpc
import pytest

from rmq.client import PullConsumer, PullStatus
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.plugins.grpc_proxy.v2 import service_pb2_grpc as sg
from rmq.testing.daemon import RmqdProcess
from tests.plugins.grpc_proxy.test_send import create

pytestmark = [pytest.mark.anyio, pytest.mark.grpc]
CID = "txp@1@1@x"
MD = (("x-mq-client-id", CID),)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def tx_message(topic: str, body: bytes) -> d.Message:
    return d.Message(topic=d.Resource(name=topic), body=body, system_properties=d.SystemProperties(
        message_id=f"TX-{body.decode()}-{time.time_ns()}", message_type=d.TRANSACTION))


async def bodies(ns: str, topic: str, want: int, timeout: float = 15) -> list[bytes]:
    got: list[bytes] = []
    async with PullConsumer("TX_CHECK", ns) as pc:
        mqs = await pc.fetch_queues(topic)
        with anyio.move_on_after(timeout):
            while len(got) < want:
                got = []
                for mq in mqs:
                    r = await pc.pull(mq, 0, 64)
                    if r.status is PullStatus.FOUND:
                        got += [m.body for m in r.messages]
                await anyio.sleep(0.1)
    return sorted(got)


async def test_check_answers_after_a_broker_restart_end_the_half(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory(broker_conf={"transactionCheckInterval": 500, "transactionTimeOut": 1000})
    await create(proc.broker_addr, "GtTx", 1, "TRANSACTION")
    held = {b"commit-me": tx_message("GtTx", b"commit-me"), b"roll-me": tx_message("GtTx", b"roll-me")}
    async with grpc.aio.insecure_channel(proc.grpc_endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        for m in held.values():
            r = await stub.SendMessage(s.SendMessageRequest(messages=[m]), metadata=MD)
            assert r.status.code == d.Code.OK, r.status
    proc.stop()
    proc.start()
    settings = d.Settings(client_type=d.PRODUCER, publishing=d.Publishing(topics=[d.Resource(name="GtTx")]))
    answers: dict[bytes, int] = {}
    async with grpc.aio.insecure_channel(proc.grpc_endpoint) as ch:
        stub = sg.MessagingServiceStub(ch)
        mid = held[b"commit-me"].system_properties.message_id
        r = await stub.EndTransaction(s.EndTransactionRequest(  # the proxy's table is gone: as RocketMQ's
            topic=d.Resource(name="GtTx"), message_id=mid, transaction_id=mid, resolution=d.COMMIT,
            source=d.SOURCE_CLIENT), metadata=MD)
        assert r.status.code == d.Code.INTERNAL_SERVER_ERROR

        async def requests() -> Any:
            yield s.TelemetryCommand(settings=settings)
            await anyio.sleep_forever()

        call = stub.Telemetry(requests(), metadata=MD)
        with anyio.fail_after(20):
            async for cmd in call:  # each check, answered as the checker would
                if cmd.WhichOneof("command") != "recover_orphaned_transaction_command":
                    continue
                rc = cmd.recover_orphaned_transaction_command
                body = rc.message.body
                r = await stub.EndTransaction(s.EndTransactionRequest(
                    topic=rc.message.topic, message_id=rc.message.system_properties.message_id,
                    transaction_id=rc.transaction_id, resolution=d.COMMIT if body == b"commit-me" else d.ROLLBACK,
                    source=d.SOURCE_SERVER_CHECK), metadata=MD)
                answers[body] = r.status.code
                if len(answers) == 2:
                    break
        call.cancel()
        with anyio.move_on_after(10):  # the cancelled stream ends on this loop, not in a later test's
            await call.code()
    assert answers == {b"commit-me": d.Code.OK, b"roll-me": d.Code.OK}
    assert await bodies(proc.namesrv_addr, "GtTx", 1) == [b"commit-me"]
