"""mmap store specifics: on-disk layout, rolling, consume-queue/index files, recovery, retention.

Records and units are decoded here from the reference tables (``decode_record`` in
``rmq.testing.storage`` and the struct formats below), never by the store's codec.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.kernel.model import GetStatus, MessageRecord, PutStatus
from rmq.plugins.storage_mmap import MmapMessageStore, MmapStoragePlugin, StoreError
from rmq.protocol.common import java_hash
from rmq.protocol.message import decode_message
from rmq.testing.storage import DispatcherPlugin, RecordingDispatcher, decode_record

SEG = 64 * 1024
CQ_UNITS = 100


def rec(i: int, q: int = 0, size: int = 200, topic: str = "T", **kw: Any) -> MessageRecord:
    kw.setdefault("properties", f"TAGS\x01t{i % 2}\x02KEYS\x01key{i}\x02UNIQ_KEY\x01UQ{i:08d}")
    return MessageRecord(topic, q, bytes([i % 251]) * size, flag=i, born_timestamp=1000 + i, **kw)


def segments(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def walk_segment(data: bytes) -> tuple[list[dict[str, Any]], int, int | None]:
    """Records of one segment by the reference rules: (records, end position, blank size or None)."""
    out = []
    pos = 0
    while pos + 8 <= len(data):
        total, magic = struct.unpack_from(">ii", data, pos)
        if magic == -875286124:  # 0xCBD43194 blank
            return out, pos, total
        if magic != -626843481:
            return out, pos, None
        out.append(decode_record(data[pos : pos + total]))
        pos += total
    return out, pos, None


def cq_units(path: Path) -> list[tuple[int, int, int]]:
    data = path.read_bytes()
    units = [struct.unpack_from(">qiq", data, p) for p in range(0, len(data), 20)]
    return [u for u in units if u[1] > 0]


def flip_byte(path: Path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0xFF
    path.write_bytes(bytes(data))


async def put_many(store: Any, n: int, queues: int = 1, size: int = 200, start: int = 0) -> list[Any]:
    out = []
    for i in range(start, start + n):
        r = await store.put_message(rec(i, i % queues, size))
        assert r.ok, r
        out.append(r)
    await store.wait_dispatched()
    return out


# ---------------------------------------------------------------------------------------------- layout


@pytest.mark.anyio
async def test_layout_records_and_rolling(tmp_path: Path, store_factory: Callable[..., Any]) -> None:
    async with store_factory(tmp_path) as store:
        assert (tmp_path / "abort").exists() and (tmp_path / "lock").read_bytes() == b"lock"
        results = await put_many(store, 1000, queues=2, size=300)
        assert len(segments(tmp_path)) >= 5
    assert not (tmp_path / "abort").exists()
    assert (tmp_path / "checkpoint").stat().st_size == 4096
    physic, logics, _index = struct.unpack(">qqq", (tmp_path / "checkpoint").read_bytes()[:24])
    assert physic >= results[-1].store_timestamp - 1 and logics == results[-1].store_timestamp

    by_offset = {r.wrote_offset: (i, r) for i, r in enumerate(results)}
    seen = 0
    for path in segments(tmp_path):
        assert re.fullmatch(r"\d{20}", path.name) and int(path.name) % SEG == 0
        assert path.stat().st_size == SEG
        records, end, blank = walk_segment(path.read_bytes())
        for r in records:
            i, res = by_offset[r["phys_offset"]]
            assert r["phys_offset"] - int(path.name) < SEG - 7
            assert (r["queue_id"], r["queue_offset"], r["store_ts"]) == (i % 2, i // 2, res.store_timestamp)
            assert r["body"] == bytes([i % 251]) * 300 and r["properties"]["KEYS"] == f"key{i}"
            seen += 1
        if blank is not None:  # end-of-file rule: [remaining, MAGIC_BLANK], and only when the next didn't fit
            assert blank == SEG - end and blank < results[0].wrote_bytes + 8
    assert seen == 1000
    # a client decodes the same bytes
    async with store_factory(tmp_path) as store:
        raw = store.look_message_by_offset(results[777].wrote_offset)
        m = decode_message(raw)
        assert (m.topic, m.queue_offset, m.tags, m.keys) == ("T", 388, "t1", "key777")


@pytest.mark.anyio
async def test_consume_queue_files(tmp_path: Path, store_factory: Callable[..., Any]) -> None:
    async with store_factory(tmp_path) as store:
        results = await put_many(store, 250, queues=1, size=50)
        # a pull stops at the end of a consume-queue file
        got = store.get_messages("g", "T", 0, 95, 32)
        assert got.queue_offsets == [95, 96, 97, 98, 99] and got.next_begin_offset == 100
    qdir = tmp_path / "consumequeue" / "T" / "0"
    names = sorted(p.name for p in qdir.iterdir())
    assert names == [f"{0:020d}", f"{2000:020d}", f"{4000:020d}"]
    units = [u for n in names for u in cq_units(qdir / n)]
    assert [(u[0], u[1]) for u in units] == [(r.wrote_offset, r.wrote_bytes) for r in results]
    assert [u[2] for u in units[:4]] == [java_hash("t0"), java_hash("t1"), java_hash("t0"), java_hash("t1")]
    assert all((qdir / n).stat().st_size == CQ_UNITS * 20 for n in names)


@pytest.mark.anyio
async def test_batch_moves_whole_to_next_segment(tmp_path: Path, store_factory: Callable[..., Any]) -> None:
    async with store_factory(tmp_path, maxMessageSize=SEG) as store:
        first = await store.put_message(rec(0, size=SEG - 5000))
        assert first.ok
        batch = [rec(i, size=400) for i in range(1, 20)]  # ~12 KiB: does not fit the ~5 KiB left
        r = await store.put_messages(batch)
        assert r.ok and r.wrote_offset == SEG and r.physical_offsets[-1] < 2 * SEG
        await store.wait_dispatched()
        assert store.get_max_offset("T", 0) == 20
        assert [
            decode_record(m)["phys_offset"] for m in store.get_messages("g", "T", 0, 1, 32).messages
        ] == list(r.physical_offsets)
    data = segments(tmp_path)[0].read_bytes()
    records, end, blank = walk_segment(data)
    assert len(records) == 1 and end == first.wrote_bytes and blank == SEG - end
    too_big = [rec(i, size=6000) for i in range(12)]
    async with store_factory(tmp_path, maxMessageSize=SEG) as store:
        assert (await store.put_messages(too_big)).status == PutStatus.MESSAGE_ILLEGAL


@pytest.mark.anyio
async def test_next_segment_is_preallocated(tmp_path: Path, store_factory: Callable[..., Any]) -> None:
    async with store_factory(tmp_path) as store:
        await put_many(store, 400, size=300)  # ~2.5 segments
        nxt = tmp_path / "commitlog" / f"{(store.max_phy_offset // SEG + 1) * SEG:020d}"
        for _ in range(200):  # the background thread creates the segment after the current one
            if nxt.exists():
                break
            await anyio.sleep(0.01)
        assert nxt.stat().st_size == SEG
    async with store_factory(tmp_path) as store:  # an unused pre-created segment is kept for the roll
        assert store.get_max_offset("T", 0) == 400
        assert nxt.exists()
        await put_many(store, 400, size=300, start=400)  # rolls into it and beyond
        assert store.get_max_offset("T", 0) == 800
    flags = []
    walked = [walk_segment(p.read_bytes()) for p in segments(tmp_path)]
    assert [int(p.name) for p in segments(tmp_path)] == [n * SEG for n in range(len(walked))]
    used = [w for w in walked if w[0]]
    assert all(blank == SEG - end for _r, end, blank in used[:-1])  # every full segment ends in a blank
    assert all(not r for r, _e, _b in walked[len(used) :])  # then at most an empty pre-created one
    for records, _end, _blank in used:
        flags += [r["flag"] for r in records]
    assert flags == list(range(800))


# ---------------------------------------------------------------------------------------------- index


@pytest.mark.anyio
async def test_index_files_roll_and_queries_span_them(
    tmp_path: Path, store_factory: Callable[..., Any]
) -> None:
    async with store_factory(tmp_path) as store:
        results = await put_many(store, 300, size=20)  # 2 keys per message, 255 entries per file
        files = sorted((tmp_path / "index").iterdir())
        assert len(files) >= 3 and all(re.fullmatch(r"\d{17}", f.name) for f in files)
        assert all(f.stat().st_size == 40 + 64 * 4 + 256 * 20 for f in files)
        for i in (0, 150, 299):
            hits = store.query_by_key("T", f"key{i}", 5, 0, 2**62)
            assert [decode_record(h)["phys_offset"] for h in hits] == [results[i].wrote_offset]
            assert len(store.query_by_key("T", f"UQ{i:08d}", 5, 0, 2**62)) == 1
    # header of the first (full) file, by the reference layout
    head = files[0].read_bytes()[:40]
    begin_ts, end_ts, begin_phy, end_phy, _slots, count = struct.unpack(">qqqqii", head)
    assert count == 256 and begin_phy == 0 and begin_ts == results[0].store_timestamp
    cp_index = struct.unpack(">q", (tmp_path / "checkpoint").read_bytes()[16:24])[0]
    assert cp_index >= end_ts > 0


# ---------------------------------------------------------------------------------------------- recovery


@pytest.mark.anyio
async def test_restart_across_many_segments(tmp_path: Path, store_factory: Callable[..., Any]) -> None:
    async with store_factory(tmp_path) as store:
        results = await put_many(store, 2000, queues=3, size=150)
    async with store_factory(tmp_path) as store:
        assert not store.stats()["recovery"]["abnormal"]
        assert [store.get_max_offset("T", q) for q in range(3)] == [667, 667, 666]
        got = store.get_messages("g", "T", 2, 600, 32)
        assert [decode_record(m)["phys_offset"] for m in got.messages] == [
            r.wrote_offset for r in results[2::3][600:632]
        ]
        r = await store.put_message(rec(5000, 1))
        assert r.queue_offset == 667 and r.wrote_offset == results[-1].wrote_offset + results[-1].wrote_bytes


def _crash_copy(tmp_path: Path) -> None:
    """What a SIGKILL leaves: the files as they are, plus the abort marker."""
    (tmp_path / "abort").touch()


@pytest.mark.anyio
async def test_abnormal_recovery_cuts_torn_tail(
    tmp_path: Path, store_factory: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    async with store_factory(tmp_path) as store:
        results = await put_many(store, 500, size=100)
    last = results[-1]
    seg = tmp_path / "commitlog" / f"{last.wrote_offset // SEG * SEG:020d}"
    end_pos = last.wrote_offset % SEG + last.wrote_bytes
    raw = bytearray(seg.read_bytes())
    torn = bytes(raw[last.wrote_offset % SEG : end_pos])
    raw[end_pos : end_pos + 60] = torn[:60]  # a record header and half a body: killed mid-copy
    seg.write_bytes(bytes(raw))
    _crash_copy(tmp_path)
    caplog.set_level(logging.INFO, logger="rmq.store")
    async with store_factory(tmp_path) as store:
        st = store.stats()
        assert st["recovery"]["abnormal"] and st["max_phy_offset"] == last.wrote_offset + last.wrote_bytes
        assert store.get_max_offset("T", 0) == 500
        cuts = [r for r in caplog.records if "recovery cut" in r.getMessage()]
        assert len(cuts) == 1 and "60 bytes" in cuts[0].getMessage() and seg.name in cuts[0].getMessage()
        r = await store.put_message(rec(500))
        assert r.queue_offset == 500 and r.wrote_offset == end_pos + int(seg.name)
        await store.wait_dispatched()
        assert decode_record(store.get_messages("g", "T", 0, 500, 1).messages[0])["flag"] == 500


@pytest.mark.anyio
@pytest.mark.parametrize("crash", [False, True])
async def test_corrupt_middle_record_costs_only_itself(
    tmp_path: Path, store_factory: Callable[..., Any], caplog: pytest.LogCaptureFixture, crash: bool
) -> None:
    """RocketMQ cuts the commitlog at a bad record mid-segment; we skip that record and keep the rest."""
    async with store_factory(tmp_path) as store:
        results = await put_many(store, 1200, queues=2, size=200)
        end = store.max_phy_offset
    assert len(segments(tmp_path)) >= 4
    victim = next(r for r in results if SEG + 20_000 < r.wrote_offset)  # mid second segment
    k = results.index(victim)
    seg = tmp_path / "commitlog" / f"{SEG:020d}"
    flip_byte(seg, victim.wrote_offset - SEG + 100)  # a body byte: the body CRC no longer matches
    if crash:
        _crash_copy(tmp_path)
        (tmp_path / "checkpoint").write_bytes(bytes(4096))  # no checkpoint: replay everything
    caplog.set_level(logging.INFO, logger="rmq.store")
    for attempt in range(2):  # the damage stays on disk: every start reports it the same way, nothing more
        caplog.clear()
        async with store_factory(tmp_path) as store:
            holes = [r.getMessage() for r in caplog.records if "corrupt data at offset" in r.getMessage()]
            assert len(holes) == 1, [r.getMessage() for r in caplog.records]
            assert seg.name in holes[0] and str(victim.wrote_offset) in holes[0]
            assert f"skipped {victim.wrote_bytes} bytes" in holes[0]
            assert not [r for r in caplog.records if "recovery cut" in r.getMessage()]
            assert store.max_phy_offset >= end and len(segments(tmp_path)) >= 4
            q = k % 2
            assert store.get_max_offset("T", q) == 600  # offsets are the records' own: no reuse
            got = store.get_messages("g", "T", q, 0, 1000, max_bytes=1 << 30)
            want = [i // 2 for i in range(q, 1200, 2) if i != k]
            flags = [decode_record(m)["flag"] for m in got.messages]
            while got.next_begin_offset < 600:  # a pull stops at a hole's filler unit; the next one goes on
                got = store.get_messages("g", "T", q, got.next_begin_offset, 1000, max_bytes=1 << 30)
                flags += [decode_record(m)["flag"] for m in got.messages]
            assert flags == [i for i in range(q, 1200, 2) if i != k] and len(flags) == len(want)
            assert store.look_message_by_offset(victim.wrote_offset) is None
            assert store.query_by_key("T", f"key{k}", 5, 0, 2**62) == []
            assert len(store.query_by_key("T", f"key{k + 2}", 5, 0, 2**62)) == 1
            assert store.stats()["corrupt_ranges"] == 1
        if attempt == 1:
            async with store_factory(tmp_path) as store:
                r = await store.put_message(rec(5000, q))
                assert r.ok and r.queue_offset == 600
                await store.wait_dispatched()
                assert decode_record(store.get_messages("g", "T", q, 600, 1).messages[0])["flag"] == 5000


@pytest.mark.anyio
async def test_consume_queue_ahead_of_commitlog_is_truncated(
    tmp_path: Path, store_factory: Callable[..., Any]
) -> None:
    async with store_factory(tmp_path) as store:
        results = await put_many(store, 300, size=100)
    # lose the last segment's tail (as if never written) but keep the consume queue
    cut_at = results[250]
    seg = tmp_path / "commitlog" / f"{cut_at.wrote_offset // SEG * SEG:020d}"
    raw = bytearray(seg.read_bytes())
    pos = cut_at.wrote_offset % SEG
    raw[pos:] = bytes(len(raw) - pos)
    seg.write_bytes(bytes(raw))
    for later in segments(tmp_path):
        if int(later.name) > int(seg.name):
            later.write_bytes(bytes(SEG))
    _crash_copy(tmp_path)
    async with store_factory(tmp_path) as store:
        assert store.get_max_offset("T", 0) == 250
        assert store.max_phy_offset == cut_at.wrote_offset
        assert (await store.put_message(rec(999))).queue_offset == 250


@pytest.mark.anyio
async def test_replay_rebuilds_lost_consume_queue_and_index(
    tmp_path: Path, store_factory: Callable[..., Any]
) -> None:
    async with store_factory(tmp_path) as store:
        results = await put_many(store, 300, queues=2, size=100)
    import shutil

    shutil.rmtree(tmp_path / "consumequeue")
    shutil.rmtree(tmp_path / "index")
    (tmp_path / "checkpoint").write_bytes(bytes(4096))
    _crash_copy(tmp_path)
    rec_d = RecordingDispatcher()
    async with store_factory(tmp_path, DispatcherPlugin(rec_d)) as store:  # aenter returns only once dispatch caught up
        assert [store.get_max_offset("T", q) for q in (0, 1)] == [150, 150]
        assert len(store.query_by_key("T", "key123", 5, 0, 2**62)) == 1
        assert [r.commit_log_offset for r in rec_d.requests] == [r.wrote_offset for r in results]
        assert rec_d.batches < 300


@pytest.mark.anyio
async def test_wrong_sized_segment_is_named_and_resized(
    tmp_path: Path, store_factory: Callable[..., Any]
) -> None:
    async with store_factory(tmp_path) as store:
        await put_many(store, 10)
    bad = segments(tmp_path)[0]
    os.truncate(bad, SEG - 1)
    with pytest.raises(StoreError, match=re.escape(bad.name) + ".*expected 65536"):
        from rmq.plugins.storage_mmap.mapped_file import MappedFile

        MappedFile.open(bad, SEG)
    async with store_factory(tmp_path) as store:  # the store resizes it (the lost byte reads as zero)
        assert store.get_max_offset("T", 0) == 10 and bad.stat().st_size == SEG


@pytest.mark.anyio
async def test_a_store_of_another_segment_size_is_refused_untouched(
    tmp_path: Path, store_factory: Callable[..., Any]
) -> None:
    """A store moved from a broker with another mappedFileSizeCommitLog (RocketMQ's default 1 GiB beside
    rmqd's embedded 64 MiB) is refused with the key named, as RocketMQ refuses it, and none of its files
    is cut or padded: the setting fixed, it opens with every message."""
    async with store_factory(tmp_path) as store:
        await put_many(store, 700, size=200)  # > 2 segments
    before = {p.name: p.read_bytes() for p in segments(tmp_path)}
    assert len(before) >= 3
    for size in (SEG // 2, SEG * 2):  # segments longer than the setting; names off its multiples
        with pytest.raises(StoreError, match="mappedFileSizeCommitLog"):
            async with store_factory(tmp_path, mappedFileSizeCommitLog=size):
                pass
        assert {p.name: p.read_bytes() for p in segments(tmp_path)} == before
    async with store_factory(tmp_path) as store:
        assert store.get_max_offset("T", 0) == 700


@pytest.mark.anyio
async def test_second_store_on_same_directory_is_refused(
    tmp_path: Path, store_factory: Callable[..., Any]
) -> None:
    async with store_factory(tmp_path):
        with pytest.raises(StoreError, match="locked"):
            async with store_factory(tmp_path):
                pass


# ---------------------------------------------------------------------------------------------- retention


@pytest.mark.anyio
async def test_retention_deletes_behind_and_keeps_last(
    tmp_path: Path, store_factory: Callable[..., Any]
) -> None:
    async with store_factory(tmp_path, fileReservedTime=0, deleteWhen="99") as store:
        results = await put_many(store, 1500, queues=2, size=200)
        n = len(store.commitlog.files)
        assert n >= 5
        assert await store.clean_expired_files() == 0  # not the hour, disk not full
        deleted = await store.clean_expired_files(force=True)
        assert deleted == n - 1 and len(store.commitlog.files) == 1
        st = store.stats()
        assert st["deleted_files"]["consumequeue"] > 0 and st["deleted_files"]["index"] > 0
        cl_min = store.min_phy_offset
        mn = store.get_min_offset("T", 0)
        assert mn > 0
        first_kept = next(i for i, r in enumerate(results) if r.wrote_offset >= cl_min and i % 2 == 0)
        assert mn == first_kept // 2
        got = store.get_messages("g", "T", 0, 0, 32)
        assert got.status == GetStatus.OFFSET_TOO_SMALL and got.next_begin_offset == mn
        ok = store.get_messages("g", "T", 0, mn, 1)
        assert ok.status == GetStatus.FOUND and decode_record(ok.messages[0])["phys_offset"] >= cl_min
        assert store.look_message_by_offset(results[0].wrote_offset) is None
        assert store.query_by_key("T", "key0", 5, 0, 2**62) == []
        assert await store.clean_expired_files(force=True) == 0  # never the last file
    async with store_factory(tmp_path) as store:  # restart after retention
        assert store.get_min_offset("T", 0) == mn and store.get_max_offset("T", 0) == 750


@pytest.mark.anyio
async def test_disk_ratio_guards(tmp_path: Path, store_factory: Callable[..., Any]) -> None:
    async with store_factory(tmp_path, fileReservedTime=72, deleteWhen="99") as store:
        await put_many(store, 800, size=200)
        n = len(store.commitlog.files)
        real = store._default_disk_probe()  # what runs when no probe is injected: used / (used + usable)
        st = os.statvfs(tmp_path)
        used = st.f_blocks - st.f_bfree
        assert 0.0 < real < 1.0 and abs(real - used / (used + st.f_bavail)) < 0.01
        ratio = [0.80]
        store.disk_usage_probe = lambda: ratio[0]
        assert await store.clean_expired_files() == 0  # > 75%: pass runs, but files are not expired
        ratio[0] = 0.87  # > 85%: clean immediately, ignoring age (at most 10 per pass)
        assert await store.clean_expired_files() == min(10, n - 1)
        ratio[0] = 0.93  # >= 90%: refuse writes
        store.check_disk()
        r = await store.put_message(rec(1))
        assert r.status == PutStatus.SERVICE_NOT_AVAILABLE and "disk full" in r.remark and "93.0%" in r.remark
        assert store.stats()["writable"] is False
        ratio[0] = 0.40
        store.check_disk()
        assert (await store.put_message(rec(2))).ok


# ---------------------------------------------------------------------------------------------- plumbing


@pytest.mark.anyio
async def test_reput_hands_batches_not_single_records(
    tmp_path: Path, store_factory: Callable[..., Any]
) -> None:
    rd = RecordingDispatcher()
    async with store_factory(tmp_path, DispatcherPlugin(rd)) as store:
        for i in range(500):  # no await yields here: dispatch runs after, in batches
            await store.put_message(rec(i, size=10))
        await store.wait_dispatched()
        assert len(rd.requests) == 500 and rd.batches <= 3
        assert store.dispatchers[0] in store.builtin_dispatchers and store.dispatchers[-1] is rd


@pytest.mark.anyio
async def test_builtin_dispatchers_run_with_nothing_attached(tmp_path: Path) -> None:
    """Standalone (no kernel hooks called, nothing attached): queues, index and flushing still work."""
    from rmq.roles import BrokerConfig

    store = MmapMessageStore(BrokerConfig(storePathRootDir=str(tmp_path), flushDiskType="SYNC_FLUSH"))
    store.disk_usage_probe = lambda: 0.1
    async with store:
        assert store.dispatchers == store.builtin_dispatchers and store.policy.synchronous
        r = await store.put_message(rec(1, properties="KEYS\x01solo"))
        assert r.status == PutStatus.PUT_OK and store.flushed_offset >= r.wrote_offset + r.wrote_bytes
        assert store.durable.value >= r.wrote_offset + r.wrote_bytes
        await store.wait_dispatched()
        assert store.get_max_offset("T", 0) == 1 and len(store.query_by_key("T", "solo", 5, 0, 2**62)) == 1


@pytest.mark.anyio
async def test_store_host_from_config(tmp_path: Path, store_factory: Callable[..., Any]) -> None:
    async with store_factory(tmp_path, brokerIP1="192.168.7.9", listenPort=10915) as store:
        assert store.store_host == bytes([192, 168, 7, 9]) + (10915).to_bytes(4, "big")
        await put_many(store, 1)
        assert (
            decode_record(store.get_messages("g", "T", 0, 0, 1).messages[0])["store_host"] == store.store_host
        )
        with pytest.raises(ValueError):
            store.attach(store_host=b"123")
    async with store_factory(tmp_path / "b") as store:
        assert store.store_host == b"\x7f\x00\x00\x01" + (10911).to_bytes(4, "big")


@pytest.mark.anyio
async def test_offset_by_time_across_consume_queue_files(
    tmp_path: Path, store_factory: Callable[..., Any]
) -> None:
    async with store_factory(tmp_path) as store:
        for i in range(350):
            assert (await store.put_message(rec(i, size=10, store_timestamp=10_000 + 10 * i))).ok
        await store.wait_dispatched()
        for i in (0, 99, 100, 101, 250, 349):
            assert store.get_offset_by_time("T", 0, 10_000 + 10 * i) == i
            assert store.get_offset_by_time("T", 0, 10_000 + 10 * i + 3) == i
        assert store.get_offset_by_time("T", 0, 10**12) == 349
        assert store.get_offset_by_time("T", 7, 10_000) == 0


def test_options_validation() -> None:
    with pytest.raises(ValueError, match="unknown option.*bogus"):
        MmapStoragePlugin({"bogus": 1})
    with pytest.raises(ValueError, match="expected bool"):
        MmapStoragePlugin({"preallocate": "yes"})
    assert MmapStoragePlugin({"dispatch_batch": 64}).options.dispatch_batch == 64


def test_java_hash_fast_matches_java_hash() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from rmq.plugins.storage_mmap.codec import java_hash_fast

    @settings(max_examples=400, deadline=None)
    @given(st.text(max_size=80) | st.text(alphabet=st.characters(max_codepoint=255), max_size=200))
    def check(s: str) -> None:
        assert java_hash_fast(s) == java_hash(s)

    check()
    assert java_hash_fast("x" * 5000) == java_hash("x" * 5000)


@pytest.mark.anyio
async def test_live_dispatch_equals_replayed_dispatch(
    tmp_path: Path, store_factory: Callable[..., Any]
) -> None:
    """Live puts are dispatched from the put hand-off, a replay parses the bytes: same requests."""
    live, replay = RecordingDispatcher(), RecordingDispatcher()
    born6 = bytes(range(16)) + (7).to_bytes(4, "big")
    async with store_factory(tmp_path, DispatcherPlugin(live)) as store:
        for i in range(400):
            kind = i % 7
            if kind == 0:
                assert (await store.put_messages([rec(i + j, 1, size=300) for j in range(5)])).ok
            elif kind == 1:
                assert (await store.put_message(rec(i, 2, sys_flag=0x4))).ok
            elif kind == 2:
                assert (
                    await store.put_message(rec(i, 0, topic="SCHEDULE_TOPIC_XXXX", properties="DELAY\x012"))
                ).ok
            elif kind == 3:
                assert (await store.put_message(rec(i, 3, born_host=born6, properties=""))).ok
            else:
                assert (await store.put_message(rec(i, i % 4, size=50 + 37 * (i % 11)))).ok
        await store.wait_dispatched()
        st = store.stats()
        assert st["dispatched_from_handoff"] == len(live.requests) and st["dispatched_from_parse"] == 0
    import shutil

    shutil.rmtree(tmp_path / "consumequeue")
    (tmp_path / "checkpoint").write_bytes(bytes(4096))
    _crash_copy(tmp_path)
    async with store_factory(tmp_path, DispatcherPlugin(replay)) as store:
        assert store.stats()["dispatched_from_parse"] == len(replay.requests)
    assert len(live.requests) > 600 and replay.requests == live.requests


@pytest.mark.anyio
async def test_consume_queue_flush_least_pages_and_thorough_interval(
    tmp_path: Path, store_factory: Callable[..., Any]
) -> None:
    """flushConsumeQueueLeastPages holds back a queue with fewer dirty pages; the thorough interval
    flushes it anyway, and only a thorough round moves the checkpoint's logics time."""
    async with store_factory(tmp_path / "a", flushConsumeQueueLeastPages=1000,
                             flushConsumeQueueThoroughInterval=3_600_000) as store:
        for i in range(5):
            assert (await store.put_message(rec(i))).status is PutStatus.PUT_OK
        await store.wait_dispatched()
        await anyio.sleep(0.3)  # several flush rounds (flushIntervalConsumeQueue 50 ms)
        cq = next(iter(store.cqs))
        assert cq.files[0].flushed == 0 and store.checkpoint is not None and store.checkpoint.logics_ts == 0
    async with store_factory(tmp_path / "b", flushConsumeQueueLeastPages=1000,
                             flushConsumeQueueThoroughInterval=100) as store:
        for i in range(5):
            await store.put_message(rec(i))
        await store.wait_dispatched()
        await anyio.sleep(0.4)
        cq = next(iter(store.cqs))
        assert cq.files[0].flushed == 5 * 20 and store.checkpoint is not None and store.checkpoint.logics_ts > 0


@pytest.mark.anyio
async def test_handed_off_records_are_not_tracked_by_the_cyclic_gc(tmp_path: Path, store_factory: Any) -> None:
    """Up to ``backlog_bytes`` of records can wait for the reput (100k+ small ones under batch load):
    a hand-off entry the cyclic GC kept tracking would make every full collection walk them all
    (measured: loop stalls growing to ~50 ms per collection). Plain tuples of ints and strs are
    untracked by the first young collection."""
    import gc

    async with store_factory(tmp_path) as store:
        assert (await store.put_message(rec(1, 0))).ok  # the reput has not run yet: no await since
        assert (await store.put_messages([rec(2, 1), rec(3, 1)])).ok
        pending = list(store.reput.handoff)
        assert len(pending) == 3
        gc.collect(0)
        assert not any(gc.is_tracked(h) for h in pending)
        await store.wait_dispatched()
        assert store.get_max_offset("T", 1) == 2


@pytest.mark.anyio
async def test_key_query_answers_oldest_first(tmp_path: Path, store_factory: Callable[..., Any]) -> None:
    """Messages sharing a key come back in commitlog order, as RocketMQ's store sorts the offsets its
    index found (newest first) before reading them: mqadmin queryMsgByKey lists them that way."""
    async with store_factory(tmp_path) as store:
        wrote = [(await store.put_message(rec(i, properties="KEYS\x01shared"))).wrote_offset for i in range(3)]
        await store.wait_dispatched()
        hits = store.query_by_key("T", "shared", 5, 0, 2**62)
        assert [decode_record(h)["phys_offset"] for h in hits] == sorted(wrote)
