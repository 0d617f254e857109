"""The compiled commitlog append (``rmq.protocol._faststore``) against the pure one, put stream by put stream.

Two stores get the same puts -- single messages and batches, valid ones of every shape the common case
takes, and ones outside it (unknown or illegal topics, IPv6 producers, fields outside their Java types,
bodies over maxMessageSize, properties over 32767 bytes or with lone surrogates, batches that break
RocketMQ's batch rules) -- and must agree on every put's result (status, offsets, remark) or error,
on the hand-offs given to the reput, and on every byte of the store's files: commitlog segments
(64 KiB here, so puts roll over segments), consume queues and index files once dispatched (the
compiled side's units and index entries written by the compiled writers). The compiled index writer
and the reput's compiled request builder are also compared with their pure loops on their own inputs. The compiled writer's own bounds checks are tested directly: it never
writes outside the region it is given. ``make fuzz`` runs the property with the fuzz profile, ``make fuzz-asan`` against an
AddressSanitizer/UBSan build of the extension.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.kernel.model import MessageRecord
from rmq.plugins.storage_mmap import MmapMessageStore
from rmq.plugins.storage_mmap.append import CompiledAppender, make_appender
from rmq.plugins.storage_mmap.queue_table import ConsumeQueueDispatcher
from rmq.protocol import storepath
from rmq.testing.fuzz import compiler_present, fuzz_settings

from .conftest import open_store

FAST = storepath.compiled_store()
I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)
V4 = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"


def test_compiled_store_serves_unless_rmq_pure() -> None:
    """Where a compiler exists the extension must have been built (so CI proves both paths run)."""
    if os.getenv("RMQ_PURE"):
        assert storepath.STORE == "pure (RMQ_PURE set)" and storepath.FAST is None
    elif compiler_present():
        assert storepath.STORE == "compiled", "the compiled store was not built: run make install-test"
    assert storepath.SERVING.endswith(f"; store {storepath.STORE}")
    alt = os.getenv("RMQ_FASTSTORE")  # make fuzz-asan: the sanitizer build must be the one tested
    if alt:
        assert FAST is not None and sys.modules[FAST.__name__].__file__ == alt


def _edge(lo: int, hi: int) -> st.SearchStrategy[Any]:
    """Mostly small valid values, sometimes a bound or one past it, sometimes not an int at all."""
    return st.one_of(
        st.integers(0, 3),
        st.integers(lo, hi),
        st.sampled_from([lo, hi, lo - 1, hi + 1]),
        st.sampled_from([True, 1.0, None]),
    )


_prop_key = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "DELAY", "k\u00e9", "a"])
_prop_val = st.one_of(st.sampled_from(["TagA", "0", "3", "true", "k1 k2", ""]), st.text(max_size=12))
properties = st.one_of(
    st.dictionaries(_prop_key, _prop_val, max_size=4).map(lambda d: "".join(f"{k}\x01{v}\x02" for k, v in d.items())),
    st.just(""),
    st.just("x" * 32768),  # over 32767 UTF-8 bytes
    st.just("TAGS\x01\ud800\x02"),  # a lone surrogate: not encodable
    st.just("\u00e9" * 16384),  # 32768 bytes from 16384 chars
)


@st.composite
def messages(draw: st.DrawFn, topic: str | None = None, qid: int | None = None) -> MessageRecord:
    common = draw(st.booleans())  # half the messages in the common case, the others anything
    return MessageRecord(
        topic if topic is not None else draw(st.sampled_from(["TopicA", "TopicB", "Topic\u00e9", "bad topic", ""])),
        qid if qid is not None else draw(st.integers(0, 3) if common else _edge(*I32)),
        draw(st.one_of(st.binary(max_size=1500), st.just(b"z" * (16 * 1024 + 1)), st.binary().map(bytearray))),
        flag=draw(st.integers(0, 3) if common else _edge(*I32)),
        properties=draw(properties),
        sys_flag=draw(st.sampled_from([0, 0, 1, 4, 8, 12, 0x10, 0x30, 2**31, -1])),
        born_timestamp=draw(st.integers(0, 2**41) if common else _edge(*I64)),
        born_host=draw(st.sampled_from([V4, V4, bytes(20), b"1234567"])),
        reconsume_times=draw(st.integers(0, 16) if common else _edge(*I32)),
        prepared_tx_offset=draw(st.integers(0, 2**40) if common else _edge(*I64)),
        store_timestamp=draw(st.one_of(st.integers(1, 2**41), st.sampled_from([2**63, True]))),  # 0 means "now"
    )


@st.composite
def puts(draw: st.DrawFn) -> tuple[str, list[MessageRecord]]:
    if draw(st.booleans()):
        return "single", [draw(messages())]
    topic = draw(st.sampled_from(["TopicA", "TopicB"]))
    qid = draw(st.integers(0, 3))
    n = draw(st.integers(0, 24))
    same = draw(st.booleans())  # a batch by the rules, or members drawn freely
    batch = [draw(messages(topic, qid) if same else messages()) for _ in range(n)]
    return "batch", batch if draw(st.booleans()) else tuple(batch)  # type: ignore[return-value]


def _put(store: MmapMessageStore, kind: str, batch: list[MessageRecord]) -> Any:
    try:
        return store.appender.append(batch) if kind == "single" else store.appender.put_batch(batch)
    except Exception as e:  # the pure path's own errors must be the compiled path's too
        return type(e), str(e)


def _files(root: Path) -> dict[str, Any]:
    """Every store file's bytes by path; index files in order (they are named by their creation time)."""
    files: dict[str, Any] = {"index": []}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.parent.name != "config" and p.name not in ("lock", "checkpoint", "abort"):
            if p.parent.name == "index":
                files["index"].append(p.read_bytes())
            else:
                files[str(p.relative_to(root))] = p.read_bytes()
    return files


class _EvenTags:
    """A tag filter (an input here): codes that are even; a filter that needs properties is never compiled."""

    needs_properties = False

    @staticmethod
    def match_tags_code(code: int) -> bool:
        return code % 2 == 0


def _pulls_agree(store: MmapMessageStore) -> None:
    """Every pull of every queue (each offset, a few counts and byte limits, with and without a tag
    filter) answers the same through the compiled scan and the pure loop."""
    compiled = FAST.scan if FAST is not None else None  # (RMQ_PURE leaves the store on the pure loop)
    pulls = 0
    for topic in ("TopicA", "TopicB", "Topic\u00e9"):
        for qid in range(4):
            for offset in range(store.get_max_offset(topic, qid) + 1):
                for count, limit, flt in ((1, 1 << 20, None), (3, 300, None), (32, 1 << 20, _EvenTags())):
                    got = []
                    for scan in (None, compiled):
                        store.fast_scan = scan
                        got.append(store.get_messages("g", topic, qid, offset, count, flt, limit))  # type: ignore[arg-type]
                    assert got[0] == got[1], (topic, qid, offset, count, limit)
                    pulls += 1
    assert pulls


def test_compiled_and_pure_append_write_the_same_store(tmp_path: Path) -> None:
    assert FAST is not None or not compiler_present(), "the compiled store was not built: run make install-test"

    async def main() -> None:
        async with open_store(tmp_path / "pure") as pure, open_store(tmp_path / "fast") as fast:
            pure.appender = make_appender(pure, pure=True)
            fast.appender = make_appender(fast, pure=False)  # (without a compiler: pure against pure)
            assert pure.index is not None and fast.index is not None
            pure.index.fast, fast.index.fast = None, FAST
            pure.reput.fast, fast.reput.fast = None, FAST
            cq_pure, cq_fast = pure.builtin_dispatchers[0], fast.builtin_dispatchers[0]
            assert isinstance(cq_pure, ConsumeQueueDispatcher) and isinstance(cq_fast, ConsumeQueueDispatcher)
            cq_pure.fast, cq_fast.fast = None, FAST
            assert type(pure.appender) is not CompiledAppender
            assert type(fast.appender) is CompiledAppender or FAST is None
            used = []

            @settings(fuzz_settings(60), max_examples=min(fuzz_settings(60).max_examples, 2000))  # the store grows
            @given(st.lists(puts(), min_size=1, max_size=6))
            def check(stream: list[tuple[str, list[MessageRecord]]]) -> None:
                for kind, batch in stream:
                    before = fast.appender.n_put
                    expected = _put(pure, kind, batch)
                    assert _put(fast, kind, batch) == expected, (kind, batch)
                    used.append(fast.appender.n_put > before)
                assert fast.reput.handoff == pure.reput.handoff
                assert fast.commitlog.max_offset == pure.commitlog.max_offset

            check()
            assert any(used)
            assert _files(tmp_path / "fast") == _files(tmp_path / "pure")
            await pure.wait_dispatched()
            await fast.wait_dispatched()
            _pulls_agree(fast)
        assert _files(tmp_path / "fast") == _files(tmp_path / "pure")  # consume queues and index too

    anyio.run(main)


def test_compiled_writer_stays_inside_its_region() -> None:
    """The region is [pos, pos + total): records that would end past it or short of it are refused
    before anything outside is written, and the hand-offs of a refused call are taken back."""
    assert FAST is not None or not compiler_present()
    if FAST is None:
        return  # nothing compiled to check
    msgs = [MessageRecord("T", 0, b"x" * 100, properties="TAGS\x01a\x02", store_timestamp=5) for _ in range(3)]
    tp = b"\x01T"
    total = FAST.measure(msgs, tp, 88, 1 << 20, True)
    assert total == 3 * (88 + 100 + 2 + 2 + len("TAGS\x01a\x02"))
    buf = bytearray(b"\xee" * (total + 64))
    handoff: list[Any] = [("earlier",)]
    args = (tp, V4, 0, 1000, 0, 7, 1, 5, handoff, "T")
    for pos, size in ((80, total), (-1, total), (0, total - 1), (0, total + 1)):
        with pytest.raises(ValueError):
            FAST.pack(buf, pos, size, msgs, *args)
        assert handoff == [("earlier",)]
        if pos != 0:  # a region outside the buffer: nothing at all was written
            assert buf == b"\xee" * (total + 64)
        elif size < total:  # a region too short: nothing past its end was written
            assert buf[size:] == b"\xee" * (total + 64 - size)
    FAST.pack(buf, 32, total, msgs, *args)
    assert buf[32 + total :] == b"\xee" * 32
    assert [h[0] for h in handoff[1:]] == [1000, 1000 + total // 3, 1000 + 2 * total // 3]
    with pytest.raises(BufferError):
        FAST.pack(bytes(total), 0, total, msgs, *args)  # a read-only buffer
    odd = [MessageRecord("T", 0, bytearray(b"x"))]
    assert FAST.measure(odd, tp, 88, 1 << 20, False) == -1  # not the common case: the pure path's
    with pytest.raises(ValueError):
        FAST.pack(buf, 0, total, odd, *args)


_keys = st.one_of(  # "topic#key", as the dispatcher builds them (never empty)
    st.text(max_size=40).map(lambda k: "T#" + k),  # any code point (non-BMP ones hash as two UTF-16 units)
    st.sampled_from(["T#k", "T#\u00e9", "T#\U0001f600", "T#" + "k" * 4100, "T#a\ud800"]),  # long; a lone surrogate
)
_entries = st.lists(
    st.one_of(
        st.tuples(_keys, st.integers(0, 2**40), st.integers(0, 2**42)),
        st.tuples(_keys, st.sampled_from([-1, 2**63]), st.integers(-(2**63), 2**63 - 1)),  # out of range / odd
        st.tuples(st.integers(), st.integers(), st.integers()),  # not a key: the pure loop's own error
    ),
    max_size=30,
)


@fuzz_settings(100)
@given(st.lists(_entries, min_size=1, max_size=4), st.sampled_from([1, 3, 64]), st.integers(1, 200))
def test_compiled_and_pure_index_write_the_same_entries(runs: list[Any], slots: int, max_entries: int) -> None:
    """IndexFile.put_many with and without the compiled writer: the same entries, slots and header, the
    same index of the first item not added, the same error for an item the pure loop refuses."""
    import tempfile

    from rmq.plugins.storage_mmap.index import IndexFile, index_file_size
    from rmq.plugins.storage_mmap.mapped_file import MappedFile

    assert FAST is not None or not compiler_present()
    with tempfile.TemporaryDirectory() as d:
        files = []
        for name in ("pure", "fast"):
            (Path(d) / name).mkdir()
            mf = MappedFile.open(Path(d) / name / "0", index_file_size(slots, max_entries), create=True, reserve=0)
            files.append(IndexFile(mf, slots, max_entries))
        try:
            for items in runs:
                outcome = []
                for f, fast in zip(files, (None, FAST), strict=True):
                    try:
                        outcome.append(f.put_many(list(items), 0, fast))
                    except Exception as e:
                        outcome.append((type(e), str(e)))
                assert outcome[0] == outcome[1]
                a, b = files
                assert (a.count, a.begin_ts, a.end_ts, a.begin_phy, a.end_phy, a.slot_count) == (
                    b.count, b.begin_ts, b.end_ts, b.begin_phy, b.end_phy, b.slot_count)
                assert a.mm[:] == b.mm[:]
        finally:
            for f in files:
                f.close()


_props_text = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "", "x\x01y"]), st.text(max_size=8)).map(
            lambda kv: f"{kv[0]}\x01{kv[1]}"),
        st.sampled_from(["TAGS\x01\U0001f600", "TAGS\x01a\ud800", "\x01", "TAGS", "KEYS\x01a b  c"]),
        st.text(max_size=6),
    ),
    max_size=5,
).map("\x02".join)


@st.composite
def handoffs(draw: st.DrawFn) -> tuple[int, list[tuple[Any, ...]]]:
    """A run of hand-off tuples, contiguous or not, of topics with and without the schedule topic."""
    start = draw(st.integers(0, 1 << 20))
    out: list[tuple[Any, ...]] = []
    at = start
    for _ in range(draw(st.integers(1, 12))):  # the reput asks only when there are hand-offs
        size = draw(st.integers(91, 400))
        if draw(st.integers(0, 9)) == 0:
            at += draw(st.integers(1, 100))  # out of step
        topic = draw(st.sampled_from(["TopicA", "SCHEDULE_TOPIC_XXXX", "Topic\u00e9"]))
        out.append((at, size, topic, draw(st.integers(0, 3)), draw(st.integers(0, 99)), draw(st.sampled_from([0, 4, 8])),
                    draw(st.integers(1, 2**41)), draw(st.integers(0, 99)), draw(_props_text)))
        at += size
    return start, out


def test_compiled_and_pure_reput_build_the_same_requests(tmp_path: Path) -> None:
    """The reput's requests from hand-offs, with and without the compiled builder: the same requests
    (decoded properties, tags codes, keys), the same end offset, the same hand-offs left."""
    assert FAST is not None or not compiler_present()

    async def main() -> None:
        async with open_store(tmp_path / "s") as store:
            reput = store.reput

            @fuzz_settings(200)
            @given(handoffs())
            def check(run: tuple[int, list[tuple[Any, ...]]]) -> None:
                start, items = run
                outcomes = []
                for fast in (None, FAST):
                    reput.fast = fast
                    reput.handoff[:] = items
                    try:
                        take = reput._handoff_take(start, 1 << 62)
                        del reput.handoff[: len(take)]
                        reqs, end = reput._handoff_requests(take, start) if take else ([], start)
                        outcomes.append((reqs, end, list(reput.handoff)))
                    except Exception as e:  # a lone surrogate in TAGS (no put stores one): the same error
                        outcomes.append((type(e), str(e)))
                assert outcomes[0] == outcomes[1]

            check()

    anyio.run(main)
