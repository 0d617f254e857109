"""Corruption of each store file kind: truncate, zero, flip bytes at seeded random places, restart.

Every round copies one pristine store, damages it, starts a store on it (normally or
as after a crash) and checks what a consumer would see, pulling each queue from its
minimum to its maximum:

* start-up succeeds;
* every served record passes the reference decoder (magic, lengths, body CRC): bytes
  that fail verification are never served;
* every message whose bytes the damage did not touch is served exactly once, byte for
  byte; a damaged one at most once; queue offsets are never served twice;
* a new put gets the next queue offset and reads back.

Records are decoded here from the reference layout (``decode_record``), never by the
store's code.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.kernel.model import MessageRecord
from rmq.testing.storage import decode_record

SEG = 64 * 1024
QUEUES = 3
N = 480
ROUNDS = 8


@dataclass
class Original:
    key: str
    queue: int
    phys: int
    raw: bytes


@dataclass
class Template:
    root: Path
    by_phys: dict[int, Original]
    ends: dict[str, int]  # commitlog segment name -> where its data ends


def message(i: int, q: int, rnd: random.Random) -> MessageRecord:
    body = rnd.randbytes(rnd.choice((20, 200, 700, 1500)))
    props = f"TAGS\x01t{i % 4}\x02KEYS\x01k{i} all\x02UNIQ_KEY\x01U{i:06d}"
    return MessageRecord("T", q, body, flag=i, born_timestamp=1_700_000_000_000 + i, properties=props)


async def _fill(root: Path, opener: Callable[..., Any]) -> list[tuple[str, int, int, int]]:
    rnd = random.Random(20240611)
    out = []
    async with opener(root) as store:
        i = 0
        while i < N:
            q = rnd.randrange(QUEUES)
            if rnd.random() < 0.2:
                batch = [message(i + j, q, rnd) for j in range(rnd.randint(2, 5))]
                r = await store.put_messages(batch)
                assert r.ok, r
                for j, phys in enumerate(r.physical_offsets):
                    out.append((f"U{i + j:06d}", q, phys, -1))
                i += len(batch)
            else:
                r = await store.put_message(message(i, q, rnd))
                assert r.ok, r
                out.append((f"U{i:06d}", q, r.wrote_offset, r.wrote_bytes))
                i += 1
        await store.wait_dispatched()
    return out


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, store_opener: Callable[..., Any]) -> Template:
    root = tmp_path_factory.mktemp("pristine")
    placed = anyio.run(_fill, root, store_opener)
    data = {p.name: p.read_bytes() for p in sorted((root / "commitlog").iterdir())}
    by_phys: dict[int, Original] = {}
    for key, q, phys, _size in placed:
        seg = data[f"{phys // SEG * SEG:020d}"]
        (size,) = struct.unpack_from(">i", seg, phys % SEG)
        raw = seg[phys % SEG : phys % SEG + size]
        assert decode_record(raw)["properties"]["UNIQ_KEY"] == key
        by_phys[phys] = Original(key, q, phys, raw)
    ends = {}
    for name in data:
        ends[name] = max(
            (o.phys % SEG + len(o.raw) for o in by_phys.values() if o.phys // SEG * SEG == int(name)),
            default=0,
        )
    assert len(by_phys) == len(placed) >= N
    return Template(root, by_phys, ends)


def served(store: Any) -> list[tuple[int, int, bytes]]:
    """(queue, queue offset, record) for everything a consumer pulls from every queue of T."""
    out = []
    for q in range(QUEUES):
        off = store.get_min_offset("T", q)
        mx = store.get_max_offset("T", q)
        pulls = 0
        while off < mx:
            r = store.get_messages("g", "T", q, off, 64, max_bytes=1 << 30)
            assert r.next_begin_offset > off, (q, off, r.status)
            out.extend(zip([q] * len(r.messages), r.queue_offsets, r.messages, strict=True))
            off = r.next_begin_offset
            pulls += 1
            assert pulls < 10_000
    return out


def check(store: Any, tpl: Template, damaged: set[int]) -> None:
    got = served(store)
    seen = Counter()
    offsets = Counter((q, o) for q, o, _ in got)
    assert max(offsets.values(), default=1) == 1, "a queue offset was served twice"
    for _q, _o, raw in got:
        rec = decode_record(raw)  # magic, lengths, CRC: never bytes that failed verification
        orig = tpl.by_phys.get(rec["phys_offset"])
        assert orig is not None, f"served a record at {rec['phys_offset']} that was never written there"
        if orig.phys not in damaged:
            assert bytes(raw) == orig.raw, f"{orig.key} served with different bytes"
        seen[orig.phys] += 1
    assert max(seen.values(), default=1) == 1, "a message was served twice"
    missing = [o.key for o in tpl.by_phys.values() if o.phys not in damaged and seen[o.phys] != 1]
    assert not missing, f"{len(missing)} undamaged messages not served, e.g. {missing[:5]}"


async def _verify_round(
    root: Path, opener: Callable[..., Any], tpl: Template, damaged: set[int], keys: bool = False
) -> None:
    async with opener(root) as store:
        check(store, tpl, damaged)
        if keys:
            for o in list(tpl.by_phys.values())[::7]:
                hits = store.query_by_key("T", o.key, 4, 0, 2**62)
                assert [bytes(h) for h in hits] == [o.raw], o.key
        for q in range(QUEUES):
            mx = store.get_max_offset("T", q)
            r = await store.put_message(MessageRecord("T", q, b"after", properties=f"UNIQ_KEY\x01new{q}"))
            assert r.ok and r.queue_offset == mx, (q, mx, r)
        await store.wait_dispatched()
        for q in range(QUEUES):
            r = store.get_messages("g", "T", q, store.get_max_offset("T", q) - 1, 1)
            assert decode_record(r.messages[0])["body"] == b"after"


def _copy(tpl: Template, dest: Path, crash: bool) -> Path:
    shutil.copytree(tpl.root, dest)
    if crash:
        (dest / "abort").touch()
    return dest


def _rounds(
    tmp_path: Path, tpl: Template, seed: str, crash: bool | None, rounds: int = ROUNDS
) -> Iterator[tuple[random.Random, Path]]:
    """Each round's seeded randomness and a fresh copy of the template store, left by a crash
    (``crash``; None: at random) or a clean stop; the copy is removed once the round passed."""
    for n in range(rounds):
        rnd = random.Random(f"{seed}-{n}")
        root = _copy(tpl, tmp_path / f"r{n}", rnd.random() < 0.5 if crash is None else crash)
        yield rnd, root
        shutil.rmtree(root)


def _records_hit(tpl: Template, ranges: list[tuple[int, int]]) -> set[int]:
    """The commitlog offsets of the template's records that overlap a damaged byte range."""
    return {o.phys for o in tpl.by_phys.values() if any(a < o.phys + len(o.raw) and o.phys < b for a, b in ranges)}


def _damage_file(path: Path, op: str, rnd: random.Random, upto: int | None = None) -> list[tuple[int, int]]:
    """Damage ``path`` in place; returns the byte ranges touched (within the file)."""
    data = bytearray(path.read_bytes())
    limit = upto if upto is not None else len(data)
    if limit <= 0:
        return []
    if op == "flip":
        ranges = []
        for _ in range(rnd.randint(1, 4)):
            p = rnd.randrange(limit)
            data[p] ^= rnd.randrange(1, 256)
            ranges.append((p, p + 1))
        path.write_bytes(bytes(data))
        return ranges
    if op == "zero":
        a = rnd.randrange(limit)
        b = min(len(data), a + rnd.randint(1, 3000))
        data[a:b] = bytes(b - a)
        path.write_bytes(bytes(data))
        return [(a, b)]
    if op == "truncate":
        a = rnd.randrange(limit)
        os.truncate(path, a)
        return [(a, len(data))]
    raise AssertionError(op)


# ---------------------------------------------------------------------------------------------- commitlog


@pytest.mark.parametrize("op", ["flip", "zero", "truncate"])
@pytest.mark.parametrize("crash", [False, True], ids=["normal", "crash"])
def test_commitlog_damage_costs_only_the_damaged_records(
    tmp_path: Path, template: Template, store_opener: Callable[..., Any], op: str, crash: bool
) -> None:
    for rnd, root in _rounds(tmp_path, template, f"cl-{op}-{crash}", crash):
        segs = sorted((root / "commitlog").iterdir())
        damaged_ranges = []
        for seg in rnd.sample(segs, k=rnd.randint(1, 2)):
            base = int(seg.name)
            end = template.ends.get(seg.name, 0) or SEG
            for a, b in _damage_file(seg, op, rnd, upto=min(SEG, end + 64)):
                damaged_ranges.append((base + a, base + b))
        damaged = _records_hit(template, damaged_ranges)
        anyio.run(_verify_round, root, store_opener, template, damaged)


# ---------------------------------------------------------------------------------------------- consume queue


@pytest.mark.parametrize("op", ["flip", "zero", "truncate", "delete_file", "delete_queue"])
@pytest.mark.parametrize("crash", [False, True], ids=["normal", "crash"])
def test_consume_queue_damage_is_repaired_from_the_commitlog(
    tmp_path: Path, template: Template, store_opener: Callable[..., Any], op: str, crash: bool
) -> None:
    for rnd, root in _rounds(tmp_path, template, f"cq-{op}-{crash}", crash):
        q = rnd.randrange(QUEUES)
        qdir = root / "consumequeue" / "T" / str(q)
        files = sorted(qdir.iterdir())
        if op == "delete_queue":
            shutil.rmtree(qdir if rnd.random() < 0.7 else qdir.parent)
        elif op == "delete_file":
            rnd.choice(files).unlink()
        else:
            for f in rnd.sample(files, k=min(len(files), rnd.randint(1, 2))):
                _damage_file(f, op, rnd)
        anyio.run(_verify_round, root, store_opener, template, set())


# ---------------------------------------------------------------------------------------------- index


@pytest.mark.parametrize("op", ["flip", "zero", "truncate", "delete_file", "delete_dir"])
def test_index_damage_never_blocks_start_or_returns_a_wrong_record(
    tmp_path: Path, template: Template, store_opener: Callable[..., Any], op: str
) -> None:
    for rnd, root in _rounds(tmp_path, template, f"ix-{op}", None):
        files = sorted((root / "index").iterdir())
        if op == "delete_dir":
            shutil.rmtree(root / "index")
        elif op == "delete_file":
            rnd.choice(files).unlink()
        else:
            for f in rnd.sample(files, k=min(len(files), rnd.randint(1, 2))):
                _damage_file(f, op, rnd)
        # flipped entries or slots may make a lookup miss (each candidate is re-checked, so a
        # wrong record is never returned); a damaged header, a short or missing file is rebuilt
        anyio.run(_verify_round, root, store_opener, template, set(), op != "flip")
        if op == "flip":
            anyio.run(_no_wrong_lookups, root, store_opener, template)


async def _no_wrong_lookups(root: Path, opener: Callable[..., Any], tpl: Template) -> None:
    async with opener(root) as store:
        for o in tpl.by_phys.values():
            for h in store.query_by_key("T", o.key, 4, 0, 2**62):
                rec = decode_record(h)
                assert rec["properties"]["UNIQ_KEY"] == o.key and rec["topic"] == "T"
        assert len(store.query_by_key("T", "all", 64, 0, 2**62)) <= 64


# ---------------------------------------------------------------------------------------------- checkpoint


@pytest.mark.parametrize("op", ["flip", "zero", "truncate", "delete"])
def test_checkpoint_damage_costs_a_longer_replay_only(
    tmp_path: Path, template: Template, store_opener: Callable[..., Any], op: str
) -> None:
    for rnd, root in _rounds(tmp_path, template, f"cp-{op}", True, ROUNDS // 2):
        # as if the consume queues lost their last units in the crash: the replay must bring them back
        cp = root / "checkpoint"
        if op == "delete":
            cp.unlink()
        else:
            _damage_file(cp, op, rnd, upto=24)
        anyio.run(_verify_round, root, store_opener, template, set())


# ---------------------------------------------------------------------------------------------- all at once


def test_everything_damaged_at_once(
    tmp_path: Path, template: Template, store_opener: Callable[..., Any]
) -> None:
    for rnd, root in _rounds(tmp_path, template, "all", None):
        damaged_ranges = []
        seg = rnd.choice(sorted((root / "commitlog").iterdir()))
        for a, b in _damage_file(seg, "flip", rnd, upto=template.ends.get(seg.name) or SEG):
            damaged_ranges.append((int(seg.name) + a, int(seg.name) + b))
        for kind in ("consumequeue/T/0", "consumequeue/T/1", "index"):
            files = sorted((root / kind).iterdir())
            _damage_file(rnd.choice(files), rnd.choice(["flip", "zero", "truncate"]), rnd)
        _damage_file(root / "checkpoint", "flip", rnd, upto=24)
        damaged = _records_hit(template, damaged_ranges)
        anyio.run(_verify_round, root, store_opener, template, damaged)
        anyio.run(_verify_round_again, root, store_opener, template, damaged)


async def _verify_round_again(
    root: Path, opener: Callable[..., Any], tpl: Template, damaged: set[int]
) -> None:
    """A second start on the repaired store: same answers (plus the three messages put after)."""
    async with opener(root) as store:
        got = served(store)
        extra = [raw for _q, _o, raw in got if decode_record(raw)["body"] == b"after"]
        assert len(extra) == QUEUES
        rest = [(q, o, raw) for q, o, raw in got if decode_record(raw)["body"] != b"after"]
        keys = Counter(decode_record(raw)["phys_offset"] for _q, _o, raw in rest)
        assert max(keys.values()) == 1
        assert {o.phys for o in tpl.by_phys.values() if o.phys not in damaged} <= set(keys)
