"""Stored-record, message-id, batch and hash tests (reference §4), without sockets."""

from __future__ import annotations

import re
import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.protocol.common import MAGIC_MESSAGE, Prop, SysFlag, java_hash, tags_code
from rmq.protocol.message import (
    BatchError,
    MessageDecodeError,
    MessageExt,
    UniqIdGenerator,
    body_crc,
    compress_body,
    decode_batch,
    decode_message,
    decode_messages,
    decode_offset_msg_id,
    decompress_body,
    encode_batch,
    encode_message,
    host_bytes,
    offset_msg_id,
    parse_host,
)

# --------------------------------------------------------------------------- reference vectors


@pytest.mark.parametrize(
    ("data", "crc"), [(b"a", 1756872259), (b"test", 1484750348), (b"Hello World", 1243066710)]
)
def test_body_crc_vectors(data: bytes, crc: int) -> None:
    assert body_crc(data) == crc
    assert zlib.crc32(b"a") == 3904355907


@pytest.mark.parametrize(
    ("tag", "code"), [("TagA", 2598919), ("TagB", 2598920), ("*", 42), ("tag中文", 110763540), ("😀", 1772899)]
)
def test_tag_hash_vectors(tag: str, code: int) -> None:
    assert java_hash(tag) == code
    assert tags_code(tag) == code


def test_tags_code_absent() -> None:
    assert tags_code(None) == 0 and tags_code("") == 0


# --------------------------------------------------------------------------- hosts and ids


def test_host_bytes_v4_v6() -> None:
    assert host_bytes("10.0.0.5", 10911) == bytes([10, 0, 0, 5]) + struct.pack(">i", 10911)
    v6 = host_bytes("::1", 9876)
    assert len(v6) == 20 and v6[:16] == b"\x00" * 15 + b"\x01"
    assert parse_host(host_bytes("10.0.0.5", 10911)) == ("10.0.0.5", 10911)
    assert parse_host(v6) == ("::1", 9876)
    with pytest.raises(ValueError, match="not an IPv4/IPv6 address"):
        host_bytes("broker-a", 1)
    with pytest.raises(ValueError, match="8 or 20 bytes"):
        parse_host(b"\x00" * 7)


def test_offset_msg_id_v4_round_trip() -> None:
    mid = offset_msg_id(host_bytes("192.168.1.20", 10911), 123456789)
    assert mid == "C0A80114" + "00002A9F" + "00000000075BCD15"
    assert mid.isupper() and len(mid) == 32
    assert decode_offset_msg_id(mid) == ("192.168.1.20", 10911, 123456789)
    assert decode_offset_msg_id(mid.lower()) == ("192.168.1.20", 10911, 123456789)


def test_offset_msg_id_v6_round_trip() -> None:
    mid = offset_msg_id(host_bytes("fe80::1", 10911), 2**40)
    assert len(mid) == 56
    assert decode_offset_msg_id(mid) == ("fe80::1", 10911, 2**40)


def test_offset_msg_id_rejects_bad_ids() -> None:
    with pytest.raises(ValueError, match="32 or 56 hex digits"):
        decode_offset_msg_id("ABC")
    with pytest.raises(ValueError, match="not hex"):
        decode_offset_msg_id("Z" * 32)


def test_uniq_id_java_layout() -> None:
    gen = UniqIdGenerator(ip="10.1.2.3", pid=0x12345, seed=1)
    a, b = gen.create(), gen()
    assert re.fullmatch(r"[0-9A-F]{32}", a)
    assert a[:8] == "0A010203" and a[8:12] == "2345"
    assert a[:20] == b[:20] == gen.prefix
    assert int(b[28:], 16) == (int(a[28:], 16) + 1) & 0xFFFF
    ms_in_month = int(a[20:28], 16)
    assert 0 <= ms_in_month < 32 * 24 * 3600 * 1000
    ids = {gen() for _ in range(1000)}
    assert len(ids) == 1000
    assert re.fullmatch(r"[0-9A-F]{32}", UniqIdGenerator("127.0.0.1")())


# --------------------------------------------------------------------------- records


def _sample(**kw: object) -> bytes:
    args: dict[str, object] = dict(
        queue_id=3,
        flag=7,
        properties={Prop.TAGS: "TagA", Prop.KEYS: "k1 k2", Prop.UNIQ_KEY: "0A0102030405060708090A0B0C0D0E0F"},
        queue_offset=42,
        commit_log_offset=4096,
        born_timestamp=1_700_000_000_000,
        born_host="10.0.0.9:50000",
        store_timestamp=1_700_000_000_123,
        store_host="10.0.0.5:10911",
        reconsume_times=2,
        prepared_transaction_offset=0,
    )
    args.update(kw)
    return encode_message("TopicTest", b"hello world", **args)  # type: ignore[arg-type]


def test_record_layout_v4() -> None:
    rec = _sample()
    props = rec[91 + 11 + 9 :]
    assert len(rec) == 91 + len(b"hello world") + len(b"TopicTest") + len(props)
    total, magic, crc, qid, flag, qoff, phy, sysflag = struct.unpack_from(">iiiiiqqi", rec)
    assert (total, magic, crc, qid, flag, qoff, phy, sysflag) == (
        len(rec), MAGIC_MESSAGE, body_crc(b"hello world"), 3, 7, 42, 4096, 0
    )
    assert rec[48:56] == host_bytes("10.0.0.9", 50000)
    assert rec[64:72] == host_bytes("10.0.0.5", 10911)
    assert struct.unpack_from(">i", rec, 84)[0] == 11
    assert rec[88:99] == b"hello world"
    assert rec[99] == 9 and rec[100:109] == b"TopicTest"


def test_record_round_trip_v4() -> None:
    msg = decode_message(_sample())
    assert msg.topic == "TopicTest" and msg.body == b"hello world"
    assert (msg.queue_id, msg.flag, msg.queue_offset, msg.commit_log_offset) == (3, 7, 42, 4096)
    assert msg.sys_flag == 0 and msg.reconsume_times == 2
    assert msg.born_host == "10.0.0.9:50000" and msg.store_host == "10.0.0.5:10911"
    assert msg.born_timestamp == 1_700_000_000_000 and msg.store_timestamp == 1_700_000_000_123
    assert msg.tags == "TagA" and msg.keys == "k1 k2"
    assert msg.msg_id == "0A0102030405060708090A0B0C0D0E0F"
    assert msg.offset_msg_id == offset_msg_id(host_bytes("10.0.0.5", 10911), 4096)
    assert decode_offset_msg_id(msg.offset_msg_id) == ("10.0.0.5", 10911, 4096)
    assert msg.store_size == len(_sample()) and msg.body_crc == body_crc(b"hello world")


def test_msg_id_falls_back_to_offset_id() -> None:
    msg = decode_message(_sample(properties={Prop.TAGS: "x"}))
    assert msg.msg_id == msg.offset_msg_id
    built = MessageExt(store_host="10.0.0.5:10911", commit_log_offset=4096)
    assert built.msg_id == msg.offset_msg_id


@pytest.mark.parametrize(
    ("born", "store", "bits"),
    [
        ("[::1]:5000", "10.0.0.5:10911", SysFlag.BORNHOST_V6),
        ("10.0.0.9:5000", "[2001:db8::5]:10911", SysFlag.STOREHOST_V6),
        ("[::1]:5000", "[2001:db8::5]:10911", SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6),
    ],
)
def test_record_round_trip_v6(born: str, store: str, bits: int) -> None:
    rec = _sample(born_host=born, store_host=store)
    msg = decode_message(rec)
    assert msg.sys_flag & (SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6) == bits
    assert msg.born_host == born.replace("[", "").replace("]", "")
    assert msg.store_host == store.replace("[", "").replace("]", "")
    assert msg.body == b"hello world" and msg.topic == "TopicTest" and msg.tags == "TagA"
    extra = 12 * bin(bits).count("1")
    assert len(rec) == 91 + extra + 11 + 9 + len(encode_properties_of(rec, extra))
    if bits & SysFlag.STOREHOST_V6:
        assert len(msg.offset_msg_id) == 56
        assert decode_offset_msg_id(msg.offset_msg_id)[2] == 4096


def encode_properties_of(rec: bytes, extra: int) -> bytes:
    return rec[91 + extra + 11 + 9 :]


@pytest.mark.parametrize(
    "raw", ["TAGS\x01A\x02KEYS\x01k\x02", "TAGS\x01A\x02KEYS\x01k", "TAGS\x01A\x02\x02KEYS\x01k\x02EMPTY\x01\x02"]
)
def test_properties_both_trailing_styles(raw: str) -> None:
    msg = decode_message(_sample(properties=raw))
    assert msg.properties == {"TAGS": "A", "KEYS": "k"}


def test_no_properties() -> None:
    msg = decode_message(_sample(properties=""))
    assert msg.properties == {} and msg.tags is None


def test_compressed_body_inflated_or_kept() -> None:
    body = b"x" * 10000
    z = compress_body(body)
    rec = encode_message("T", z, sys_flag=SysFlag.COMPRESSED | 0x300)
    assert decode_message(rec).body == body
    assert decode_message(rec, decompress=False).body == z
    assert decode_message(rec).sys_flag & SysFlag.COMPRESSED
    assert decompress_body(z) == body
    with pytest.raises(MessageDecodeError, match="cannot inflate"):
        decode_message(encode_message("T", b"not zlib", sys_flag=SysFlag.COMPRESSED))
    with pytest.raises(MessageDecodeError, match="cannot inflate an LZ4 body"):  # a zlib body flagged LZ4
        decode_message(encode_message("T", z, sys_flag=SysFlag.COMPRESSED | 0x100))
    with pytest.raises(MessageDecodeError, match="compression type 0x400 is not one of"):
        decode_message(encode_message("T", z, sys_flag=SysFlag.COMPRESSED | 0x400))


def test_decode_many_back_to_back() -> None:
    recs = [_sample(queue_offset=i, commit_log_offset=1000 * i) for i in range(32)]
    msgs = decode_messages(b"".join(recs))
    assert [m.queue_offset for m in msgs] == list(range(32))
    assert decode_messages(memoryview(b"".join(recs)))[5].commit_log_offset == 5000
    assert decode_messages(b"") == []


def test_malformed_records() -> None:
    rec = _sample()
    with pytest.raises(MessageDecodeError, match="truncated"):
        decode_messages(rec[:50])
    with pytest.raises(MessageDecodeError, match="TOTALSIZE"):
        decode_messages(rec + rec[:-1])
    bad = bytearray(rec)
    struct.pack_into(">i", bad, 84, 10_000)
    with pytest.raises(MessageDecodeError, match="body length 10000 overruns"):
        decode_message(bytes(bad))
    bad = bytearray(rec)
    struct.pack_into(">i", bad, 0, len(rec) + 5)
    with pytest.raises(MessageDecodeError):
        decode_message(bytes(bad) + b"\x00" * 5)
    with pytest.raises(MessageDecodeError, match="trailing bytes"):
        decode_message(rec + b"\x00")


def test_encode_message_limits() -> None:
    with pytest.raises(ValueError, match="topic of 128 bytes"):
        encode_message("t" * 128, b"")
    with pytest.raises(ValueError, match="properties of"):
        encode_message("t", b"", properties={"K": "v" * 40000})


_hosts = st.sampled_from(["127.0.0.1:1", "10.0.0.5:10911", "[::1]:9876", "[2001:db8::1]:65535"])


@given(
    topic=st.text(min_size=1, max_size=40).filter(lambda t: len(t.encode()) <= 127),
    body=st.binary(max_size=300),
    props=st.dictionaries(
        st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                min_size=1, max_size=8),
        st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                min_size=1, max_size=12),
        max_size=5,
    ),
    ints=st.tuples(st.integers(0, 2**31 - 1), st.integers(-(2**31), 2**31 - 1), st.integers(0, 2**63 - 1),
                   st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)),
    born=_hosts,
    store=_hosts,
)
@settings(max_examples=200)
def test_record_round_trip_property(
    topic: str, body: bytes, props: dict[str, str], ints: tuple[int, int, int, int, int], born: str, store: str
) -> None:
    qid, flag, qoff, phy, ts = ints
    rec = encode_message(topic, body, queue_id=qid, flag=flag, properties=props, queue_offset=qoff,
                         commit_log_offset=phy, born_timestamp=ts, store_timestamp=ts, born_host=born,
                         store_host=store)
    (msg,) = decode_messages(rec)
    assert (msg.topic, msg.body, msg.properties) == (topic, body, props)
    assert (msg.queue_id, msg.flag, msg.queue_offset, msg.commit_log_offset) == (qid, flag, qoff, phy)
    assert msg.born_host == born.replace("[", "").replace("]", "")
    assert msg.store_host == store.replace("[", "").replace("]", "")
    assert decode_offset_msg_id(msg.offset_msg_id)[2] == phy
    assert msg.store_size == len(rec)


# --------------------------------------------------------------------------- batch bodies


def test_batch_round_trip_and_layout() -> None:
    items = [(b"one", 0, "TAGS\x01a\x02UNIQ_KEY\x01X"), (b"", 5, ""), (b"three" * 100, 1, "KEYS\x01k")]
    data = encode_batch(items)
    assert struct.unpack_from(">iiiii", data) == (20 + 3 + 2 + len(items[0][2]), 0, 0, 0, 3)
    assert decode_batch(data) == items
    assert decode_batch(memoryview(data)) == items
    assert decode_batch(b"") == []


_utf8_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)


@given(st.lists(st.tuples(st.binary(max_size=100), st.integers(-(2**31), 2**31 - 1), _utf8_text), max_size=10))
@settings(max_examples=150)
def test_batch_round_trip_property(items: list[tuple[bytes, int, str]]) -> None:
    assert decode_batch(encode_batch(items)) == items


def test_batch_malformed() -> None:
    data = encode_batch([(b"abc", 0, "P\x01v"), (b"def", 0, "")])
    with pytest.raises(BatchError, match="member 1 at byte 28 has size 25 but 22 bytes remain"):
        decode_batch(data[:-3])
    with pytest.raises(BatchError, match="member 1 at byte 28 truncated"):
        decode_batch(data[:38])
    with pytest.raises(BatchError, match="member 0 .* has size"):
        decode_batch(data[:25])
    bad = bytearray(data)
    struct.pack_into(">i", bad, 16, 500)
    with pytest.raises(BatchError, match="body length 500 overruns"):
        decode_batch(bytes(bad))
    bad = bytearray(data)
    struct.pack_into(">i", bad, 0, struct.unpack_from(">i", data)[0] + 1)
    with pytest.raises(BatchError):
        decode_batch(bytes(bad))
    with pytest.raises(BatchError, match="truncated"):
        decode_batch(b"\x00\x00\x00")


def test_record_properties_parsed_on_first_use_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer that never reads properties does not pay for parsing them; reading them once
    parses once, and the result is what an eager parse gives (equality, pickling, assignment)."""
    import pickle

    from rmq.protocol import message as message_mod

    props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "7F00000100002A9F0000000000000001", "a": "b"}
    data = b"".join(encode_message("T", f"m{i}".encode(), queue_offset=i, properties=props) for i in range(3))
    calls = []
    real = message_mod._decode_props  # decode_properties, or its compiled twin (_fastframe.decode_props)
    monkeypatch.setattr(message_mod, "_decode_props", lambda raw: calls.append(raw) or real(raw))
    msgs = decode_messages(data)
    assert calls == [] and [m.body for m in msgs] == [b"m0", b"m1", b"m2"]
    first = msgs[0]
    assert first.properties == props and first.tags == "TagA" and first.keys == "k1 k2"
    assert first.msg_id == props["UNIQ_KEY"] and len(calls) == 1
    assert first.properties is first.properties and len(calls) == 1
    unread = pickle.loads(pickle.dumps(msgs[1]))  # pickled before its properties were read
    assert unread.properties == props and unread == msgs[1]
    eager = MessageExt(topic="T", body=b"m2", properties=dict(props), queue_offset=2)
    assert msgs[2].properties == eager.properties
    msgs[2].properties = {"TAGS": "other"}
    assert msgs[2].tags == "other" and msgs[2].properties == {"TAGS": "other"}
    empty = decode_messages(encode_message("T", b"x"))[0]
    assert empty.properties == {} and empty.tags is None
