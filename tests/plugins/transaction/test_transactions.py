"""Transactional messages against a real rmqd with our TransactionProducer: commit, rollback, a half
message invisible until committed, an unknown outcome settled by the broker's check (answered by
another producer of the group once the first is gone), the check surviving a SIGKILL of rmqd, and
the discard after transactionCheckMax checks."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from rmq.client import LocalTransactionState, Message, PullConsumer, PullStatus, TransactionProducer
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.jsonbody import loads
from rmq.protocol.message import decode_message
from rmq.testing.daemon import RmqdProcess

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def tx_rmqd(rmqd_factory: Any) -> RmqdProcess:
    return rmqd_factory(broker_conf={"transactionCheckInterval": 500, "transactionTimeOut": 1000,
                                     "transactionCheckMax": 3})  # type: ignore[no-any-return]


async def create_topic(addr: str, topic: str) -> None:
    async with TcpRemotingClient(RemotingConfig(name="tx-admin")) as c:
        r = await c.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}), 5)
        assert r.code == 0


async def bodies(ns: str, topic: str, wait_for: int = 0, timeout: float = 15, raw: bool = False) -> list[Any]:
    got: list[Any] = []
    async with PullConsumer("TX_CHECK", ns) as pc:
        mq = (await pc.fetch_queues(topic))[0]
        with anyio.move_on_after(timeout):
            offset = 0
            while True:
                r = await pc.pull(mq, offset, 32)
                if r.status is PullStatus.FOUND:
                    got += r.messages if raw else [m.body for m in r.messages]
                    offset = r.next_begin_offset
                    continue
                if len(got) >= wait_for:
                    break
                await anyio.sleep(0.2)
    return got


async def test_commit_rollback_and_invisible_until_committed(tx_rmqd: RmqdProcess) -> None:
    ns = tx_rmqd.namesrv_addr
    await create_topic(tx_rmqd.broker_addr, "TxA")
    release = anyio.Event()
    seen_during: list[bytes] = []

    async def slow_commit(msg: Message, arg: Any) -> LocalTransactionState:
        seen_during.extend(await bodies(ns, "TxA", timeout=1))  # the half is stored but must not show
        release.set()
        return LocalTransactionState.COMMIT_MESSAGE

    async with TransactionProducer("TXG_A", ns) as p:
        r = await p.send_in_transaction(Message("TxA", b"one"), slow_commit)
        assert r.state is LocalTransactionState.COMMIT_MESSAGE
        r = await p.send_in_transaction(Message("TxA", b"two"), lambda m, a: LocalTransactionState.ROLLBACK_MESSAGE)
        assert r.state is LocalTransactionState.ROLLBACK_MESSAGE
        r = await p.send_in_transaction(Message("TxA", b"three"), lambda m, a: True)
    assert seen_during == []
    assert await bodies(ns, "TxA", wait_for=2) == [b"one", b"three"]
    await anyio.sleep(2.5)  # several check passes: nothing settled is asked about or delivered again
    assert await bodies(ns, "TxA", wait_for=2) == [b"one", b"three"]
    # the half and op queues are topics of the broker's table (RocketMQ 5 creates both at start, 4.9.8 the
    # half one at its first check): tools and a Java broker later opening these files read them
    async with TcpRemotingClient(RemotingConfig(name="tx-topics")) as c:
        r = await c.invoke(tx_rmqd.broker_addr, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG), 5)
    table = loads(r.body)["topicConfigTable"]
    for topic in ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"):
        assert (table[topic]["readQueueNums"], table[topic]["writeQueueNums"], table[topic]["perm"]) == (1, 1, 6)
    assert [m.body for m in await bodies(ns, "RMQ_SYS_TRANS_HALF_TOPIC", wait_for=3, raw=True)] \
        == [b"one", b"two", b"three"]


async def test_unknown_outcome_is_settled_by_a_check_to_another_producer(tx_rmqd: RmqdProcess) -> None:
    ns = tx_rmqd.namesrv_addr
    await create_topic(tx_rmqd.broker_addr, "TxB")
    async with TransactionProducer("TXG_B", ns) as p1:  # its owner goes away before deciding
        r = await p1.send_in_transaction(Message("TxB", b"pending"), lambda m, a: LocalTransactionState.UNKNOW)
        assert r.state is LocalTransactionState.UNKNOW
    asked: list[bytes] = []

    def checker(msg: Any) -> LocalTransactionState:
        asked.append(msg)
        return LocalTransactionState.COMMIT_MESSAGE

    async with TransactionProducer("TXG_B", ns, checker=checker):
        assert await bodies(ns, "TxB", wait_for=1, timeout=20) == [b"pending"]
    assert asked and asked[0].body == b"pending"
    assert asked[0].topic == "TxB"  # the check shows the real topic, as RocketMQ's does
    async with PullConsumer("TX_PROPS", ns) as pc:  # the committed record keeps the half's properties
        r = await pc.pull((await pc.fetch_queues("TxB"))[0], 0, 1)
        assert r.messages[0].properties.get("TRAN_MSG") == "true" and r.messages[0].properties.get("PGROUP") == "TXG_B"


async def test_check_survives_a_crash_and_max_checks_discard(rmqd_factory: Any) -> None:
    proc = rmqd_factory(broker_conf={"transactionCheckInterval": 500, "transactionTimeOut": 1000,
                                     "transactionCheckMax": 2})
    ns = proc.namesrv_addr
    await create_topic(proc.broker_addr, "TxC")
    async with TransactionProducer("TXG_C", ns) as p:
        await p.send_in_transaction(Message("TxC", b"after-crash"), lambda m, a: LocalTransactionState.UNKNOW)
        await p.send_in_transaction(Message("TxC", b"never"), lambda m, a: LocalTransactionState.UNKNOW)
    proc.kill()
    proc.start()

    decided = {b"after-crash"}

    def checker(msg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT_MESSAGE if msg.body in decided else LocalTransactionState.UNKNOW

    async with TransactionProducer("TXG_C", ns, checker=checker):
        assert await bodies(ns, "TxC", wait_for=1, timeout=20) == [b"after-crash"]
        with anyio.fail_after(30):  # the undecided one goes to TRANS_CHECK_MAX_TIME_TOPIC after 2 checks
            while True:
                async with TcpRemotingClient(RemotingConfig(name="tx-q")) as c:
                    r = await c.invoke(proc.broker_addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {
                        "topic": "TRANS_CHECK_MAX_TIME_TOPIC", "queueId": "0"}), 5)
                if r.code == 0 and int(r.ext.get("offset", 0)) >= 1:
                    break
                await anyio.sleep(0.3)
        assert await bodies(ns, "TxC", wait_for=1, timeout=2) == [b"after-crash"]
        # an operator puts the discarded one back (RESUME_CHECK_HALF_MESSAGE); now the producer knows
        decided.add(b"never")
        async with TcpRemotingClient(RemotingConfig(name="tx-q")) as c:
            r = await c.invoke(proc.broker_addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                "consumerGroup": "ops", "topic": "TRANS_CHECK_MAX_TIME_TOPIC", "queueId": "0", "queueOffset": "0",
                "maxMsgNums": "1", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                "subscription": "*", "subVersion": "0", "expressionType": "TAG"}), 5)
            assert r.code == 0
            discarded = decode_message(r.body)
            r = await c.invoke(proc.broker_addr, RemotingCommand.request(
                RequestCode.RESUME_CHECK_HALF_MESSAGE, {"msgId": discarded.offset_msg_id}), 5)
            assert r.code == 0, r.remark
        assert sorted(await bodies(ns, "TxC", wait_for=2, timeout=20)) == [b"after-crash", b"never"]
    async with TcpRemotingClient(RemotingConfig(name="tx-q")) as c:  # progress is a consumer offset, as in RocketMQ
        r = await c.invoke(proc.broker_addr, RemotingCommand.request(RequestCode.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": "CID_RMQ_SYS_TRANS", "topic": "RMQ_SYS_TRANS_HALF_TOPIC", "queueId": "0"}), 5)
    assert r.code == 0 and int(r.ext["offset"]) >= 2


async def test_immunity_delays_a_check_without_holding_up_the_others(tx_rmqd: RmqdProcess) -> None:
    ns = tx_rmqd.namesrv_addr
    await create_topic(tx_rmqd.broker_addr, "TxD")
    asked: dict[bytes, float] = {}
    t0 = time.monotonic()

    def checker(msg: Any) -> LocalTransactionState:  # runs in a worker thread
        asked.setdefault(msg.body, time.monotonic() - t0)
        return LocalTransactionState.COMMIT_MESSAGE

    async with TransactionProducer("TXG_D", ns, checker=checker) as p:
        immune = Message("TxD", b"immune")
        immune.properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] = "4"
        await p.send_in_transaction(immune, lambda m, a: LocalTransactionState.UNKNOW)
        await p.send_in_transaction(Message("TxD", b"plain"), lambda m, a: LocalTransactionState.UNKNOW)
        got = await bodies(ns, "TxD", wait_for=2, timeout=25)
    assert sorted(got) == [b"immune", b"plain"]
    assert asked[b"plain"] < asked[b"immune"] and asked[b"immune"] >= 3.5  # checked after its immunity only


async def test_a_second_commit_of_one_transaction_stores_nothing_more(tx_rmqd: RmqdProcess) -> None:
    """An END resent after its answer was lost, or a check's copy of a half committed meanwhile, settles the
    half and answers OK without a second message (RocketMQ 4.9 would store the message again)."""
    from rmq.client.transaction import end_transaction_header

    ns = tx_rmqd.namesrv_addr
    await create_topic(tx_rmqd.broker_addr, "TxTwice")
    async with TransactionProducer("TXG_TWICE", ns, checker=lambda m: None) as p:
        sent = await p.send_in_transaction(Message("TxTwice", b"once"), lambda m, a: LocalTransactionState.UNKNOW)
    r = sent.send_result
    ext = end_transaction_header("TXG_TWICE", LocalTransactionState.COMMIT_MESSAGE, queue_offset=r.queue_offset,
                                 offset_msg_id=r.offset_msg_id or r.msg_id, msg_id=r.msg_id,
                                 transaction_id=r.transaction_id, from_check=False)
    async with TcpRemotingClient(RemotingConfig(name="tx-twice")) as c:
        for _ in range(2):
            resp = await c.invoke(tx_rmqd.broker_addr, RemotingCommand.request(RequestCode.END_TRANSACTION, ext), 5)
            assert resp.code == 0, resp.remark
    assert await bodies(ns, "TxTwice", wait_for=1) == [b"once"]
    await anyio.sleep(1.5)  # a check pass: the half is settled, nothing more arrives
    assert await bodies(ns, "TxTwice", wait_for=1, timeout=2) == [b"once"]
