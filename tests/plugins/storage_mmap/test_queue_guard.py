"""``queue_guard``: the one point every put passes before a consume queue comes to exist (issue #26).

The broker sets it to its topic table's rule; whatever path a record takes to the store (send,
reply, transaction commit, delayed or timer delivery, POP's DLQ), a queue its topic does not
have is refused here, with MESSAGE_ILLEGAL and the guard's reason, before a byte is written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq.kernel import MessageRecord, PutStatus
from rmq.plugins.memory import MemoryMessageStore
from rmq.testing import make_kernel

from .conftest import open_store

pytestmark = pytest.mark.anyio


def _rec(topic: str, qid: int) -> MessageRecord:
    return MessageRecord(topic, qid, b"body", 0, "", 0, 1700000000000, b"\x7f\x00\x00\x01\x00\x00\x00\x01")


def _only_two_queues_of_t(topic: str, qid: int) -> str | None:
    return None if topic == "T" and 0 <= qid < 2 else f"no queue {topic}/{qid} here"


async def test_mmap_store_refuses_a_queue_its_guard_refuses(tmp_path: Path) -> None:
    async with open_store(tmp_path) as store:
        before = store.max_phy_offset
        store.queue_guard = _only_two_queues_of_t
        assert (await store.put_message(_rec("T", 1))).status is PutStatus.PUT_OK
        for topic, qid in (("T", 2), ("T", 9999), ("T", -1), ("Other", 0)):
            r = await store.put_message(_rec(topic, qid))
            assert r.status is PutStatus.MESSAGE_ILLEGAL and r.remark == f"no queue {topic}/{qid} here"
            r = await store.put_messages([_rec(topic, qid), _rec(topic, qid)])
            assert r.status is PutStatus.MESSAGE_ILLEGAL
        await store.wait_dispatched()
        assert sorted(p.name for p in (tmp_path / "consumequeue").iterdir()) == ["T"]
        assert sorted(p.name for p in (tmp_path / "consumequeue" / "T").iterdir()) == ["1"]
        store.queue_guard = lambda t, q: "closed"  # a queue that exists is never asked about again
        assert (await store.put_message(_rec("T", 1))).status is PutStatus.PUT_OK
        await store.wait_dispatched()
        assert store.get_max_offset("T", 1) == 2 and store.max_phy_offset > before


async def test_memory_store_refuses_a_queue_its_guard_refuses() -> None:
    kernel = make_kernel([], {"broker": {}})
    async with MemoryMessageStore(kernel.config.broker) as store:
        store.queue_guard = _only_two_queues_of_t
        assert (await store.put_message(_rec("T", 0))).status is PutStatus.PUT_OK
        r = await store.put_message(_rec("T", 5))
        assert r.status is PutStatus.MESSAGE_ILLEGAL and r.remark == "no queue T/5 here"
        assert "T" in store.queues and 5 not in store.queues["T"] and "Other" not in store.queues
