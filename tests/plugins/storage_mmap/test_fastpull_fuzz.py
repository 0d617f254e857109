"""The compiled pull walk (``_faststore.pull_join``, protocol/_faststore_pull.c) against the pure loop, in process.

Hostile consume-queue units (offsets before, inside, between and past the segments, negative and huge
sizes, hole fillers, wide tag codes) over small commitlog segments with arbitrary bytes and write
positions, with and without a TAG filter's hash codes: wherever the compiled walk answers, it answers
what ``StoreReader._scan``'s pure loop returns for a ``TagFilter`` of those codes -- the records joined,
their count and bytes, where the next pull begins, MESSAGE_WAS_REMOVING, the last record's
PHYSICAL_OFFSET. It may decline (None) only for what the pure loop decides by itself. ``make fuzz`` and
``make fuzz-asan`` run it with many inputs (the latter against a sanitizer build).
"""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.kernel import GetStatus
from rmq.plugins.filters.tag import TagFilter
from rmq.plugins.storage_mmap.reads import StoreReader
from rmq.protocol import storepath
from rmq.testing.fuzz import compiler_present, fuzz_settings

FAST = storepath.compiled_store()

UNIT = struct.Struct(">qiq")
CODES = [0, 1, -1, 7, 2**31 - 1, -(2**31), 12345]


def _filter(codes: frozenset[int] | None) -> TagFilter | None:
    """A TAG filter matching exactly ``codes`` (None: no filter at all)."""
    if codes is None:
        return None
    f = TagFilter("x")
    f.code_set = codes
    return f


@st.composite
def walks(draw: st.DrawFn) -> dict[str, Any]:
    fsize = draw(st.sampled_from([64, 96, 256]))
    first = draw(st.integers(0, 2))
    nfiles = draw(st.integers(0, 3))
    files = []
    for k in range(nfiles):
        mm = draw(st.binary(min_size=fsize, max_size=fsize))
        files.append(SimpleNamespace(start=(first + k) * fsize, mm=mm, wrote=draw(st.integers(0, fsize))))
    span = (first + nfiles + 1) * fsize
    phys = st.one_of(st.integers(0, span), st.sampled_from([-1, -fsize, 2**62, 0]))
    size = st.one_of(st.integers(0, fsize), st.sampled_from([-1, 0, 36, 0x7FFFFFFF, 2**31 - 2]))
    tags = st.one_of(st.sampled_from(CODES), st.integers(-(2**63), 2**63 - 1),
                     st.sampled_from(CODES).map(lambda c: c + 2**32), st.sampled_from(CODES).map(lambda c: c - 2**40))
    units = b"".join(UNIT.pack(*u) for u in draw(st.lists(st.tuples(phys, size, tags), max_size=40)))
    if draw(st.integers(0, 9)) == 0:
        units += b"\x00" * draw(st.integers(1, 19))  # not whole units: the pure loop's own error
    codes = draw(st.one_of(st.none(), st.frozensets(st.sampled_from(CODES), max_size=4)))
    return {"fsize": fsize, "first": first, "files": files, "units": units, "codes": codes,
            "offset": draw(st.integers(0, 10**12)), "count": draw(st.integers(1, 40)),
            "max_bytes": draw(st.sampled_from([1, 36, 100, 1 << 20]))}


def _pure(w: dict[str, Any]) -> Any:
    """StoreReader._scan's pure loop over the same units and segments."""
    reader = object.__new__(StoreReader)
    reader.commitlog = SimpleNamespace(files=w["files"], file_size=w["fsize"])  # type: ignore[assignment]
    reader.fast_scan = None
    cq = SimpleNamespace(slice=lambda offset: (SimpleNamespace(mm=w["units"]), 0, len(w["units"])))
    return reader._scan(cq, w["offset"], w["count"], _filter(w["codes"]), w["max_bytes"], 0, 0)  # type: ignore[arg-type]


def test_compiled_walk_was_built() -> None:
    assert FAST is not None or not compiler_present(), "the compiled store was not built: run make install-test"


@fuzz_settings(300)
@given(walks())
def test_compiled_pull_walk_answers_as_the_pure_loop(w: dict[str, Any]) -> None:
    if FAST is None:  # no compiler: the pure loop is all there is (test_compiled_walk_was_built says why)
        return
    got = FAST.pull_join(w["units"], w["files"], w["first"], w["fsize"], w["offset"], w["count"], w["max_bytes"],
                         w["codes"])
    try:
        res = _pure(w)
    except (struct.error, ValueError):  # units not whole: the pure loop fails, the compiled walk declines
        assert got is None
        return
    if got is None:  # declined: only where a record would be sliced outside its segment's mapping or is short
        assert len(w["units"]) % 20 or res.messages, (w, res)
        return
    i, body, n, total, removing, last = got
    assert (w["offset"] + i, body, n, total) == (res.next_begin_offset, b"".join(res.messages), len(res.messages),
                                                 res.total_size)
    status = GetStatus.FOUND if n else GetStatus.MESSAGE_WAS_REMOVING if removing else GetStatus.NO_MATCHED_MESSAGE
    assert status is res.status
    assert last == (struct.unpack_from(">q", res.messages[-1], 28)[0] if n else -1)


def test_compiled_pull_walk_refuses_what_it_cannot_match() -> None:
    """Codes that are not int64 (a filter the walk cannot read) decline; a wrong argument type raises."""
    if FAST is None:
        return
    unit = UNIT.pack(0, 40, 1)
    f = SimpleNamespace(start=0, mm=bytes(64), wrote=64)
    assert FAST.pull_join(unit, [f], 0, 64, 0, 1, 1 << 20, frozenset({2**70})) is None
    assert FAST.pull_join(unit, [f], 0, 64, 0, 1, 1 << 20, {"a"}) is None
    assert FAST.pull_join(unit, [f], 0, 64, 0, 1, 1 << 20, frozenset())[2] == 0  # an empty set matches nothing
    assert FAST.pull_join(unit, [f], 0, 64, 0, 1, 1 << 20, None)[1:3] == (bytes(40), 1)
    with pytest.raises(TypeError):
        FAST.pull_join(unit, (f,), 0, 64, 0, 1, 1 << 20, None)
