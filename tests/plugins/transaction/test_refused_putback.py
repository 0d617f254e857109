"""A transaction check whose put-back the store refuses (disk past diskSpaceWarningLevelRatio) leaves
the half where it is: the next pass, once the store takes writes again, asks a producer about it.

Before, the pass moved its committed half offset past the half it could not copy: no op, no copy, and
the half was never checked again, so a transaction its producer would commit was lost. RocketMQ's
check loop retries a half whose put-back failed instead of passing over it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.client import LocalTransactionState, Message, TransactionProducer
from rmq.plugins.broker import BrokerPlugin
from rmq.plugins.filters import TagFilterPlugin
from rmq.plugins.flush import AsyncFlushPlugin
from rmq.plugins.namesrv import NamesrvPlugin
from rmq.plugins.remoting_tcp import TcpRemotingPlugin
from rmq.plugins.storage_mmap import MmapStoragePlugin
from rmq.plugins.transaction import TransactionPlugin
from rmq.testing import make_kernel

from .test_transactions import bodies, create_topic

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def broker(tmp: Path) -> AsyncIterator[Any]:
    """An in-process name server + broker on the mmap store (its disk probe is the store's own seam)."""
    kernel = make_kernel([TcpRemotingPlugin({}), MmapStoragePlugin({}), AsyncFlushPlugin({}), TagFilterPlugin({}),
                          NamesrvPlugin({}), BrokerPlugin({}), TransactionPlugin({})], {
        "namesrv": {"listenHost": "127.0.0.1", "listenPort": 0},
        "broker": {"listenHost": "127.0.0.1", "listenPort": 0, "brokerIP1": "127.0.0.1",
                   "storePathRootDir": str(tmp / "store"), "mappedFileSizeCommitLog": 1024 * 1024,
                   "transactionCheckInterval": 300, "transactionTimeOut": 500, "transactionCheckMax": 50}})
    async with kernel:
        yield kernel


async def test_a_half_whose_put_back_was_refused_is_checked_once_the_store_takes_writes(tmp_path: Path) -> None:
    async with broker(tmp_path) as kernel:
        b = kernel.services["broker"]
        ns = f"127.0.0.1:{kernel.services['namesrv'].server.port}"
        await create_topic(b.broker_addr, "TxR")
        async with TransactionProducer("TXG_R", ns) as p1:  # the producer leaves the outcome open, then goes
            r = await p1.send_in_transaction(Message("TxR", b"pending"), lambda m, a: LocalTransactionState.UNKNOW)
            assert r.state is LocalTransactionState.UNKNOW
        store = b.store
        refused = store.appender.n_failed
        store.disk_usage_probe = lambda: 0.99
        store.check_disk()
        for _ in range(600):  # up to 30 s for a check pass to reach the half and have its put-back refused
            if store.appender.n_failed > refused:
                break
            await anyio.sleep(0.05)
        else:
            pytest.fail("no check pass tried to put the half back")
        store.disk_usage_probe = lambda: 0.10
        store.check_disk()

        asked: list[bytes] = []

        def checker(msg: Any) -> LocalTransactionState:
            asked.append(msg.body)
            return LocalTransactionState.COMMIT_MESSAGE

        with anyio.fail_after(60):
            async with TransactionProducer("TXG_R", ns, checker=checker):
                assert await bodies(ns, "TxR", wait_for=1, timeout=30) == [b"pending"]
        assert b"pending" in asked
