"""The broker's topic table guards its store (issue #26): a put by any path, the broker's own
included, opens no consume queue outside its topic's queues nor for a topic it does not know."""

from __future__ import annotations

from typing import Any

import pytest

from rmq.kernel import MessageRecord, PutStatus
from rmq.protocol.names import TRANS_HALF_TOPIC

pytestmark = pytest.mark.anyio


def _rec(topic: str, qid: int) -> MessageRecord:
    return MessageRecord(topic, qid, b"b", 0, "", 0, 1700000000000, b"\x7f\x00\x00\x01\x00\x00\x00\x01")


@pytest.mark.parametrize("store", ["memory", "mmap"])
async def test_broker_puts_stay_inside_the_topic_table(broker_env: Any, store: str) -> None:
    async with broker_env(store=store) as env:
        assert (await env.send("GuardT", b"x")).code == 0  # auto-created with 4 queues
        b = env.broker
        assert (await b.put(_rec("GuardT", 3))).status is PutStatus.PUT_OK
        assert (await b.put(_rec(TRANS_HALF_TOPIC, 0))).status is PutStatus.PUT_OK  # the broker's own topic
        for topic, qid in (("GuardT", 4), ("GuardT", 70000), ("Unknown", 0), (TRANS_HALF_TOPIC, 1)):
            r = await b.put(_rec(topic, qid))
            assert r.status is PutStatus.MESSAGE_ILLEGAL, (topic, qid, r)
            assert topic in r.remark
        await b.store.wait_dispatched()
        assert b.store.get_max_offset("GuardT", 4) == 0 and b.store.get_max_offset("Unknown", 0) == 0
