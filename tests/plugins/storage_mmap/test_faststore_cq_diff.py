"""The compiled consume-queue writer (``_faststore.cq_put``) against the pure dispatcher loop.

Two consume-queue tables get the same dispatch batches and must agree on every batch's outcome (or
error) and on every byte of their files. The streams are what the reput hands the dispatcher: units in
queue order, and around them everything ``ConsumeQueue.put`` decides by its own rules -- a queue's first
unit mid-way, file roll (files of a few units), units past a file's reserved disk (a reservation chunk
of three units here), gaps that recovery's corrupt ranges explain (filled with blank units) and gaps
they do not (misplaced units), replays of already-written offsets (a recovery replay sends the whole
stream again), transaction records, new and invalid topics, parked queues, and hostile field values
(out of their Java ranges, of other types). The compiled writer's bounds are tested directly: it never
writes outside a file's mapping, its size or its reserved bytes. ``make fuzz`` runs the property with
the fuzz profile, ``make fuzz-asan`` against an AddressSanitizer/UBSan build.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.kernel.model import DispatchRequest
from rmq.plugins.storage_mmap import consume_queue
from rmq.plugins.storage_mmap.commitlog import Holes
from rmq.plugins.storage_mmap.consume_queue import UNIT_SIZE
from rmq.plugins.storage_mmap.queue_table import ConsumeQueueDispatcher, ConsumeQueueTable
from rmq.plugins.storage_mmap.scan import MIN_RECORD
from rmq.protocol import storepath
from rmq.testing.fuzz import compiler_present, fuzz_settings

FAST = storepath.compiled_store()
_HOSTILE = [-1, 2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**62, True, 1.0, None, "x"]
_FIELDS = ["topic", "queue_id", "commit_log_offset", "msg_size", "tags_code", "consume_queue_offset", "sys_flag"]


def _req(topic: Any, qid: Any, phys: Any, size: Any, tags: Any, ts: Any, qoff: Any, sys_flag: Any = 0) -> Any:
    return DispatchRequest(topic, qid, phys, size, tags, ts, qoff, sys_flag)


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[Any], list[tuple[int, int]]]:
    """(requests in commitlog order, the corrupt ranges recovery found between them)."""
    phys = draw(st.integers(0, 5000))
    nexts: dict[tuple[str, int], int] = {}
    out: list[Any] = []
    holes: list[tuple[int, int]] = []
    for _ in range(draw(st.integers(1, 80))):
        topic = draw(st.sampled_from(["TopicA", "TopicB", "TopicA", "bad topic"]))
        qid = draw(st.integers(0, 2))
        nxt = nexts.get((topic, qid), draw(st.sampled_from([0, 0, 3, 11])))  # a first unit may start mid-way
        kind = draw(st.sampled_from(["next"] * 8 + ["gap", "behind", "replay", "tx", "hostile"]))
        if kind == "replay" and out:
            out.append(draw(st.sampled_from(out)))
            continue
        size = draw(st.integers(MIN_RECORD, 400))
        qoff, sys_flag = nxt, 0
        if kind == "gap":
            k = draw(st.integers(1, 4))
            qoff = nxt + k
            if draw(st.booleans()):  # the skipped offsets belonged to corrupt records
                end = phys + k * MIN_RECORD + draw(st.integers(0, 50))
                holes.append((phys, end))
                phys = end
        elif kind == "behind":
            qoff = max(0, nxt - draw(st.integers(1, 3)))
        elif kind == "tx":
            sys_flag = draw(st.sampled_from([4, 8, 12, 5, 0xC | 0x100]))
        r = _req(topic, qid, phys, size, draw(st.integers(-(2**63), 2**63 - 1)), draw(st.sampled_from([0, 7, 1700])), qoff,
                 sys_flag)
        if kind == "hostile":
            setattr(r, draw(st.sampled_from(_FIELDS)), draw(st.sampled_from(_HOSTILE)))
        out.append(r)
        nexts[(topic, qid)] = qoff + 1
        phys += size
    return out, holes


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _state(table: ConsumeQueueTable) -> list[Any]:
    return [(cq.name, cq.max_phys, cq.min_logic, [(f.start, f.wrote, f.reserved, f.first_in_queue) for f in cq.files])
            for cq in table] + [table.logics_ts]


def _run(dispatcher: ConsumeQueueDispatcher, batch: list[Any]) -> str:
    try:
        dispatcher.dispatch(batch)
    except Exception as e:  # the pure loop's own error: both paths must raise it at the same request
        return repr(e)
    finally:
        dispatcher.table.trim()
    return "ok"


@fuzz_settings(150)
@given(streams(), st.integers(3, 9), st.lists(st.integers(1, 40), min_size=1, max_size=6), st.sampled_from([1, 2, 64]))
def test_compiled_and_pure_write_the_same_consume_queues(
    stream: tuple[list[Any], list[tuple[int, int]]], units: int, cuts: list[int], max_mapped: int
) -> None:
    """Same batches (cut at ``cuts``, then the whole stream again as a recovery replay) -> same outcomes,
    same bookkeeping, byte-identical consume-queue files."""
    reqs, holes = stream
    tmp = Path(tempfile.mkdtemp(prefix="cq-diff-"))
    chunk = consume_queue.RESERVE_CHUNK
    consume_queue.RESERVE_CHUNK = 3 * UNIT_SIZE  # so units cross reservation chunks in files this small
    tables = []
    try:
        pairs = []
        for name, fast in (("pure", None), ("fast", FAST)):
            table = ConsumeQueueTable(tmp / name, units * UNIT_SIZE, max_mapped=max_mapped)
            table.holes = Holes()
            for start, end in holes:
                table.holes.add(start, end)
            d = ConsumeQueueDispatcher(table)
            d.fast = fast
            pairs.append(d)
            tables.append(table)
        batches, at = [], 0
        for n in cuts:
            batches.append(reqs[at : at + n])
            at += n
        batches += [reqs[at:], list(reqs)]  # the rest, then a replay of everything
        for batch in batches:
            outcomes = [_run(d, list(batch)) for d in pairs]
            assert outcomes[0] == outcomes[1], batch
        assert _state(tables[1]) == _state(tables[0])
        assert _files(tmp / "fast") == _files(tmp / "pure")
    finally:
        consume_queue.RESERVE_CHUNK = chunk
        for table in tables:
            table.close()
        shutil.rmtree(tmp)


def test_compiled_writer_takes_the_common_run(tmp_path: Path) -> None:
    """Once the queues exist, a batch of units in queue order is written by one compiled call."""
    if FAST is None:
        assert not compiler_present(), "the compiled store was not built: run make install-test"
        return
    table = ConsumeQueueTable(tmp_path, 1000 * UNIT_SIZE)
    d = ConsumeQueueDispatcher(table)
    d.fast = FAST
    d.dispatch([_req("T", q, q * 100, 100, 0, 1, 0) for q in range(4)])  # creates the queues
    batch = [_req("T", k % 4, 400 + k * 100, 100, k, 9 + k, 1 + k // 4) for k in range(200)]
    assert FAST.cq_put(batch, 0, table.queues, 0) == (200, 9 + 199)
    for q in range(4):
        cq = table.get("T", q)
        assert cq is not None and cq.max_offset == 51 and cq.max_phys == 400 + (196 + q) * 100 + 100
        assert cq.unit(50) == (400 + (196 + q) * 100, 100, 196 + q)


class _File:
    """A stand-in segment whose fields say whatever a test wants (the writer trusts none of them)."""

    def __init__(self, mm: Any, start: int, wrote: Any, size: Any, reserved: Any) -> None:
        self.mm, self.start, self.wrote, self.size, self.reserved = mm, start, wrote, size, reserved


class _Queue:
    def __init__(self, f: _File) -> None:
        self.max_phys = 0
        self.files = [f]


@pytest.mark.parametrize(
    ("wrote", "size", "reserved", "mm"),
    [
        (90, 1000, 1000, bytearray(100)),  # the unit would end past the mapping
        (100, 1000, 1000, bytearray(100)),  # starts at the mapping's end
        (-20, 1000, 1000, bytearray(100)),  # before the mapping
        (40, 50, 1000, bytearray(100)),  # past the file's size
        (40, 1000, 50, bytearray(100)),  # past the reserved bytes
        (90, 2**63 - 1, 2**63 - 1, bytearray(100)),  # size and reserved huge: the mapping still bounds it
        (2**63 - 10, 2**63 - 1, 2**63 - 1, bytearray(100)),  # overflow of wrote + 20
        (40, 1000, 1000, bytes(100)),  # read-only
        (40, 1000, 1000, memoryview(bytearray(100))[:50]),  # a short view
        (40.0, 1000, 1000, bytearray(100)),  # not an int
    ],
)
def test_compiled_writer_stays_inside_the_mapping(wrote: Any, size: Any, reserved: Any, mm: Any) -> None:
    """Whatever a file's fields claim, nothing is written outside ``mm[0:min(size, reserved)]``: the writer
    stops at that request (the pure path then decides) and leaves the mapping and the fields alone."""
    if FAST is None:
        return
    start = 0 if not isinstance(wrote, int) else -wrote  # so the queue offset 0 is "the next one"
    f = _File(mm, start, wrote, size, reserved)
    q = _Queue(f)
    before = bytes(mm)
    assert FAST.cq_put([_req("T", 0, 5, 10, 3, 1, 0)], 0, {"T": {0: q}}, "earlier") == (0, "earlier")
    assert bytes(mm) == before and f.wrote == wrote and q.max_phys == 0
    ok = _File(bytearray(100), 0, 80, 100, 100)  # the last unit of a file: written, up to the byte
    assert FAST.cq_put([_req("T", 0, 5, 10, 3, 1, 4)], 0, {"T": {0: _Queue(ok)}}, 0) == (1, 1)
    assert ok.wrote == 100 and ok.mm[80:] == bytes.fromhex("0000000000000005" "0000000a" "0000000000000003")


def test_compiled_writer_refuses_bad_calls() -> None:
    if FAST is None:
        return
    with pytest.raises(ValueError):
        FAST.cq_put([], -1, {}, 0)
    with pytest.raises(TypeError):
        FAST.cq_put((), 0, {}, 0)
    assert FAST.cq_put([object(), _req("T", 0, 0, 1, 0, 1, 0)], 0, {}, 5) == (0, 5)  # not a request: pure path's
    assert FAST.cq_put([_req("T", 0, 0, 1, 0, 1, 0)], 3, {}, 5) == (3, 5)  # past the end: nothing to do
