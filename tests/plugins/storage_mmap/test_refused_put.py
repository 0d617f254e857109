"""A put the store refuses takes nothing: no queue offset, no bytes (issue 10: no hole in a queue)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq.kernel.model import MessageRecord, PutStatus

from .conftest import open_store

pytestmark = pytest.mark.anyio


def msg(**kw: object) -> MessageRecord:
    base: dict[str, object] = {"born_host": b"\x7f\x00\x00\x01\x00\x00\x00\x01"}
    base.update(kw)
    return MessageRecord("T", 0, b"body", **base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "bad", [{"flag": 1 << 31}, {"born_timestamp": 1 << 63}, {"reconsume_times": -(1 << 31) - 1}, {"sys_flag": 1 << 32}]
)
async def test_out_of_range_fields_are_refused_without_a_hole(tmp_path: Path, bad: dict[str, int]) -> None:
    async with open_store(tmp_path) as store:
        assert (await store.put_message(msg())).queue_offset == 0
        end = store.max_phy_offset
        r = await store.put_message(msg(**bad))
        assert r.status is PutStatus.MESSAGE_ILLEGAL and "out of range" in r.remark
        assert store.max_phy_offset == end
        r = await store.put_messages([msg(), msg(**bad)])
        assert r.status is PutStatus.MESSAGE_ILLEGAL and store.max_phy_offset == end
        ok = await store.put_message(msg())
        assert ok.status is PutStatus.PUT_OK and ok.queue_offset == 1
        await store.wait_dispatched()
        assert store.get_max_offset("T", 0) == 2
        got = store.get_messages("g", "T", 0, 0, 10)
        assert len(got.messages) == 2 and got.next_begin_offset == 2
