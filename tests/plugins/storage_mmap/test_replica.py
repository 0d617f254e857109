"""The commitlog as a replica: bytes read from one store and applied to another end up identical.

Chunks are cut at arbitrary places (the HA stream does), records may straddle chunks,
segments roll; the slave's own reput must build the same consume queues. Bad chunks
are refused whole.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from rmq.kernel import ReplicaError, ReplicaLog
from rmq.kernel.model import GetStatus, MessageRecord, PutStatus

from .conftest import open_store

pytestmark = pytest.mark.anyio

SEG = 64 * 1024


def rec(i: int, size: int = 300) -> MessageRecord:
    return MessageRecord(
        "T", i % 3, bytes([i % 251]) * (size + i % 97), born_timestamp=1000 + i,
        properties=f"TAGS\x01t{i % 2}\x02UNIQ_KEY\x01UQ{i:08d}",
    )


def log_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((root / "commitlog").iterdir()))


async def ship(master, slave, rng: random.Random, start: int = 0) -> int:
    """Copy master → slave in random chunk sizes, as the HA stream would; returns the end."""
    nxt = start
    while True:
        data = master.read_commitlog(nxt, rng.randint(1, 5000))
        if not data:
            return nxt
        assert slave.append_replicated(nxt, data) == nxt + len(data)
        nxt += len(data)


async def test_replica_is_byte_identical_and_dispatches(tmp_path: Path) -> None:
    rng = random.Random(7)
    async with open_store(tmp_path / "m") as master, open_store(tmp_path / "s") as slave:
        assert isinstance(master, ReplicaLog) and isinstance(slave, ReplicaLog)
        for i in range(600):  # ~ 5 segments of 64 KiB, with end-of-segment fillers
            assert (await master.put_message(rec(i))).status is PutStatus.PUT_OK
        end = await ship(master, slave, rng)
        assert end == master.max_phy_offset == slave.max_phy_offset
        await slave.wait_dispatched()
        for q in range(3):
            assert slave.get_max_offset("T", q) == master.get_max_offset("T", q) == 200
            got = slave.get_messages("G", "T", q, 0, 32)
            want = master.get_messages("G", "T", q, 0, 32)
            assert got.status is GetStatus.FOUND
            assert [bytes(m) for m in got.messages] == [bytes(m) for m in want.messages]
    assert log_bytes(tmp_path / "m") == log_bytes(tmp_path / "s")


async def test_slave_survives_restart_and_resumes(tmp_path: Path) -> None:
    rng = random.Random(3)
    async with open_store(tmp_path / "m") as master:
        for i in range(300):
            await master.put_message(rec(i))
        async with open_store(tmp_path / "s") as slave:
            half = master.read_commitlog(0, 1000)
            assert half is not None
            slave.append_replicated(0, half[:700])  # ends inside the third record
            assert slave.max_phy_offset < 700 <= slave.replica_next_offset
        async with open_store(tmp_path / "s") as slave:  # the unfinished tail is gone, whole records stay
            resume = slave.max_phy_offset
            assert resume > 0
            slave.reset_replica()
            await ship(master, slave, rng, resume)
            assert slave.max_phy_offset == master.max_phy_offset
    assert log_bytes(tmp_path / "m") == log_bytes(tmp_path / "s")


async def test_bad_chunks_write_nothing(tmp_path: Path) -> None:
    async with open_store(tmp_path / "m") as master, open_store(tmp_path / "s") as slave:
        for i in range(20):
            await master.put_message(rec(i))
        data = bytearray(master.read_commitlog(0, 4000) or b"")
        with pytest.raises(ReplicaError, match="segment boundary"):
            slave.append_replicated(100, bytes(data))
        bad = bytearray(data)
        bad[200] ^= 0xFF  # inside the first record's body
        with pytest.raises(ReplicaError, match="CRC"):
            slave.append_replicated(0, bytes(bad))
        assert slave.max_phy_offset == 0 and slave.replica_next_offset == 0
        moved = bytearray(data)
        struct.pack_into(">q", moved, 28, 12345)  # PHYSICALOFFSET of the first record
        with pytest.raises(ReplicaError, match="belongs at 12345"):
            slave.append_replicated(0, bytes(moved))
        junk = b"\x00\x00\x01\x00" + b"\x12\x34\x56\x78" + bytes(300)
        with pytest.raises(ReplicaError, match="magic"):
            slave.append_replicated(0, junk)
        assert slave.append_replicated(0, bytes(data)) == len(data)
        with pytest.raises(ReplicaError, match="continues at"):
            slave.append_replicated(len(data) + 8, b"x")
        assert master.read_commitlog(-1, 10) is None
        assert master.read_commitlog(master.max_phy_offset, 10) == b""


async def test_filler_of_another_segment_size_is_refused(tmp_path: Path) -> None:
    async with open_store(tmp_path / "m", mappedFileSizeCommitLog=32 * 1024) as master, \
            open_store(tmp_path / "s") as slave:
        for i in range(120):
            await master.put_message(rec(i))
        with pytest.raises(ReplicaError, match="mappedFileSizeCommitLog"):
            await ship(master, slave, random.Random(1))


async def test_truncate_log_cuts_records_queues_and_index_and_writes_go_on(tmp_path: Path) -> None:
    async with open_store(tmp_path / "s") as store:
        ends = []
        for i in range(400):  # several segments
            r = await store.put_message(rec(i))
            ends.append(r.wrote_offset + r.wrote_bytes)
        await store.wait_dispatched()
        keep = ends[249]  # the first 250 records stay
        with pytest.raises(ReplicaError, match="no record starts"):
            await store.truncate_log(keep + 3)
        removed = await store.truncate_log(keep)
        assert removed == ends[-1] - keep and store.max_phy_offset == keep
        for q in range(3):
            want = len([i for i in range(250) if i % 3 == q])
            assert store.get_max_offset("T", q) == want
        assert store.query_by_key("T", "UQ00000300", 10, 0, 2**62) == []
        # the log continues from the cut: new records take the freed queue offsets
        r = await store.put_message(rec(1000))
        assert r.wrote_offset == keep and r.queue_offset == len([i for i in range(250) if i % 3 == 1000 % 3])
        await store.wait_dispatched()
        got = store.get_messages("G", "T", 1000 % 3, r.queue_offset, 1)
        assert got.status is GetStatus.FOUND and bytes(got.messages[0]) == store.look_message_by_offset(keep)
    async with open_store(tmp_path / "s") as store:  # and a restart agrees
        assert store.max_phy_offset == keep + r.wrote_bytes
