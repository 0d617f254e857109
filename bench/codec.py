"""Codec and loopback transport figures: ``python bench/codec.py [--seconds S] [--split] [--no-uvloop]``.

Prints µs/op and ops/s for encode/decode of a typical SEND (code 10) request and a
PULL response carrying 32 × 1 KiB records, then request/response round trips
over one loopback connection with 1 and 32 requests in flight (asyncio and
uvloop when installed). ``--split`` runs the server in a child process so
client and server do not share one core's event loop.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import struct
import time
from collections.abc import Callable
from typing import Any

import anyio

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient, TcpRemotingServer
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import Prop, encode_properties
from rmq.protocol.frame import CODEC, FrameDecoder, encode
from rmq.protocol.headers import SEND_LONG, SEND_V2
from rmq.protocol.message import (
    RECORDS,
    UniqIdGenerator,
    decode_messages,
    decode_messages_pure,
    encode_message,
)

create_uniq_id = UniqIdGenerator("127.0.0.1")
SEND_V2_LETTERS = dict(zip(SEND_LONG, SEND_V2, strict=True))  # SendMessageRequestHeaderV2's one-letter keys


def send_request() -> RemotingCommand:
    props = encode_properties({Prop.TAGS: "TagA", Prop.KEYS: "order-1", Prop.UNIQ_KEY: create_uniq_id(),
                               Prop.WAIT: "true"})
    ext = {
        "producerGroup": "please_rename_unique_group_name", "topic": "TopicTest", "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4", "queueId": "1", "sysFlag": "0", "bornTimestamp": "1700000000000",
        "flag": "0", "properties": props, "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, body=b"x" * 1024, opaque=12345)


def cpp_send_frame() -> bytes:
    """A SEND as C++ 1.2.3 writes it: ints as JSON numbers in extFields, "0"/"1" booleans, trailing newline."""
    props = encode_properties({Prop.TAGS: "TagA", Prop.KEYS: "order-1", Prop.UNIQ_KEY: create_uniq_id()}) + "\x02"
    header = json.dumps({
        "code": 10, "extFields": {
            "AccessKey": "", "OnsChannel": "", "Signature": "", "batch": "0", "bornTimestamp": "1700000000000",
            "defaultTopic": "TBW102", "defaultTopicQueueNums": 4, "flag": 0, "producerGroup": "cpp_group",
            "properties": props, "queueId": 1, "reconsumeTimes": 0, "sysFlag": 0, "topic": "TopicTest",
            "unitMode": "0"},
        "flag": 0, "language": "CPP", "opaque": 12345, "remark": "", "version": 63,
    }, separators=(",", ":")).encode() + b"\n"
    body = b"x" * 1024
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


def pull_response() -> RemotingCommand:
    records = b"".join(
        encode_message(
            "TopicTest", b"y" * 1024, queue_id=1, queue_offset=i, commit_log_offset=i * 1200,
            properties={Prop.TAGS: "TagA", Prop.UNIQ_KEY: create_uniq_id()}, born_host="10.0.0.9:50000",
            store_host="10.0.0.5:10911", born_timestamp=1_700_000_000_000, store_timestamp=1_700_000_000_001,
        )
        for i in range(32)
    )
    req = RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque=99)
    return req.response(ext={"suggestWhichBrokerId": "0", "nextBeginOffset": "32", "minOffset": "0",
                             "maxOffset": "32"}, body=records)


def timeit(fn: Callable[[], Any], seconds: float) -> float:
    """µs per call, best of 3 runs of ~seconds/3 each."""
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t
        if dt > 0.05:
            break
        n *= 2
    runs = []
    per_run = max(1, int(n * (seconds / 3) / dt))
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(per_run):
            fn()
        runs.append((time.perf_counter() - t) / per_run)
    return min(runs) * 1e6


def row(name: str, us: float, extra: str = "") -> None:
    print(f"  {name:<44} {us:9.2f} µs/op {1e6 / us:12,.0f} ops/s {extra}")


def bench_codec(seconds: float) -> None:
    print(f"codec {CODEC} (single thread, one frame per call; RMQ_PURE=1 for the pure path)")
    for label, cmd in (("SEND code 10, 1 KiB body", send_request()), ("PULL response, 32 x 1 KiB records",
                                                                          pull_response())):
        frame = encode(cmd)
        row(f"encode {label}", timeit(lambda c=cmd: encode(c), seconds), f"({len(frame)} B frame)")
        dec = FrameDecoder()
        row(f"decode {label}", timeit(lambda f=frame, d=dec: d.feed(f), seconds))
    v2 = send_request()
    v2.code = RequestCode.SEND_MESSAGE_V2
    v2.ext = {SEND_V2_LETTERS.get(k, k): v for k, v in v2.ext.items()}
    dec = FrameDecoder()
    v2_frame = encode(v2)
    row("decode SEND_MESSAGE_V2 (310), 1 KiB body", timeit(lambda f=v2_frame, d=dec: d.feed(f), seconds))
    cpp = cpp_send_frame()
    dec = FrameDecoder()
    row("decode SEND code 10, C++ 1.2.3 header", timeit(lambda f=cpp, d=dec: d.feed(f), seconds))
    body = pull_response().body
    for label, fn in ((f"decode_messages ({RECORDS})", decode_messages), ("decode_messages_pure", decode_messages_pure)):
        us = timeit(lambda f=fn: f(body), seconds)
        row(f"{label}, 32 records (client side)", us, f"({us / 32:.2f} µs/record)")
        us = timeit(lambda f=fn: [m.tags for m in f(body)], seconds)  # what a tag subscription's re-filter reads
        row(f"{label} + each record's tags", us, f"({us / 32:.2f} µs/record)")
    frames = encode(send_request()) * 64
    dec = FrameDecoder()
    us = timeit(lambda: dec.feed(frames), seconds) / 64
    row("decode SEND, 64 frames per chunk (per frame)", us)


async def _echo(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(ext={"msgId": "0A00000500002A9F0000000000000000", "queueId": "1", "queueOffset": "7"})


def _serve_forever(port_q: Any, use_uvloop: bool) -> None:
    async def main() -> None:
        server = TcpRemotingServer(RemotingConfig(host="127.0.0.1", port=0, name="bench"), _echo)
        async with anyio.create_task_group() as tg:
            port = await tg.start(server.serve)
            port_q.put(port)
            await anyio.sleep_forever()

    anyio.run(main, backend_options={"use_uvloop": use_uvloop})


async def _round_trips(port: int, inflight: int, seconds: float) -> tuple[float, float, float, int]:
    addr = f"127.0.0.1:{port}"
    async with TcpRemotingClient(RemotingConfig(name="bench")) as client:
        conn = await client.connection(addr)
        lat: list[float] = []
        stop = time.perf_counter() + seconds
        warm = time.perf_counter() + min(0.3, seconds / 5)

        async def worker() -> None:
            while True:
                t = time.perf_counter()
                if t >= stop:
                    return
                await conn.send_request(send_request(), 5)
                if t >= warm:
                    lat.append(time.perf_counter() - t)

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(inflight):
                tg.start_soon(worker)
        elapsed = time.perf_counter() - max(t0, warm)
        lat.sort()
        return (len(lat) / elapsed, statistics.median(lat) * 1e6, lat[int(len(lat) * 0.99)] * 1e6, len(lat))


async def _loopback_in_process(inflight: int, seconds: float) -> tuple[float, float, float, int]:
    server = TcpRemotingServer(RemotingConfig(host="127.0.0.1", port=0, name="bench"), _echo)
    async with anyio.create_task_group() as tg:
        port = await tg.start(server.serve)
        try:
            return await _round_trips(port, inflight, seconds)
        finally:
            await server.aclose()
            tg.cancel_scope.cancel()


def bench_loopback(seconds: float, split: bool, backends: list[tuple[str, bool]]) -> None:
    where = "server in a child process" if split else "client and server in one event loop"
    print(f"loopback round trips, SEND request 1 KiB -> response, one connection ({where})")
    for label, use_uvloop in backends:
        proc = None
        port = 0
        if split:
            ctx = multiprocessing.get_context("spawn")
            q = ctx.Queue()
            proc = ctx.Process(target=_serve_forever, args=(q, use_uvloop), daemon=True)
            proc.start()
            port = q.get(timeout=20)
        try:
            for inflight in (1, 32):
                if split:
                    rps, p50, p99, n = anyio.run(_round_trips, port, inflight, seconds,
                                                 backend_options={"use_uvloop": use_uvloop})
                else:
                    rps, p50, p99, n = anyio.run(_loopback_in_process, inflight, seconds,
                                                 backend_options={"use_uvloop": use_uvloop})
                print(f"  {label:<8} in-flight {inflight:>2}: {rps:10,.0f} req/s   p50 {p50:8.1f} µs"
                      f"   p99 {p99:8.1f} µs   (n={n})")
        finally:
            if proc is not None:
                proc.terminate()
                proc.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0, help="measuring time per figure")
    ap.add_argument("--split", action="store_true", help="run the loopback server in a child process")
    ap.add_argument("--no-uvloop", action="store_true")
    ap.add_argument("--codec-only", action="store_true")
    args = ap.parse_args()
    bench_codec(args.seconds)
    if args.codec_only:
        return
    backends = [("asyncio", False)]
    if not args.no_uvloop:
        try:
            import uvloop  # noqa: F401

            backends.append(("uvloop", True))
        except ImportError:
            print("  (uvloop not installed)")
    bench_loopback(args.seconds, args.split, backends)


if __name__ == "__main__":
    main()
