"""Bodies RocketMQ 5 producers compress with LZ4 or ZSTD (sysFlag bits 8-10): read back by our consumer
from a real rmqd, refused with a clear error when damaged, oversized or when the optional package is
missing; the decoder fuzzed."""

from __future__ import annotations

import sys
import time
from typing import Any

import anyio
import lz4.frame
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from rmq.client import PullConsumer, PullStatus
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import encode_properties
from rmq.protocol.message import MessageDecodeError, decompress_body
from rmq.testing.daemon import RmqdProcess

LZ4, ZSTD, ZLIB = 0x1 | 0x100, 0x1 | 0x200, 0x1 | 0x300
PAYLOAD = b"rocketmq 5 compresses bodies over 4 KiB " * 200


def test_each_algorithm_round_trips() -> None:
    assert decompress_body(lz4.frame.compress(PAYLOAD), sys_flag=LZ4) == PAYLOAD
    assert decompress_body(zstandard.ZstdCompressor().compress(PAYLOAD), sys_flag=ZSTD) == PAYLOAD
    import zlib

    assert decompress_body(zlib.compress(PAYLOAD), sys_flag=ZLIB) == PAYLOAD == decompress_body(zlib.compress(PAYLOAD))


def test_bombs_damage_and_unknown_types_are_clear_errors() -> None:
    big = b"\0" * 200_000
    with pytest.raises(MessageDecodeError, match="LZ4"):
        decompress_body(lz4.frame.compress(big), max_size=1000, sys_flag=LZ4)
    with pytest.raises(MessageDecodeError, match="beyond 1000"):
        decompress_body(zstandard.ZstdCompressor().compress(big), max_size=1000, sys_flag=ZSTD)
    with pytest.raises(MessageDecodeError, match="cannot inflate an LZ4 body"):
        decompress_body(b"not lz4 at all", sys_flag=LZ4)
    with pytest.raises(MessageDecodeError, match="ZSTD"):
        decompress_body(b"not zstd", sys_flag=ZSTD)
    with pytest.raises(MessageDecodeError, match="truncated"):
        decompress_body(lz4.frame.compress(PAYLOAD)[:50], sys_flag=LZ4)
    with pytest.raises(MessageDecodeError, match="compression type 0x400"):
        decompress_body(b"x", sys_flag=0x1 | 0x400)


def test_a_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lz4.frame", None)  # as if lz4 were not installed
    monkeypatch.setitem(sys.modules, "lz4", None)
    with pytest.raises(MessageDecodeError, match=r"pip install 'rmq\[compress\]'"):
        decompress_body(b"whatever", sys_flag=LZ4)


@given(st.binary(max_size=300), st.sampled_from([LZ4, ZSTD, ZLIB]))
def test_decompressor_fuzz(data: bytes, flag: int) -> None:
    try:
        out = decompress_body(data, max_size=100_000, sys_flag=flag)
    except MessageDecodeError:
        return
    assert len(out) <= 100_000


def send_raw(addr: str, topic: str, body: bytes, sys_flag: int) -> None:
    async def go() -> None:
        ext = {"a": "PG5", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": str(sys_flag),
               "g": str(int(time.time() * 1000)), "h": "0", "i": encode_properties({"UNIQ_KEY": f"U{sys_flag}"}),
               "j": "0", "k": "false", "m": "false"}
        async with TcpRemotingClient(RemotingConfig(name="compress")) as c:
            r = await c.invoke(addr, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body), 5)
            assert r.code == 0, r.remark

    anyio.run(go)


def test_consumer_reads_lz4_and_zstd_bodies_from_rmqd(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    send_raw(proc.broker_addr, "Comp5", lz4.frame.compress(PAYLOAD), LZ4)
    send_raw(proc.broker_addr, "Comp5", zstandard.ZstdCompressor().compress(PAYLOAD + b"!"), ZSTD)

    async def read() -> list[Any]:
        async with PullConsumer("CG_COMP", proc.namesrv_addr) as pc:
            mq = next(q for q in await pc.fetch_queues("Comp5") if q.queue_id == 0)
            r = await pc.pull(mq, 0, 8)
            assert r.status is PullStatus.FOUND
            return r.messages

    msgs = anyio.run(read)
    assert [m.body for m in msgs] == [PAYLOAD, PAYLOAD + b"!"]
    assert [m.sys_flag & 0x700 for m in msgs] == [0x100, 0x200]  # stored as sent
