"""Lazily mapped consume queues (issue #26): a store with more queues than it may map keeps at
most ``max_mapped_queues`` mapped, parks idle flushed ones, maps them again on use, and loses
nothing across a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq.kernel import GetStatus, MessageRecord

from .conftest import open_store

pytestmark = pytest.mark.anyio


def _rec(topic: str, qid: int, body: bytes) -> MessageRecord:
    return MessageRecord(topic, qid, body, 0, "", 0, 1700000000000, b"\x7f\x00\x00\x01\x00\x00\x00\x01")


async def test_many_queues_stay_within_the_mapped_bound(tmp_path: Path) -> None:
    opts = {"max_mapped_queues": 8}
    async with open_store(tmp_path, options=opts) as store:
        for t in range(30):
            for q in range(2):
                for i in range(3):
                    assert (await store.put_message(_rec(f"L{t}", q, f"{t}-{q}-{i}".encode()))).ok
        await store.wait_dispatched()
        store.cqs.trim()
        assert len(store.cqs.mapped) <= 8
        for t in range(30):  # every queue read back (mapped again on demand), the bound kept after each read
            for q in range(2):
                res = store.get_messages("g", f"L{t}", q, 0, 10)
                assert res.status is GetStatus.FOUND and len(res.messages) == 3
                assert store.get_max_offset(f"L{t}", q) == 3
        assert len(store.cqs.mapped) <= 8 + 1
    async with open_store(tmp_path, options=opts) as store:  # a restart maps none of them until used
        assert len(store.cqs.mapped) <= 8
        assert store.stats()["consume_queues"] == 60
        for t in range(30):
            assert store.get_max_offset(f"L{t}", 1) == 3  # answered from the parked bounds
            res = store.get_messages("g", f"L{t}", 1, 1, 10)
            assert [f"{t}-1-{i}".encode() in bytes(m) for i, m in zip((1, 2), res.messages, strict=True)] == [True] * 2
            assert (await store.put_message(_rec(f"L{t}", 1, b"more"))).queue_offset == 3
