"""mmap store under failure: consume-queue/index files that cannot grow, forced cleans, hostile
directories planted in the store, reads across a corrupt record's hole.

Disk errors are injected at the file layer (``MappedFile.reserve``, where every store file
asks for blocks); the real small-filesystem scenario is ``test_full_disk``.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from rmq.kernel.model import GetStatus, MessageRecord, PutStatus
from rmq.plugins.storage_mmap import mapped_file
from rmq.plugins.storage_mmap.mapped_file import DiskFullError, MappedFile
from rmq.testing.storage import decode_record

SEG = 64 * 1024


def rec(i: int, q: int = 0, size: int = 200, topic: str = "T") -> MessageRecord:
    props = f"TAGS\x01t{i % 2}\x02KEYS\x01key{i}\x02UNIQ_KEY\x01UQ{i:08d}"
    return MessageRecord(topic, q, bytes([i % 251]) * size, flag=i, properties=props)


def flags(store: Any, topic: str = "T", q: int = 0) -> list[int]:
    out: list[int] = []
    off = store.get_min_offset(topic, q)
    while off < store.get_max_offset(topic, q):
        r = store.get_messages("g", topic, q, off, 64, max_bytes=1 << 30)
        out += [decode_record(m)["flag"] for m in r.messages]
        assert r.next_begin_offset > off
        off = r.next_begin_offset
    return out


@pytest.fixture
def full_for(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """``full_for("/consumequeue/")``: reservations in files whose path holds that part fail with ENOSPC
    until ``full_for("")``."""
    state = {"part": ""}
    real = MappedFile.reserve

    def reserve(self: MappedFile, upto: int) -> None:
        if state["part"] and state["part"] in str(self.path) and upto > self.reserved:
            raise DiskFullError(
                f"reserve bytes in {self.path}", OSError(errno.ENOSPC, "No space left on device")
            )
        real(self, upto)

    monkeypatch.setattr(MappedFile, "reserve", reserve)
    real_open = MappedFile.open.__func__  # type: ignore[attr-defined]

    def open_(
        cls: type, path: Path, size: int, create: bool = False, reserve: int | None = None
    ) -> MappedFile:
        if create and state["part"] and state["part"] in str(path) and not path.exists():
            raise DiskFullError(f"create {path}", OSError(errno.ENOSPC, "No space left on device"))
        return real_open(cls, path, size, create, reserve)

    monkeypatch.setattr(MappedFile, "open", classmethod(open_))
    assert mapped_file.MappedFile is MappedFile

    def set_part(part: str) -> None:
        state["part"] = part

    yield set_part


@pytest.mark.anyio
@pytest.mark.parametrize("part", ["/consumequeue/", "/index/"])
async def test_queue_or_index_file_without_room_stalls_dispatch_not_the_store(
    tmp_path: Path,
    store_factory: Callable[..., Any],
    full_for: Callable[[str], None],
    caplog: pytest.LogCaptureFixture,
    part: str,
) -> None:
    caplog.set_level(logging.INFO, logger="rmq.store")
    async with store_factory(tmp_path, messageIndexEnable=True) as store:
        store.options = type(store.options)(disk_retry_ms=20)
        for i in range(150):  # consume-queue files hold 100 units; index files 255 entries
            assert (await store.put_message(rec(i))).ok
        await store.wait_dispatched()
        full_for(part)
        acked = list(range(150))
        i = 150
        refused = None
        for _ in range(2000):
            r = await store.put_message(rec(i))
            if r.status != PutStatus.PUT_OK:
                refused = r
                break
            acked.append(i)
            i += 1
            await anyio.lowlevel.checkpoint()
        assert refused is not None and refused.status == PutStatus.SERVICE_NOT_AVAILABLE
        assert refused.remark.startswith("disk full: ") and part.strip("/") in refused.remark
        got = flags(store)  # reads go on: everything dispatched before the stall, each once
        assert got == acked[: len(got)] and len(got) >= 150
        stopped = [r for r in caplog.records if "writes stopped" in r.getMessage()]
        assert len(stopped) == 1 and "disk full: " in stopped[0].getMessage()
        full_for("")
        with anyio.fail_after(10):
            await store.wait_dispatched()
        assert [r for r in caplog.records if "writes resumed" in r.getMessage()]
        assert (await store.put_message(rec(i))).ok
        acked.append(i)
        await store.wait_dispatched()
        assert flags(store) == acked
        assert len(store.query_by_key("T", f"key{i}", 4, 0, 2**62)) == 1
    async with store_factory(tmp_path) as store:  # nothing damaged, nothing lost
        assert flags(store) == acked and store.stats()["recovery"]["rebuilt"] == 0


@pytest.mark.anyio
async def test_start_with_a_replay_that_cannot_write_opens_read_only(
    tmp_path: Path,
    store_factory: Callable[..., Any],
    full_for: Callable[[str], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with store_factory(tmp_path) as store:
        for i in range(250):
            assert (await store.put_message(rec(i))).ok
    import shutil

    shutil.rmtree(tmp_path / "consumequeue")  # must be rebuilt at start, but no file can be made
    full_for("/consumequeue/")
    caplog.set_level(logging.INFO, logger="rmq.store")
    with anyio.fail_after(10):  # the start does not wait for a replay that cannot progress
        async with store_factory(tmp_path) as store:
            started = [r.getMessage() for r in caplog.records if " started " in r.getMessage()]
            assert "READ-ONLY" in started[0] and "disk full: " in started[0]
            r = await store.put_message(rec(999))
            assert r.status == PutStatus.SERVICE_NOT_AVAILABLE and r.remark.startswith("disk full: ")
            assert store.look_message_by_offset(0) is not None  # the commitlog is readable meanwhile
            full_for("")
            await store.wait_dispatched()
            assert flags(store) == list(range(250))
            assert (await store.put_message(rec(250))).ok


@pytest.mark.anyio
async def test_forced_clean_reports_what_it_destroys(
    tmp_path: Path, store_factory: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with store_factory(tmp_path, fileReservedTime=72, deleteWhen="99") as store:
        for i in range(900):
            assert (await store.put_message(rec(i, q=i % 3, topic="A" if i % 2 else "B"))).ok
        await store.wait_dispatched()
        reports: list[dict[tuple[str, int], tuple[int, int]]] = []
        store.on_forced_clean = reports.append
        before = {(t, q): store.get_min_offset(t, q) for t in "AB" for q in range(3)}
        store.disk_usage_probe = lambda: 0.80  # > 75 %: expired files only (none expired): nothing
        assert await store.clean_expired_files() == 0 and reports == []
        caplog.set_level(logging.INFO, logger="rmq.store")
        store.disk_usage_probe = lambda: 0.87  # > 85 %: the oldest go, expired or not
        deleted = await store.clean_expired_files()
        assert deleted > 0 and len(reports) == 1
        after = {(t, q): store.get_min_offset(t, q) for t in "AB" for q in range(3)}
        assert reports[0] == {k: (before[k], after[k]) for k in before if after[k] > before[k]}
        assert reports[0] and all(new > old for old, new in reports[0].values())
        lines = [r.getMessage() for r in caplog.records if "forced clean" in r.getMessage()]
        assert len(lines) == 1 and "87.0%" in lines[0] and "A/1" in lines[0]
        for i in range(900, 1500):
            assert (await store.put_message(rec(i, q=i % 3, topic="A" if i % 2 else "B"))).ok
        await store.wait_dispatched()
        store.on_forced_clean = lambda lost: 1 / 0  # a broken callback is logged, never raised
        assert await store.clean_expired_files() > 0
        assert [r for r in caplog.records if "on_forced_clean callback failed" in r.getMessage()]


@pytest.mark.anyio
async def test_planted_names_and_symlinks_stay_outside(
    tmp_path: Path, store_factory: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "store"
    outside = tmp_path / "outside"
    (outside / "0").mkdir(parents=True)
    (outside / "0" / "00000000000000000000").write_bytes(bytes(2000))
    (outside / "keep").write_text("keep")
    async with store_factory(root) as store:
        for i in range(5):
            assert (await store.put_message(rec(i))).ok
    cq = root / "consumequeue"
    (cq / "Evil").symlink_to(outside, target_is_directory=True)  # a planted topic directory
    (cq / "T" / "7").symlink_to(outside / "0", target_is_directory=True)  # a planted queue directory
    (cq / "bad.name" / "0").mkdir(parents=True)  # not a RocketMQ topic name
    (cq / "T" / "0" / "00000000000000002000").symlink_to(outside / "keep")  # a planted segment
    caplog.set_level(logging.WARNING, logger="rmq.store")
    async with store_factory(root) as store:
        msgs = " ".join(r.getMessage() for r in caplog.records)
        assert "Evil: skipped" in msgs and "bad.name: skipped" in msgs and "7: skipped" in msgs
        assert store.get_max_offset("Evil", 0) == 0 and store.get_max_offset("T", 7) == 0
        assert flags(store) == list(range(5))
        store.delete_topics(["Evil", "bad.name", "..", "../outside", str(outside), "T"])
        assert store.get_max_offset("T", 0) == 0
    assert (outside / "keep").read_text() == "keep" and (outside / "0" / "00000000000000000000").exists()
    assert not (cq / "Evil").exists() and not (cq / "T").exists()  # links removed, targets untouched
    assert (cq / "bad.name").is_dir()  # an invalid name is never acted on
    async with store_factory(root) as store:  # a deleted topic stays deleted after a restart
        assert store.get_max_offset("T", 0) == 0
        assert (await store.put_message(rec(9))).queue_offset == 0  # recreated: starts afresh


@pytest.mark.anyio
async def test_reads_step_over_a_hole(tmp_path: Path, store_factory: Callable[..., Any]) -> None:
    async with store_factory(tmp_path) as store:
        results = [await store.put_message(rec(i, size=300)) for i in range(40)]
        assert all(r.ok for r in results)
    seg = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    for k in (10, 11, 39):  # two neighbours and the last one
        data[results[k].wrote_offset + 150] ^= 0x5A
    seg.write_bytes(bytes(data))
    async with store_factory(tmp_path) as store:
        assert store.get_max_offset("T", 0) == 39  # the last record is gone: the queue ends before it
        r = store.get_messages("g", "T", 0, 10, 5)
        assert r.status == GetStatus.FOUND and r.queue_offsets == [12, 13, 14, 15, 16]
        r = store.get_messages("g", "T", 0, 8, 4)
        assert r.queue_offsets in ([8, 9], [8, 9, 12, 13]) and r.next_begin_offset > 9
        assert flags(store) == [i for i in range(39) if i not in (10, 11)]
        assert store.get_store_time("T", 0, 10) == -1 and store.get_store_time("T", 0, 12) > 0
        assert 0 <= store.get_offset_by_time("T", 0, results[20].store_timestamp) <= 39
        r = await store.put_message(rec(100))
        assert r.queue_offset == 39  # the record that was cut is not in any queue: its offset is reused
    os.sync()


@pytest.mark.anyio
async def test_verify_modes(
    tmp_path: Path, store_factory: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """ "all" checks every unit; "recent" RocketMQ's window (units below it: range and order only);
    "auto" is "all" up to verify_all_max_gib."""
    async with store_factory(tmp_path) as store:
        results = [await store.put_message(rec(i, size=300)) for i in range(900)]  # ~5 segments
        await store.wait_dispatched()
    async with store_factory(tmp_path) as store:  # auto, a small store: everything
        assert store.stats()["recovery"]["units_checked"] == 900
    caplog.set_level(logging.INFO, logger="rmq.store")
    async with store_factory(tmp_path, options={"verify_all_max_gib": 1e-6}) as store:
        assert 0 < store.stats()["recovery"]["units_checked"] < 900
        assert [r for r in caplog.records if "recent segments only" in r.getMessage()]
    last = results[-5]  # damage in the window is found and costs only that record ...
    first = results[5]  # ... damage before it is not looked for ("all" would find it)
    for r in (last, first):
        seg = tmp_path / "commitlog" / f"{r.wrote_offset // SEG * SEG:020d}"
        data = bytearray(seg.read_bytes())
        data[r.wrote_offset % SEG + 150] ^= 0x77
        seg.write_bytes(bytes(data))
    async with store_factory(tmp_path, options={"verify": "recent"}) as store:
        assert store.stats()["corrupt_ranges"] == 1
        r = store.get_messages("g", "T", 0, 890, 10)
        assert r.queue_offsets == [890, 891, 892, 893, 894] and r.next_begin_offset == 895
        r = store.get_messages("g", "T", 0, 895, 10)
        assert r.queue_offsets == [896, 897, 898, 899]
        r = store.get_messages("g", "T", 0, 5, 1)  # outside the window: served as it is on disk, unchecked
        with pytest.raises(AssertionError, match="BODYCRC"):
            decode_record(r.messages[0])
    async with store_factory(tmp_path, options={"verify": "all"}) as store:
        assert store.stats()["corrupt_ranges"] == 2
        assert flags(store) == [i for i in range(900) if i not in (5, 895)]


@pytest.mark.anyio
async def test_a_record_torn_in_its_properties_is_cut_not_served(
    tmp_path: Path, store_factory: Callable[..., Any]
) -> None:
    """A crash mid-copy can leave a record whose lengths and body CRC are right but whose properties
    end in zeros (the CRC covers only the body): served, it would lose its tags and keys."""
    async with store_factory(tmp_path) as store:
        results = [await store.put_message(rec(i)) for i in range(20)]
    last = results[-1]
    seg = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(seg.read_bytes())
    end = last.wrote_offset + last.wrote_bytes
    data[end - 12 : end] = bytes(12)  # "UQ00000019" and the separator before it never arrived
    seg.write_bytes(bytes(data))
    (tmp_path / "abort").touch()
    async with store_factory(tmp_path) as store:
        assert store.max_phy_offset == last.wrote_offset and store.get_max_offset("T", 0) == 19
        assert flags(store) == list(range(19))
        assert store.look_message_by_offset(last.wrote_offset) is None
        r = await store.put_message(rec(19))
        assert r.queue_offset == 19 and r.wrote_offset == last.wrote_offset
