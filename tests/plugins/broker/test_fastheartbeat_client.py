"""rmq's push consumer and producer keep their registration on heartbeats answered per read (fastbeat).

One rmqd with a channel expiry of 1.5 s (RocketMQ's channelExpiredTimeout: a member whose last heartbeat is
older is dropped and its connection closed) and clients that heartbeat every 0.25 s: for many expiry
periods the same connections stay members -- their unchanged heartbeats, answered per read, refresh them --
while messages flow. A changed subscription still takes the Python path: the broker notifies the group's
other member (NOTIFY_CONSUMER_IDS_CHANGED) and lists the new topic.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from rmq.client import Admin, Message, MessageExt, Producer, PushConsumer
from rmq.protocol.codes import RequestCode
from rmq.testing.daemon import RmqdProcess
from rmq.testing.fuzz import compiler_present

pytestmark = [pytest.mark.anyio, pytest.mark.integration]

EXPIRY_MS = 1500
OPTS = {"rebalance_interval": 3600.0, "heartbeat_interval": 0.25, "persist_interval": 0.5, "pull_retry_delay": 0.2}


@pytest.fixture(scope="module")
def rmqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RmqdProcess]:
    proc = RmqdProcess(tmp_path_factory.mktemp("fastbeat-client"), broker_conf={"channelExpiredTimeout": EXPIRY_MS},
                       env={"RMQ_PURE": ""})
    proc.start()
    yield proc
    proc.stop()


async def _served(admin: Admin, proc: RmqdProcess) -> int:
    return int((await admin.broker_runtime_info(proc.broker_addr))["compiledHeartbeats"])


def _members(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((c["clientId"], c["clientAddr"]) for c in doc["connectionSet"])


async def test_clients_stay_members_on_heartbeats_per_read_and_a_new_subscription_notifies(rmqd: RmqdProcess) -> None:
    ns = rmqd.namesrv_addr
    got: list[str] = []

    async def listener(m: MessageExt) -> None:
        got.append(m.body.decode())

    async with Admin(ns) as admin:
        await admin.create_topic("HbClientT", 4)
        await admin.create_topic("HbClientU", 4)
        async with Producer("HbClientP", ns, heartbeat_interval=0.25) as producer, \
                PushConsumer("HbClientG", ns, listener=listener, consume_from_where="FIRST_OFFSET", **OPTS) as a, \
                PushConsumer("HbClientG", ns, listener=listener, consume_from_where="FIRST_OFFSET", **OPTS) as b:
            a.subscribe("HbClientT")
            b.subscribe("HbClientT")
            await producer.send(Message("HbClientT", b"first"))  # the producer's route: its heartbeats go there
            with anyio.fail_after(20):
                while len((await admin.consumer_connection("HbClientG"))["connectionSet"]) < 2 or "first" not in got:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            consumers = _members(await admin.consumer_connection("HbClientG"))
            producers = _members(await admin.producer_connection("HbClientP", "HbClientT"))
            start, t0 = await _served(admin, rmqd), time.monotonic()
            for i in range(int(4 * EXPIRY_MS / 250)):  # four expiry periods, a send every heartbeat interval
                await producer.send(Message("HbClientT", str(i).encode()))
                await anyio.sleep(0.25)
            assert time.monotonic() - t0 > 3 * EXPIRY_MS / 1000
            # the same connections all along: none expired (each would have been closed, its client reconnected)
            assert _members(await admin.consumer_connection("HbClientG")) == consumers
            assert _members(await admin.producer_connection("HbClientP", "HbClientT")) == producers
            assert not [line for line in rmqd.log_lines() if "expired: no heartbeat" in line]
            if compiler_present():  # three clients, a heartbeat each every 0.25 s: nearly all answered per read
                assert await _served(admin, rmqd) - start >= 3 * 3 * 4, start
            with anyio.fail_after(20):
                while not {str(i) for i in range(24)} <= set(got):  # noqa: ASYNC110
                    await anyio.sleep(0.05)

            notified = anyio.Event()
            handler = b.instance.handlers[RequestCode.NOTIFY_CONSUMER_IDS_CHANGED]

            async def on_notify(conn: Any, cmd: Any) -> Any:
                notified.set()
                return await handler(conn, cmd)

            b.instance.handlers[RequestCode.NOTIFY_CONSUMER_IDS_CHANGED] = on_notify
            a.subscribe("HbClientU")  # a's next heartbeat differs: the Python path registers it and notifies
            with anyio.fail_after(20):
                await notified.wait()
                while "HbClientU" not in (await admin.consumer_connection("HbClientG"))["subscriptionTable"]:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            before = await _served(admin, rmqd)
            with anyio.fail_after(20):  # and a's new heartbeat, unchanged from then on, is answered per read again
                while compiler_present() and await _served(admin, rmqd) < before + 6:  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            assert _members(await admin.consumer_connection("HbClientG")) == consumers
