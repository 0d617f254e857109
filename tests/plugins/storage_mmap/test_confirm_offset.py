"""Controller mode's confirm offset in the store: records at or beyond it are stored but not dispatched
(RocketMQ 5's reput ends at ``getConfirmOffset``), the value survives a restart in the checkpoint,
and the records it holds back keep their queue offsets across that restart."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from rmq.kernel.model import GetStatus, MessageRecord, PutStatus

from .conftest import open_store

pytestmark = pytest.mark.anyio
CONTROLLER = {"enableControllerMode": True, "controllerAddr": "127.0.0.1:1"}  # never dialled: a store alone


def rec(i: int) -> MessageRecord:
    return MessageRecord("T", 0, b"m%03d" % i, born_timestamp=1000 + i, properties=f"UNIQ_KEY\x01U{i:04d}")


def bodies(store, offset: int = 0) -> list[bytes]:  # type: ignore[no-untyped-def]
    got = store.get_messages("G", "T", 0, offset, 64)
    if got.status is not GetStatus.FOUND:
        return []
    return [re.search(rb"m\d{3}", bytes(m)).group() for m in got.messages]  # type: ignore[union-attr]


async def test_dispatch_stops_at_the_confirm_offset_and_resumes_when_it_moves(tmp_path: Path) -> None:
    async with open_store(tmp_path, **CONTROLLER) as store:
        ends = []
        for i in range(10):
            r = await store.put_message(rec(i))
            assert r.status is PutStatus.PUT_OK
            ends.append(r.wrote_offset + r.wrote_bytes)
        await store.wait_dispatched()
        # a fresh controller-mode store has confirmed nothing: stored, not readable
        assert store.confirm_offset == 0 and store.get_max_offset("T", 0) == 0 and bodies(store) == []
        store.set_confirm_offset(ends[4])
        await store.wait_dispatched()
        assert store.confirm_offset == ends[4]
        assert bodies(store) == [b"m%03d" % i for i in range(5)]
        store.set_confirm_offset(None)  # a master whose SyncStateSet is itself
        await store.wait_dispatched()
        assert store.confirm_offset == store.max_phy_offset
        assert bodies(store) == [b"m%03d" % i for i in range(10)]


async def test_confirm_offset_survives_restart_and_held_records_keep_their_queue_offsets(tmp_path: Path) -> None:
    async with open_store(tmp_path, **CONTROLLER) as store:
        ends = [(await store.put_message(rec(i))) for i in range(10)]
        store.set_confirm_offset(ends[5].wrote_offset + ends[5].wrote_bytes)
        await store.wait_dispatched()
        assert len(bodies(store)) == 6
    cp = (tmp_path / "checkpoint").read_bytes()
    assert struct.unpack_from(">q", cp, 32)[0] == ends[5].wrote_offset + ends[5].wrote_bytes  # RocketMQ 5's slot
    async with open_store(tmp_path, **CONTROLLER) as store:
        assert store.confirm_offset == ends[5].wrote_offset + ends[5].wrote_bytes
        assert store.stats()["recovery"]["rebuilt"] == 0  # a held tail is no damage to repair
        assert bodies(store) == [b"m%03d" % i for i in range(6)]
        r = await store.put_message(rec(10))
        assert r.queue_offset == 10  # not 6: the four held records own 6..9
        store.set_confirm_offset(None)
        await store.wait_dispatched()
        assert bodies(store) == [b"m%03d" % i for i in range(11)]


async def test_a_restart_clamps_a_confirm_offset_beyond_the_log(tmp_path: Path) -> None:
    async with open_store(tmp_path, **CONTROLLER) as store:
        for i in range(3):
            await store.put_message(rec(i))
        store.set_confirm_offset(None)
    cp = bytearray((tmp_path / "checkpoint").read_bytes())
    struct.pack_into(">q", cp, 32, 1 << 40)
    (tmp_path / "checkpoint").write_bytes(bytes(cp))
    async with open_store(tmp_path, **CONTROLLER) as store:
        assert store.confirm_offset == store.max_phy_offset
        assert len(bodies(store)) == 3


async def test_classic_mode_is_never_held_back(tmp_path: Path) -> None:
    async with open_store(tmp_path) as store:
        for i in range(5):
            await store.put_message(rec(i))
        await store.wait_dispatched()
        assert store.confirm_offset == store.max_phy_offset
        assert "confirm_offset" not in store.stats()
        assert len(bodies(store)) == 5
