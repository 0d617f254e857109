"""The columnar record decoder agrees with rmq.protocol's MessageExt decoder, field by field."""

from __future__ import annotations

import zlib

import pytest

from rmq.connectors.spark._decode import Columns, RecordError
from rmq.connectors.spark._schema import SYSTEM_PROPERTIES, arrow_schema
from rmq.protocol.message import decode_messages, encode_message

pa = pytest.importorskip("pyarrow")


def _records() -> bytes:
    out = []
    for i in range(40):
        props = {"KEYS": f"k{i} other", "UNIQ_KEY": f"{i:032X}", "TAGS": "TagA" if i % 3 else "TagB", "color": "red"}
        if i % 7 == 0:
            del props["UNIQ_KEY"]  # falls back to the offset message id
        if i % 5 == 0:
            del props["TAGS"]
        if i % 11 == 0:
            props = {"note": "TAGS", "é": "ü"}  # non-ASCII, and a value that spells a name
        body, sys_flag = f"body-{i}".encode() * (i % 4 + 1), 0
        if i % 9 == 0:
            body, sys_flag = zlib.compress(body), 0x1
        host = "[::1]:10911" if i % 13 == 0 else "127.0.0.1:10911"  # IPv6 hosts: the slow layout
        out.append(
            encode_message("T", body, queue_id=3, properties=props, sys_flag=sys_flag,
                           queue_offset=100 + i, commit_log_offset=5000 + 300 * i, born_timestamp=1_700_000_000_000 + i,
                           born_host="[::1]:4000" if i % 13 == 0 else "10.0.0.1:4000",
                           store_timestamp=1_700_000_000_500 + i, store_host=host)
        )
    return b"".join(out)


def test_columns_match_message_ext_decoding() -> None:
    data = _records()
    cols = Columns()
    assert cols.add(data, 0, 1 << 62) == (40, 100, 139)
    batch = cols.to_batch(arrow_schema(True), topic="T", broker="b", queue_id=3, partition=2, born_time=False,
                          system_properties=SYSTEM_PROPERTIES)
    rows = batch.to_pylist()
    for row, m in zip(rows, decode_messages(data), strict=True):
        assert row["value"] == m.body
        assert row["offset"] == m.queue_offset
        assert row["key"] == (m.keys.encode() if m.keys else None)
        assert row["tags"] == m.tags
        assert row["msgId"] == m.msg_id
        assert int(row["timestamp"].timestamp() * 1000) == m.store_timestamp
        assert [(h["key"], h["value"]) for h in row["headers"]] == [
            (k, v.encode()) for k, v in m.properties.items() if k not in SYSTEM_PROPERTIES
        ]
        assert (row["topic"], row["partition"], row["broker"], row["queueId"], row["timestampType"]) == ("T", 2, "b", 3, 1)


def test_range_trimming_tag_recheck_and_born_time() -> None:
    data = _records()
    cols = Columns()
    assert cols.add(data, 110, 120)[0] == 10
    batch = cols.to_batch(arrow_schema(False), topic="T", broker="b", queue_id=3, partition=0, born_time=True,
                          tags={"TagB"})
    assert batch.column("offset").to_pylist() == [112, 118]  # TagB; 115 has no TAGS at all
    assert set(batch.column("timestampType").to_pylist()) == {0}
    assert int(batch.to_pylist()[0]["timestamp"].timestamp() * 1000) == 1_700_000_000_012


def test_truncated_body_is_an_error() -> None:
    data = _records()
    with pytest.raises(RecordError, match="truncated|do not add up"):
        Columns().add(data[:-5], 0, 1 << 62)


# ----------------------------------------------------------------------------- hostile bodies


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=400), cut=st.integers(0, 2000), flip=st.integers(0, 255))
def test_any_pull_body_decodes_or_raises_record_error(data: bytes, cut: int, flip: int) -> None:
    """Peer bytes (garbage, or real records truncated / with one byte changed) never raise anything else."""
    real = bytearray(_records()[:2000])
    real[cut % len(real)] ^= flip
    for body in (data, bytes(real), bytes(real[:cut])):
        cols = Columns()
        try:
            cols.add(body, 0, 1 << 62)
        except RecordError:
            pass


def test_a_zip_bomb_body_is_a_record_error() -> None:
    bomb = zlib.compress(b"\0" * (80 * 1024 * 1024), 9)
    rec = encode_message("T", bomb, queue_id=0, properties={}, sys_flag=0x1, queue_offset=0, commit_log_offset=0,
                         born_timestamp=0, born_host="10.0.0.1:1", store_timestamp=0, store_host="127.0.0.1:1")
    with pytest.raises(RecordError, match="inflates beyond"):
        Columns().add(rec, 0, 10)
