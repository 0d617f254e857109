"""A transaction check on a SYNC_MASTER with no slave: the put-back of the half (RocketMQ's
renewHalfMessageInner: not waited for, its stored WAIT unchanged) and the op records (WAIT=false) are
stored as PUT_OK and the producer is asked; answered SLAVE_NOT_AVAILABLE the check would skip the
producer every round."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from rmq.client import LocalTransactionState, Message, TransactionProducer
from rmq.testing.daemon import RmqdProcess

from .test_transactions import bodies, create_topic

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_check_on_a_sync_master_without_slave_reaches_the_producer(rmqd_factory: Any) -> None:
    d: RmqdProcess = rmqd_factory(broker_conf={"brokerRole": "SYNC_MASTER", "transactionCheckInterval": 500,
                                               "transactionTimeOut": 1000, "transactionCheckMax": 5})
    ns = d.namesrv_addr
    await create_topic(d.broker_addr, "TxS")
    async with TransactionProducer("TXG_S", ns) as p1:  # WAIT=false: the half is answered SEND_OK at once
        r = await p1.send_in_transaction(Message("TxS", b"pending", properties={"WAIT": "false"}),
                                         lambda m, a: LocalTransactionState.UNKNOW)
        assert r.state is LocalTransactionState.UNKNOW
    asked: list[Any] = []

    def checker(msg: Any) -> LocalTransactionState:
        asked.append(msg)
        return LocalTransactionState.COMMIT_MESSAGE

    with anyio.fail_after(40):
        async with TransactionProducer("TXG_S", ns, checker=checker):
            assert await bodies(ns, "TxS", wait_for=1, timeout=20) == [b"pending"]
    assert [m.body for m in asked][:1] == [b"pending"]
