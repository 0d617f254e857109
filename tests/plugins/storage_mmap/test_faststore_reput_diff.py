"""The reput's direct path (``_faststore.reput_put``, reput_direct) against the pure dispatchers.

Two stores get the same puts through the same (compiled) appender, so their hand-offs are equal; one
dispatches them on the pure path (no compiled request builder, consume-queue or index writer), the
other on the direct path (hand-offs straight into queue and index files). Dispatch runs after every
group of puts, so batches end anywhere. Streams carry keys with spaces, many keys (more than the
compiled call hashes), unicode and non-BMP keys, no keys, tags absent, delayed records on the schedule
topic, transaction records, new queues, consume-queue and index file rolls (small files) and commitlog
segment rolls; the consume-queue and index files must agree byte for byte, and so must index queries by
key, unique key and time. A second property feeds hand-off runs the put path would never make (gaps,
odd properties, lone surrogates, fields of other types) to the compiled call itself: it must take the
same records the pure loop does and never write outside the index file. ``make fuzz`` runs both with
the fuzz profile, ``make fuzz-asan`` against an AddressSanitizer/UBSan build.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.kernel.model import MessageRecord
from rmq.plugins.storage_mmap import MmapMessageStore
from rmq.plugins.storage_mmap.append import make_appender
from rmq.plugins.storage_mmap.index import index_file_size
from rmq.protocol import storepath
from rmq.testing.fuzz import compiler_present, fuzz_settings
from rmq.testing.storage import DispatcherPlugin, RecordingDispatcher

from .conftest import open_store
from .test_faststore_diff import V4, _files

FAST = storepath.compiled_store()
SMALL_INDEX = {"maxIndexNum": 40, "maxHashSlotNum": 7}
TOPICS = ["TopicA", "TopicB", "Topic\u00e9", "SCHEDULE_TOPIC_XXXX"]
_key = st.one_of(
    st.sampled_from(["k1", "order 42", "\u00e9t\u00e9", "\U0001f600", "a  b", " lead", "x" * 300]),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00\x01\x02"), max_size=12),
)


@st.composite
def message(draw: st.DrawFn) -> MessageRecord:
    topic = draw(st.sampled_from(TOPICS))
    props: dict[str, str] = {}
    if draw(st.booleans()):
        props["TAGS"] = draw(st.sampled_from(["TagA", "t\u00e9", "\U0001f600", "a b"]))
    keys = draw(st.sampled_from(["none", "one", "spaces", "many"]))
    if keys == "one":
        props["KEYS"] = draw(_key)
    elif keys == "spaces":
        props["KEYS"] = " ".join(draw(st.lists(_key, min_size=1, max_size=6)))
    elif keys == "many":  # more keys than the compiled call hashes: the pure path's
        props["KEYS"] = " ".join(f"k{i}" for i in range(draw(st.integers(60, 70))))
    if draw(st.integers(0, 3)):
        props["UNIQ_KEY"] = draw(st.sampled_from(["AC11000100002A9F0000000000000001", "u\u00e9"])) + str(draw(st.integers(0, 9)))
    if topic == TOPICS[3] or draw(st.integers(0, 9)) == 0:
        props["DELAY"] = str(draw(st.integers(1, 18)))
    props = {k: v for k, v in props.items() if v}
    return MessageRecord(
        topic, draw(st.integers(0, 3)), b"b" * draw(st.integers(0, 900)),
        properties="".join(f"{k}\x01{v}\x02" for k, v in props.items()),
        sys_flag=draw(st.sampled_from([0, 0, 0, 4, 8, 12])), born_host=V4,
        prepared_tx_offset=draw(st.integers(0, 99)), store_timestamp=draw(st.integers(1, 2**41)),
    )


def _derived(root: Path) -> dict[str, Any]:
    """The consume-queue and index files' bytes (the commitlog is the same appender's on both sides)."""
    return {k: v for k, v in _files(root).items() if k == "index" or k.startswith("consumequeue")}


def _serve(store: MmapMessageStore, fast: Any) -> None:
    store.appender = make_appender(store, pure=False)  # the same hand-offs on both sides
    assert store.index is not None
    store.index.fast = store.reput.fast = store.builtin_dispatchers[0].fast = fast  # type: ignore[attr-defined]


def _queries(store: MmapMessageStore, keys: set[str]) -> list[Any]:
    svc = store.index
    assert svc is not None
    return [(k, svc.query(k, 64, b, e)) for k in sorted(keys) for b, e in ((0, 2**62), (0, 2**40), (2**40, 2**62))]


def test_direct_and_pure_reput_write_the_same_queues_and_index(tmp_path: Path) -> None:
    assert FAST is not None or not compiler_present(), "the compiled store was not built: run make install-test"

    @settings(fuzz_settings(20), max_examples=min(fuzz_settings(20).max_examples, 300), deadline=None)
    @given(st.lists(st.lists(message(), min_size=1, max_size=30), min_size=1, max_size=6))
    def check(groups: list[list[MessageRecord]]) -> None:
        with tempfile.TemporaryDirectory(dir=tmp_path) as d:
            anyio.run(run, Path(d), groups)

    taken: list[int] = []  # records each direct call took, over all examples

    async def run(d: Path, groups: list[list[MessageRecord]]) -> None:
        async with open_store(d / "pure", **SMALL_INDEX) as pure, open_store(d / "fast", **SMALL_INDEX) as fast:
            _serve(pure, None)
            _serve(fast, FAST)
            direct_run = fast.reput.direct.run
            fast.reput.direct.run = lambda take, offset: taken.append(direct_run(take, offset)) or taken[-1]  # type: ignore[method-assign]
            keys: set[str] = set()
            for group in groups:
                for m in group:
                    for s in (pure, fast):
                        s.appender.append([m])
                    p = dict(kv.split("\x01", 1) for kv in m.properties.split("\x02") if "\x01" in kv)
                    keys.update(f"{m.topic}#{k}" for k in [*p.get("KEYS", "").split(" "), p.get("UNIQ_KEY", "")] if k)
                left = fast.reput.handoff  # (the fast side may have dispatched some on the put's stack already)
                assert left == pure.reput.handoff[len(pure.reput.handoff) - len(left):]
                await pure.wait_dispatched()
                await fast.wait_dispatched()
                assert not pure.reput.direct.usable()
                assert _derived(d / "fast") == _derived(d / "pure")
            assert pure.reput.offset == fast.reput.offset == fast.commitlog.max_offset
            assert _queries(fast, keys) == _queries(pure, keys)
        assert _derived(d / "fast") == _derived(d / "pure")

    check()
    assert sum(taken) > 0 or FAST is None, "the direct path never served"


_odd = st.sampled_from([None, -1, 2**63, "x", 1.5, True])
_props = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "", "K"]), st.text(max_size=10)).map("\x01".join),
        st.sampled_from(["KEYS\x01a\ud800 b", "UNIQ_KEY\x01\udc00", "TAGS\x01\ud800", "KEYS\x01" + "k " * 70, "\x01"]),
        st.text(max_size=6),
    ),
    max_size=5,
).map("\x02".join)


@st.composite
def handoffs(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """Hand-off runs (phys relative to the run's start), mostly in step and at their queue's next offset
    (``None``: filled in at run time), some with what the put path never hands over."""
    at = 0
    out: list[tuple[Any, ...]] = []
    for _ in range(draw(st.integers(1, 25))):
        size = draw(st.integers(91, 400))
        if draw(st.integers(0, 15)) == 0:
            at += draw(st.integers(1, 100))  # out of step
        qoff = None if draw(st.integers(0, 7)) else draw(st.integers(0, 5))
        h = [at, size, draw(st.sampled_from(TOPICS)), draw(st.integers(0, 2)), qoff,
             draw(st.sampled_from([0, 0, 4, 8, 12])), draw(st.integers(1, 2**41)), 0, draw(_props)]
        if draw(st.integers(0, 19)) == 0:
            h[draw(st.sampled_from([0, 1, 2, 3, 5, 6, 8]))] = draw(_odd)
        out.append(tuple(h))
        at += size
    return out


def _placed(items: list[tuple[Any, ...]], start: int, store: MmapMessageStore) -> list[tuple[Any, ...]]:
    """The run at commitlog offset ``start``, ``None`` queue offsets made each queue's next one."""
    nxt: dict[Any, int] = {}
    out = []
    for h in items:
        phys, size, topic, qid, qoff, *rest = h
        if qoff is None:
            t = store.cqs.queues.get(topic) if isinstance(topic, str) else None
            cq = t.get(qid) if t is not None and isinstance(qid, int) else None
            key = (topic, qid) if cq is not None else None
            qoff = nxt.get(key, cq.max_offset if cq is not None else 0)
            if key is not None:
                nxt[key] = qoff + 1
        out.append((phys + start if isinstance(phys, int) and not isinstance(phys, bool) else phys, size, topic, qid,
                    qoff, *rest))
    return out


def test_compiled_reput_put_takes_what_the_pure_loop_would(tmp_path: Path) -> None:
    """reput_put over any run: the records it takes get the units and entries the pure dispatchers write
    for them; it stops where its docstring says, and never writes outside its index file."""
    assert FAST is not None or not compiler_present()
    if FAST is None:
        return  # nothing compiled to check

    async def main() -> None:
        async with open_store(tmp_path / "pure", **SMALL_INDEX) as pure, open_store(tmp_path / "fast", **SMALL_INDEX) as fast:
            _serve(pure, None)
            _serve(fast, FAST)
            for s in (pure, fast):  # every queue and the index with a file: the direct path's common case
                for t in ("TopicA", "TopicB", "SCHEDULE_TOPIC_XXXX"):  # (Topic\u00e9 is no valid name)
                    for q in range(3):
                        s.appender.append([MessageRecord(t, q, b"x", properties="KEYS\x01p\x02", born_host=V4,
                                                    store_timestamp=1700000000000)])
                await s.wait_dispatched()
            taken = []
            base = [1 << 40]

            @fuzz_settings(200)
            @given(handoffs())
            def check(items: list[tuple[Any, ...]]) -> None:
                start = base[0] = base[0] + (1 << 24)
                items = _placed(items, start, fast)
                assert _placed(items, 0, pure) == items
                n = fast.reput.direct.run(list(items), start)
                taken.append(n)
                reqs, _ = pure.reput._handoff_requests(list(items[:n]), start)
                assert len(reqs) == n
                for d in pure.builtin_dispatchers:
                    d.dispatch(reqs)
                assert _derived(tmp_path / "fast") == _derived(tmp_path / "pure")

            check()
            assert sum(taken) > 0

    anyio.run(main)


@fuzz_settings(200)
@given(st.integers(1, 5), st.integers(1, 30), st.integers(0, 40), st.integers(0, 40), st.integers(0, 40))
def test_compiled_reput_put_stays_inside_the_index_file(slots: int, entries: int, claimed: int, count: int,
                                                       reserved: int) -> None:
    """An index state that claims more room (entries, reserved bytes) than the buffer has: entries go only
    where they fit, and the state it hands back counts exactly what it wrote."""
    assert FAST is not None or not compiler_present()
    if FAST is None:
        return
    size = index_file_size(slots, entries)
    buf = bytearray(size) + b"\xee" * 64
    mm = memoryview(buf)[:size]
    take = [(i * 100, 100, "T", 0, i, 4, 5000 + i, 0, "KEYS\x01a b c\x02UNIQ_KEY\x01u") for i in range(40)]
    at = 40 + slots * 4
    ix = [mm, slots, claimed, at, at + reserved * 20, count, 0, 0, 0, 0, 0, -1]
    n, _ = FAST.reput_put(take, 0, {}, 0, ix)  # prepared records: index entries only
    assert buf[size:] == b"\xee" * 64
    room = min(claimed, entries, reserved)
    assert n == max(0, (room - count) // 4) and ix[5] == count + 4 * n
    mm.release()


class _LazyRecorder(RecordingDispatcher):
    """An attached dispatcher that accepts batches built on first use (as the long-poll notifier does)."""

    lazy_requests = True


def test_attached_dispatchers_get_the_requests_of_the_regular_path(tmp_path: Path) -> None:
    """A lazy attached dispatcher gets, beside the direct path, the very requests the pure path builds; a
    third party's (no ``lazy_requests``) keeps the regular path and gets them too."""
    assert FAST is not None or not compiler_present()
    lazy, plain, ref = _LazyRecorder(), RecordingDispatcher(), RecordingDispatcher()

    async def main() -> None:
        async with (
            open_store(tmp_path / "pure", DispatcherPlugin(ref), **SMALL_INDEX) as pure,
            open_store(tmp_path / "lazy", DispatcherPlugin(lazy), **SMALL_INDEX) as a,
            open_store(tmp_path / "plain", DispatcherPlugin(plain), **SMALL_INDEX) as b,
        ):
            stores = (pure, a, b)
            for s, fast in zip(stores, (None, FAST, FAST), strict=True):
                _serve(s, fast)
            assert a.reput.direct.usable() == (FAST is not None) and not b.reput.direct.usable()
            for i in range(400):
                props = f"TAGS\x01t{i % 3}\x02KEYS\x01k{i} shared\x02UNIQ_KEY\x01U{i}\x02"
                m = MessageRecord(TOPICS[i % 2], i % 3, b"x" * (i % 200), properties=props, born_host=V4,
                                  store_timestamp=1700000000000 + i)
                for s in stores:
                    s.appender.append([m])
                if i % 37 == 0:
                    for s in stores:
                        await s.wait_dispatched()
            for s in stores:
                await s.wait_dispatched()
            assert a.reput.n_handoff == b.reput.n_handoff == pure.reput.n_handoff == 400
        assert len(ref.requests) == 400
        assert lazy.requests == ref.requests and plain.requests == ref.requests
        assert _derived(tmp_path / "lazy") == _derived(tmp_path / "pure") == _derived(tmp_path / "plain")

    anyio.run(main)


def test_a_sleeping_reput_dispatches_on_the_puts_stack(tmp_path: Path) -> None:
    """A put while the reput sleeps is dispatched before ``append`` returns on the direct path (no task
    step); the pure path, a confirm offset or a new queue leave it to the reput's loop, woken."""
    assert FAST is not None or not compiler_present()

    async def main() -> None:
        async with open_store(tmp_path / "fast", **SMALL_INDEX) as fast, open_store(tmp_path / "pure", **SMALL_INDEX) as pure:
            _serve(fast, FAST)
            _serve(pure, None)
            m = MessageRecord("TopicA", 0, b"x", properties="KEYS\x01k\x02", born_host=V4, store_timestamp=1700000000000)
            for s in (fast, pure):
                s.appender.append([m])  # a new queue: the loop's
                await s.wait_dispatched()
                for _ in range(1000):  # the loop goes to sleep in a turn or two
                    if s.reput.idle:
                        break
                    await anyio.lowlevel.checkpoint()
                assert s.reput.idle
            for s in (fast, pure):  # no await from here to the checks: nobody else runs
                s.appender.append([m])
            assert fast.reput.offset == fast.commitlog.max_offset and not fast.reput.handoff and fast.reput.idle
            assert (pure.reput.offset < pure.commitlog.max_offset and pure.reput.handoff) or FAST is None
            assert not pure.reput.idle
            fast.reput.set_bound(fast.reput.offset)  # controller mode: dispatch held at the confirm offset
            for s in (fast, pure):
                s.appender.append([m])
            assert fast.reput.handoff and not fast.reput.idle
            fast.reput.set_bound(None)
            for s in (fast, pure):
                await s.wait_dispatched()
                assert s.reput.offset == s.commitlog.max_offset
            assert _derived(tmp_path / "fast") == _derived(tmp_path / "pure")

    anyio.run(main)
