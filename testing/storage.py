"""``MessageStoreContract``: the behaviour every ``rmq.storage`` plugin must show, as pytest tests.

Subclass it in a ``Test...`` class and provide :meth:`MessageStoreContract.build_store`,
returning a store *not yet started* rooted at ``path``, as your plugin's
``rmq_storage_make_store`` builds it (called again with the same path for the restart
test). Broker settings arrive as keyword arguments (RocketMQ names). The contract then
plays the owner: it attaches dispatchers with ``store.attach`` and enters the store, so
the wiring every broker uses is part of what is checked::

    class TestMyStore(MessageStoreContract):
        supports_restart = True

        def build_store(self, path, **broker):
            kernel = make_kernel([MyStorePlugin()], {"broker": {"storePathRootDir": str(path), **broker}})
            store = kernel.hook.rmq_storage_make_store(kernel=kernel, config=kernel.config.broker)
            return attach_from_hooks(kernel, store)  # what a broker would attach (flush policy...)

Records are checked with :func:`decode_record`, a decoder written from the format
table alone (reference §1.1), independent of any store's own code.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import anyio
import pytest

from rmq.kernel.hookspecs.storage import MessageStore
from rmq.kernel.markers import hookimpl
from rmq.kernel.model import DispatchRequest, GetStatus, MessageRecord, PutStatus
from rmq.kernel.watermark import Watermark
from rmq.protocol.common import java_hash

__all__ = ["SMALL_STORE", "DispatcherPlugin", "MessageStoreContract", "RecordingDispatcher", "attach_from_hooks",
           "decode_record"]

#: broker settings for a store small enough that a test rolls segments and fills index files quickly
SMALL_STORE: Mapping[str, int] = {
    "mappedFileSizeCommitLog": 64 * 1024,
    "mappedFileSizeConsumeQueue": 100 * 20,
    "maxHashSlotNum": 64,
    "maxIndexNum": 256,
    "maxMessageSize": 16 * 1024,
    "flushIntervalCommitLog": 50,
    "flushIntervalConsumeQueue": 50,
}

_BORN = b"\x0a\x00\x00\x07\x00\x00\x30\x39"  # 10.0.0.7:12345


def _int(b: bytes, signed: bool = True) -> int:
    return int.from_bytes(b, "big", signed=signed)


def decode_record(rec: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Every field of one stored record, by the reference table (not by a store's codec).

    Raises AssertionError when the record is inconsistent (length, magic, CRC).
    """
    b = bytes(rec)
    out: dict[str, Any] = {}
    out["total"] = _int(b[0:4])
    assert out["total"] == len(b), f"TOTALSIZE {out['total']} != {len(b)} bytes"
    assert b[4:8] == bytes.fromhex("daa320a7"), f"bad magic {b[4:8].hex()}"
    out["crc"] = _int(b[8:12])
    out["queue_id"] = _int(b[12:16])
    out["flag"] = _int(b[16:20])
    out["queue_offset"] = _int(b[20:28])
    out["phys_offset"] = _int(b[28:36])
    out["sys_flag"] = _int(b[36:40])
    out["born_ts"] = _int(b[40:48])
    born_len = 20 if out["sys_flag"] & 0x10 else 8
    p = 48
    out["born_host"] = b[p : p + born_len]
    p += born_len
    out["store_ts"] = _int(b[p : p + 8])
    p += 8
    store_len = 20 if out["sys_flag"] & 0x20 else 8
    out["store_host"] = b[p : p + store_len]
    p += store_len
    out["reconsume_times"] = _int(b[p : p + 4])
    out["prepared_tx_offset"] = _int(b[p + 4 : p + 12])
    body_len = _int(b[p + 12 : p + 16])
    p += 16
    out["body"] = b[p : p + body_len]
    p += body_len
    assert zlib.crc32(out["body"]) & 0x7FFFFFFF == out["crc"], "BODYCRC mismatch"
    topic_len = b[p]
    out["topic"] = b[p + 1 : p + 1 + topic_len].decode()
    p += 1 + topic_len
    props_len = _int(b[p : p + 2])
    p += 2
    raw = b[p : p + props_len].decode()
    p += props_len
    assert p == len(b), f"fields end at {p}, record is {len(b)} bytes"
    expected = (
        91 + body_len + topic_len + props_len + (12 if born_len == 20 else 0) + (12 if store_len == 20 else 0)
    )
    assert expected == out["total"], "length formula disagrees with TOTALSIZE"
    props: dict[str, str] = {}
    for pair in raw.split("\x02"):
        name, _, value = pair.partition("\x01")
        if name and value:
            props[name] = value
    out["properties"] = props
    return out


def props(**kv: str) -> str:
    return "\x02".join(f"{k}\x01{v}" for k, v in kv.items())


def attach_from_hooks(kernel: Any, store: Any) -> Any:
    """Do what a broker does between building a store and entering it: call the dispatch and
    flush hooks with the store and ``attach`` the results. Returns the store (for tests and
    benches; the broker does the same inline)."""
    dispatchers = [
        d for part in kernel.hook.rmq_dispatch_make_dispatchers(kernel=kernel, store=store) for d in part or ()
    ]
    policy = kernel.hook.rmq_flush_make_policy(kernel=kernel, store=store, config=kernel.config.broker)
    store.attach(dispatchers=dispatchers, flush_policy=policy)
    return store


class RecordingDispatcher:
    """A third-party dispatcher: remembers every request and how many batches it got."""

    def __init__(self) -> None:
        self.requests: list[DispatchRequest] = []
        self.batches = 0

    def dispatch(self, requests: Sequence[DispatchRequest]) -> None:
        self.batches += 1
        self.requests.extend(requests)


class DispatcherPlugin:
    """A plugin contributing ``dispatchers`` to every store through the kernel hook, as a third party's would."""

    def __init__(self, *dispatchers: Any) -> None:
        self.dispatchers = list(dispatchers)

    @hookimpl
    def rmq_dispatch_make_dispatchers(self, kernel: Any, store: Any) -> list[Any]:
        return list(self.dispatchers)


class _CodeFilter:
    """A MessageFilter matching a set of tags codes; optionally a property predicate too."""

    expression_type = "TEST"
    expression = "test"

    def __init__(self, codes: set[int] | None, prop: tuple[str, str] | None = None) -> None:
        self.codes = codes
        self.prop = prop
        self.needs_properties = prop is not None
        self.seen_codes: list[int] = []

    def match_tags_code(self, tags_code: int) -> bool:
        self.seen_codes.append(tags_code)
        return self.codes is None or tags_code in self.codes

    def match_properties(self, properties: Mapping[str, str]) -> bool:
        assert self.prop is not None
        return properties.get(self.prop[0]) == self.prop[1]


class MessageStoreContract:
    """Base class of a store's contract tests (no ``Test`` prefix: subclass it)."""

    supports_restart: ClassVar[bool] = True
    topic: ClassVar[str] = "ContractTopic"

    def build_store(self, path: Path, **broker: Any) -> Any:
        raise NotImplementedError("subclasses provide build_store(path, **broker): a store not yet started")

    @asynccontextmanager
    async def make_store(
        self, path: Path, *, dispatchers: Sequence[Any] = (), **broker: Any
    ) -> AsyncIterator[Any]:
        """The owner's sequence: build, attach, enter."""
        store = self.build_store(path, **broker)
        if dispatchers:
            store.attach(dispatchers=dispatchers)
        async with store:
            yield store

    async def settle(self, store: Any) -> None:
        """Wait until everything put is readable (dispatch is asynchronous in most stores)."""
        wait = getattr(store, "wait_dispatched", None)
        if wait is not None:
            await wait()
            return
        for _ in range(50):
            await anyio.sleep(0.01)

    def msg(self, i: int, queue_id: int = 0, **kw: Any) -> MessageRecord:
        kw.setdefault("properties", props(TAGS=f"tag{i % 3}", KEYS=f"k{i} shared", UNIQ_KEY=f"U{i:030d}"))
        return MessageRecord(
            topic=kw.pop("topic", self.topic),
            queue_id=queue_id,
            body=kw.pop("body", f"body-{i}".encode() * (1 + i % 5)),
            flag=kw.pop("flag", i),
            born_timestamp=kw.pop("born_timestamp", 1_700_000_000_000 + i),
            born_host=kw.pop("born_host", _BORN),
            **kw,
        )

    async def _fill(self, store: Any, n: int, queue_id: int = 0, **kw: Any) -> list[Any]:
        results = []
        for i in range(n):
            r = await store.put_message(self.msg(i, queue_id, **kw))
            assert r.status == PutStatus.PUT_OK, r
            results.append(r)
        await self.settle(store)
        return results

    # ------------------------------------------------------------------ put / get

    @pytest.mark.anyio
    async def test_protocol_and_roundtrip(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            assert isinstance(store, MessageStore)
            results = await self._fill(store, 20, queue_id=3)
            got = store.get_messages("g", self.topic, 3, 0, 64)
            assert got.status == GetStatus.FOUND
            assert got.queue_offsets == list(range(20))
            assert got.next_begin_offset == 20 and got.min_offset == 0 and got.max_offset == 20
            assert got.total_size == sum(len(m) for m in got.messages)
            for i, (raw, res) in enumerate(zip(got.messages, results, strict=True)):
                rec = decode_record(raw)
                m = self.msg(i, 3)
                assert rec["topic"] == self.topic and rec["queue_id"] == 3
                assert rec["queue_offset"] == i == res.queue_offset
                assert rec["phys_offset"] == res.wrote_offset and rec["total"] == res.wrote_bytes
                assert rec["store_ts"] == res.store_timestamp > 0
                assert rec["body"] == m.body and rec["flag"] == m.flag
                assert rec["born_ts"] == m.born_timestamp and rec["born_host"] == _BORN
                assert len(rec["store_host"]) == 8  # the config's host, as nothing else was attached
                assert rec["properties"]["UNIQ_KEY"] == f"U{i:030d}"
                assert rec["sys_flag"] == 0 and rec["reconsume_times"] == 0
                assert store.look_message_by_offset(res.wrote_offset) == raw

    @pytest.mark.anyio
    async def test_offsets_per_queue_and_limits(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            for i in range(30):
                r = await store.put_message(self.msg(i, queue_id=i % 3))
                assert r.queue_offset == i // 3
            await self.settle(store)
            assert [store.get_max_offset(self.topic, q) for q in range(4)] == [10, 10, 10, 0]
            assert store.get_min_offset(self.topic, 1) == 0
            got = store.get_messages("g", self.topic, 1, 4, 3)
            assert got.queue_offsets == [4, 5, 6] and got.next_begin_offset == 7
            one = store.get_messages("g", self.topic, 1, 0, 32, max_bytes=1)
            assert len(one.messages) == 1 and one.next_begin_offset == 1  # at least one record
            assert store.max_phy_offset > store.min_phy_offset >= 0

    @pytest.mark.anyio
    async def test_get_statuses(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            await self._fill(store, 5)
            r = store.get_messages("g", "NoSuchTopic", 0, 0, 32)
            assert r.status == GetStatus.NO_MATCHED_LOGIC_QUEUE and r.next_begin_offset == 0
            r = store.get_messages("g", self.topic, 0, 5, 32)
            assert r.status == GetStatus.OFFSET_OVERFLOW_ONE and r.next_begin_offset == 5 and not r.messages
            r = store.get_messages("g", self.topic, 0, 9, 32)
            assert r.status == GetStatus.OFFSET_OVERFLOW_BADLY and r.next_begin_offset == 0
            assert r.max_offset == 5

    @pytest.mark.anyio
    async def test_batch(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            await store.put_message(self.msg(0, 2))
            batch = [self.msg(i, 2) for i in range(1, 11)]
            r = await store.put_messages(batch)
            assert r.status == PutStatus.PUT_OK and r.msg_count == 10 and r.queue_offset == 1
            assert len(r.physical_offsets) == 10 and r.physical_offsets[0] == r.wrote_offset
            await self.settle(store)
            got = store.get_messages("g", self.topic, 2, 1, 32)
            assert got.queue_offsets == list(range(1, 11))
            for raw, phys, m in zip(got.messages, r.physical_offsets, batch, strict=True):
                rec = decode_record(raw)
                assert rec["phys_offset"] == phys and rec["body"] == m.body
                assert rec["store_ts"] == r.store_timestamp
            assert sum(len(m) for m in got.messages) == r.wrote_bytes
            mixed = [self.msg(0, 2), self.msg(1, 3)]
            assert (await store.put_messages(mixed)).status == PutStatus.MESSAGE_ILLEGAL
            assert (await store.put_messages([])).status == PutStatus.MESSAGE_ILLEGAL
            tx = [self.msg(0, 2, sys_flag=0x8)]
            assert (await store.put_messages(tx)).status == PutStatus.MESSAGE_ILLEGAL
            delayed = [self.msg(0, 2, properties=props(DELAY="3"))]
            assert (await store.put_messages(delayed)).status == PutStatus.MESSAGE_ILLEGAL
            await self.settle(store)
            assert store.get_max_offset(self.topic, 2) == 11

    @pytest.mark.anyio
    async def test_illegal_input_stores_nothing(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path, maxMessageSize=1024) as store:
            before = store.max_phy_offset
            r = await store.put_message(self.msg(0, topic="T" * 128))
            assert r.status == PutStatus.MESSAGE_ILLEGAL
            r = await store.put_message(self.msg(0, properties="K\x01" + "v" * 32767))
            assert r.status == PutStatus.PROPERTIES_SIZE_EXCEEDED
            r = await store.put_message(self.msg(0, body=b"x" * 1025))
            assert r.status == PutStatus.MESSAGE_ILLEGAL
            batch = [self.msg(0), self.msg(1, body=b"x" * 1025)]
            assert (await store.put_messages(batch)).status == PutStatus.MESSAGE_ILLEGAL
            assert store.max_phy_offset == before
            r = await store.put_message(self.msg(0, topic="T" * 127, body=b"x" * 1024))
            assert r.status == PutStatus.PUT_OK

    @pytest.mark.anyio
    async def test_ipv6_hosts(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            born6 = bytes(range(16)) + (4321).to_bytes(4, "big")
            host6 = bytes(range(100, 116)) + (10911).to_bytes(4, "big")
            store.attach(store_host=host6)  # allowed while running: a broker learns its port late
            r = await store.put_message(self.msg(1, born_host=born6))
            assert r.ok
            await self.settle(store)
            rec = decode_record(store.get_messages("g", self.topic, 0, 0, 1).messages[0])
            assert rec["sys_flag"] & 0x30 == 0x30
            assert rec["born_host"] == born6 and rec["store_host"] == host6
            assert store.get_store_time(self.topic, 0, 0) == r.store_timestamp

    # ------------------------------------------------------------------ transactions, filters, time, keys

    @pytest.mark.anyio
    async def test_transaction_types(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            half = await store.put_message(self.msg(0, sys_flag=0x4))
            assert half.ok and half.queue_offset == 0
            commit = await store.put_message(self.msg(1, sys_flag=0x8, prepared_tx_offset=half.wrote_offset))
            rollback = await store.put_message(self.msg(2, sys_flag=0xC))
            normal = await store.put_message(self.msg(3))
            await self.settle(store)
            assert (commit.queue_offset, rollback.queue_offset, normal.queue_offset) == (0, 0, 1)
            assert store.get_max_offset(self.topic, 0) == 2
            got = [decode_record(m) for m in store.get_messages("g", self.topic, 0, 0, 32).messages]
            assert [g["phys_offset"] for g in got] == [commit.wrote_offset, normal.wrote_offset]
            assert got[0]["prepared_tx_offset"] == half.wrote_offset
            assert decode_record(store.look_message_by_offset(half.wrote_offset))["sys_flag"] == 0x4

    @pytest.mark.anyio
    async def test_tag_and_property_filters(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            await self._fill(store, 12)
            f = _CodeFilter({java_hash("tag1")})
            got = store.get_messages("g", self.topic, 0, 0, 32, f)
            assert got.queue_offsets == [1, 4, 7, 10] and got.next_begin_offset == 12
            assert len(f.seen_codes) == 12 and java_hash("tag0") in f.seen_codes
            none = store.get_messages("g", self.topic, 0, 0, 32, _CodeFilter({12345}))
            assert none.status == GetStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 12
            pf = _CodeFilter(None, ("KEYS", "k5 shared"))
            assert store.get_messages("g", self.topic, 0, 0, 32, pf).queue_offsets == [5]

    @pytest.mark.anyio
    async def test_scan_is_bounded(self, tmp_path: Path) -> None:
        # a pull never crosses a consume-queue file: make one file hold all units
        async with self.make_store(tmp_path, mappedFileSizeConsumeQueue=300_000 * 20) as store:
            batch = [self.msg(i, properties=props(TAGS="a")) for i in range(900)]
            for i in range(0, 900, 100):
                assert (await store.put_messages(batch[i : i + 100])).ok
            await self.settle(store)
            got = store.get_messages("g", self.topic, 0, 0, 1, _CodeFilter({1}))
            assert got.status == GetStatus.NO_MATCHED_MESSAGE
            assert got.next_begin_offset == 800  # max(16000, 1 * 20) bytes of units

    @pytest.mark.anyio
    async def test_delay_topic_tags_code_is_deliver_time(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            r = await store.put_message(self.msg(0, topic="SCHEDULE_TOPIC_XXXX", properties=props(DELAY="3")))
            await self.settle(store)
            f = _CodeFilter(None)
            store.get_messages("g", "SCHEDULE_TOPIC_XXXX", 0, 0, 1, f)
            assert f.seen_codes == [r.store_timestamp + 10_000]  # level 3 = 10s

    @pytest.mark.anyio
    async def test_offset_by_time(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            for i in range(10):
                assert (await store.put_message(self.msg(i, store_timestamp=1_000_000 + 1000 * i))).ok
            await self.settle(store)
            by_time = store.get_offset_by_time
            assert by_time(self.topic, 0, 1_004_000) == 4
            assert by_time(self.topic, 0, 1_004_300) == 4
            assert by_time(self.topic, 0, 1_004_700) == 5
            assert by_time(self.topic, 0, 1) == 0
            assert by_time(self.topic, 0, 9_999_999) == 9
            assert store.get_store_time(self.topic, 0, 7) == 1_007_000
            assert store.get_store_time(self.topic, 0, 10) == -1
            assert store.get_earliest_store_time(self.topic, 0) == 1_000_000

    @pytest.mark.anyio
    async def test_query_by_key(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            res = await self._fill(store, 10)
            await store.put_message(self.msg(3, topic="Other"))
            await self.settle(store)
            hits = store.query_by_key(self.topic, "k3", 10, 0, 2**62)
            assert [decode_record(h)["phys_offset"] for h in hits] == [res[3].wrote_offset]
            uniq = store.query_by_key(self.topic, f"U{7:030d}", 10, 0, 2**62)
            assert [decode_record(h)["queue_offset"] for h in uniq] == [7]
            shared = store.query_by_key(self.topic, "shared", 4, 0, 2**62)
            assert len(shared) == 4
            ts = res[5].store_timestamp
            assert store.query_by_key(self.topic, "k5", 10, ts + 1, ts + 10) == []
            assert len(store.query_by_key(self.topic, "k5", 10, ts, ts)) == 1
            assert store.query_by_key(self.topic, "nope", 10, 0, 2**62) == []

    @pytest.mark.anyio
    async def test_lookup_by_offset_finds_records_only_where_they_start(self, tmp_path: Path) -> None:
        """Admin lookups and transaction checks hand in offsets from clients: any other offset reads
        as None, never as bytes that happen to look like a size (the QUEUEOFFSET field of message
        100, read as TOTALSIZE, says 100)."""
        async with self.make_store(tmp_path) as store:
            res = await self._fill(store, 101)
            at = res[100].wrote_offset
            assert decode_record(store.look_message_by_offset(at))["queue_offset"] == 100
            for off in (at + 24, at + 4, at + 1, -1, store.max_phy_offset, store.max_phy_offset + 10**9):
                assert store.look_message_by_offset(off) is None, off

    @pytest.mark.anyio
    async def test_third_party_dispatcher_receives_batches(self, tmp_path: Path) -> None:
        rec = RecordingDispatcher()
        async with self.make_store(tmp_path, dispatchers=[rec]) as store:
            results = await self._fill(store, 50, queue_id=1)
            assert (await store.put_messages([self.msg(i, 1) for i in range(5)])).ok
            await self.settle(store)
            assert [r.commit_log_offset for r in rec.requests[:50]] == [r.wrote_offset for r in results]
            assert [r.consume_queue_offset for r in rec.requests] == list(range(55))
            first = rec.requests[0]
            assert first.topic == self.topic and first.queue_id == 1 and first.tags_code == java_hash("tag0")
            assert first.keys == "k0 shared" and first.uniq_key == f"U{0:030d}"
            assert first.properties["TAGS"] == "tag0" and first.store_timestamp == results[0].store_timestamp

    @pytest.mark.anyio
    async def test_attach_rules_and_durable_watermark(self, tmp_path: Path) -> None:
        # an asynchronous flush policy flushes a few bytes at its "thorough" interval: keep it short
        store = self.build_store(tmp_path, flushIntervalCommitLog=50, flushCommitLogThoroughInterval=200)
        with pytest.raises(ValueError):
            store.attach(store_host=b"\x01\x02\x03")
        host = bytes((10, 1, 2, 3)) + (10911).to_bytes(4, "big")
        store.attach(store_host=host)
        rec = RecordingDispatcher()
        store.attach(dispatchers=[rec])
        async with store:
            assert isinstance(store.durable, Watermark)
            with pytest.raises(RuntimeError):
                store.attach(dispatchers=[RecordingDispatcher()])
            r = await store.put_message(self.msg(0))
            assert r.ok
            end = r.wrote_offset + r.wrote_bytes
            with anyio.fail_after(10):
                assert await store.durable.wait_for(end, 10)
            assert store.durable.value >= end
            await self.settle(store)
            assert [q.commit_log_offset for q in rec.requests] == [r.wrote_offset]
            assert decode_record(store.look_message_by_offset(r.wrote_offset))["store_host"] == host

    @pytest.mark.anyio
    async def test_delete_topics_and_stats(self, tmp_path: Path) -> None:
        async with self.make_store(tmp_path) as store:
            await self._fill(store, 3)
            await self._fill(store, 3, topic="Keep")
            store.delete_topics([self.topic])
            assert store.get_max_offset(self.topic, 0) == 0
            r = store.get_messages("g", self.topic, 0, 0, 32)
            assert r.status == GetStatus.NO_MATCHED_LOGIC_QUEUE
            assert store.get_max_offset("Keep", 0) == 3
            assert isinstance(await store.clean_expired_files(), int)
            st = store.stats()
            assert isinstance(st, dict) and st["puts"] == 6

    # ------------------------------------------------------------------ names from strangers

    HOSTILE_TOPICS: ClassVar[tuple[str, ...]] = (
        "..",
        ".",
        "../../x",
        "../",
        "/etc",
        "/tmp/rmq-escape",
        "a/b",
        "a\\b",
        "..\\..\\x",
        "a\x00b",
        "a\nb",
        "",
        " ",
        "T" * 128,
        "topic.with.dots",
        "caf\u00e9",
    )

    @pytest.mark.anyio
    async def test_hostile_topic_names_touch_nothing(self, tmp_path: Path) -> None:
        """Names that are not RocketMQ topics are refused by puts and ignored by deletes; encoded
        separators are plain characters; nothing outside the store root is created or removed."""
        root = tmp_path / "store"
        outside = tmp_path / "outside"
        (outside / "etc").mkdir(parents=True)
        (outside / "etc" / "keep").write_text("keep")
        async with self.make_store(root) as store:
            await self._fill(store, 3)
            before = store.max_phy_offset
            for name in self.HOSTILE_TOPICS:
                r = await store.put_message(self.msg(0, topic=name))
                assert r.status == PutStatus.MESSAGE_ILLEGAL, (name, r)
                r = await store.put_messages([self.msg(0, topic=name), self.msg(1, topic=name)])
                assert r.status == PutStatus.MESSAGE_ILLEGAL, (name, r)
            assert store.max_phy_offset == before  # refused before any byte was written
            store.delete_topics([*self.HOSTILE_TOPICS, str(outside), "../outside", "..%2F..%2Foutside"])
            assert store.get_max_offset(self.topic, 0) == 3
            encoded = (
                "%2e%2e",
                "%2F%2e%2e%2F%2e%2e%2Foutside",
                "%5C%2e%2e",
                "|%|",
            )  # RocketMQ allows % and |
            for name in encoded:
                r = await store.put_message(self.msg(7, topic=name))
                assert r.status == PutStatus.PUT_OK, (name, r)
            await self.settle(store)
            for name in encoded:
                assert store.get_max_offset(name, 0) == 1
                got = store.get_messages("g", name, 0, 0, 8)
                assert [decode_record(m)["topic"] for m in got.messages] == [name]
            store.delete_topics([*encoded, self.topic])
            assert store.get_max_offset(self.topic, 0) == 0 and store.get_max_offset("%2e%2e", 0) == 0
        assert (outside / "etc" / "keep").read_text() == "keep"
        assert set(os.listdir(tmp_path)) <= {"outside", "store"}

    # ------------------------------------------------------------------ restart

    @pytest.mark.anyio
    async def test_restart_keeps_messages_and_offsets(self, tmp_path: Path) -> None:
        if not self.supports_restart:
            # A volatile store's documented contract: reopening starts empty, never half-restored.
            async with self.make_store(tmp_path) as store:
                await self._fill(store, 5, queue_id=0)
            async with self.make_store(tmp_path) as store:
                assert store.get_max_offset(self.topic, 0) == 0
                assert store.get_messages("g", self.topic, 0, 0, 8).messages == []
            return
        async with self.make_store(tmp_path) as store:
            await self._fill(store, 25, queue_id=0)
            await self._fill(store, 5, queue_id=1)
            before = [bytes(m) for m in store.get_messages("g", self.topic, 0, 0, 64).messages]
            keys_before = store.query_by_key(self.topic, "k4", 10, 0, 2**62)
        async with self.make_store(tmp_path) as store:
            assert store.get_max_offset(self.topic, 0) == 25 and store.get_max_offset(self.topic, 1) == 5
            after = [bytes(m) for m in store.get_messages("g", self.topic, 0, 0, 64).messages]
            assert after == before
            assert store.query_by_key(self.topic, "k4", 10, 0, 2**62) == keys_before
            r = await store.put_message(self.msg(99, 1))
            assert r.queue_offset == 5 and r.wrote_offset >= max(
                decode_record(b)["phys_offset"] for b in before
            )
