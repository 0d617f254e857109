"""The CPU floor of a Python server on this machine, beside rmqd, driven by one client.

    python bench/floor.py [--messages 150000] [--size 1024] [--inflight 32] [--rounds 2]

What does answering one SEND_MESSAGE_V2 cost before a broker does anything? Three servers,
each in its own process, get the same load from ``bench/broker.py``'s client (K requests in
flight on one connection) and the server process's CPU per request is printed:

* ``floor, raw``: an asyncio protocol (uvloop when installed) that cuts frames by their length
  prefix, parses the JSON header (orjson when installed) for the opaque and writes one canned
  response per request, all of a read's answers in one write;
* ``floor, rmq codec``: the same, with rmq's sans-IO ``Session`` decoding requests into
  ``RemotingCommand`` objects and encoding real responses (what every rmqd request pays);
* ``rmqd ASYNC_FLUSH``: the real broker (checks, commitlog append, dispatch, index).

The floors bound what any per-message CPU target can ask of a broker written this way: the
difference between the last line and the second is the broker's own work. Figures are
printed, never asserted; rounds alternate the three to spread the VM's noise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from broker import QUEUES, load_options, process_cpu, throughput  # bench/ is on sys.path when run as a script

_LEN = struct.Struct(">I")
_ANSWER = {"msgId": "7F00000100002A9F0000000000000000", "queueId": "0", "queueOffset": "0"}


def _codec() -> tuple[Any, Any]:
    try:
        import orjson

        return orjson.loads, orjson.dumps
    except ImportError:
        return json.loads, lambda obj: json.dumps(obj, separators=(",", ":")).encode()


class _RawFloor(asyncio.Protocol):
    """Length-prefixed frames in, one canned response per request out; nothing else."""

    def __init__(self) -> None:
        self.buf = b""
        self.loads, self.dumps = _codec()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        out = []
        pos, n = 0, len(buf)
        while n - pos >= 8:
            (length,) = _LEN.unpack_from(buf, pos)
            if n - pos - 4 < length:
                break
            header_len = _LEN.unpack_from(buf, pos + 4)[0] & 0xFFFFFF
            h = self.loads(buf[pos + 8 : pos + 8 + header_len])
            resp = self.dumps({"code": 0, "flag": 1, "opaque": h["opaque"], "language": "JAVA", "version": 0,
                               "extFields": _ANSWER})
            out.append(_LEN.pack(4 + len(resp)) + _LEN.pack(len(resp)) + resp)
            pos += 4 + length
        self.buf = buf[pos:]
        if out:
            self.transport.write(b"".join(out))


class _CodecFloor(asyncio.Protocol):
    """rmq's Session decodes the requests and encodes the answers; no broker behind it."""

    def __init__(self) -> None:
        from rmq.protocol.session import Session

        self.session = Session()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        out: list[bytes] = []
        for event in self.session.receive_data(data):
            cmd = getattr(event, "cmd", None)
            if cmd is None:
                continue
            head, body = self.session.send_response(cmd.response(0, None, dict(_ANSWER)))
            out.append(head)
            if body:
                out.append(body)
        if out:
            self.transport.write(b"".join(out))


def serve(kind: str, port: int) -> None:
    """A floor server on 127.0.0.1:port until stdin closes (the parent's end of the pipe)."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        factory = _RawFloor if kind == "raw" else _CodecFloor
        server = await loop.create_server(factory, "127.0.0.1", port)
        print("ready", flush=True)
        await loop.run_in_executor(None, sys.stdin.read)
        server.close()

    try:
        import uvloop

        uvloop.run(run())
    except ImportError:
        asyncio.run(run())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(addr: str, pid: int, args: argparse.Namespace) -> tuple[float, float]:
    """(requests/s, server CPU µs per request) for one driven run."""
    cpu0 = process_cpu(pid)
    rate, _ = anyio.run(throughput, addr, args.messages, args.size, args.inflight, backend="asyncio",
                        backend_options={"use_uvloop": True})
    return rate, (process_cpu(pid) - cpu0) / (args.messages + QUEUES + 1) * 1e6


def floor_run(kind: str, args: argparse.Namespace) -> tuple[float, float]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--port", str(port)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != b"ready":
            raise RuntimeError(f"floor server {kind} did not start")
        return measure(f"127.0.0.1:{port}", proc.pid, args)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def rmqd_run(args: argparse.Namespace) -> tuple[float, float]:
    from rmq.testing.daemon import RmqdProcess

    with tempfile.TemporaryDirectory(prefix="rmq-floor-") as tmp:
        rmqd = RmqdProcess(Path(tmp), broker_conf={"mappedFileSizeCommitLog": 256 * 1024 * 1024})
        rmqd.start()
        try:
            assert rmqd.proc is not None
            return measure(rmqd.broker_addr, rmqd.proc.pid, args)
        finally:
            rmqd.stop()


def main() -> None:
    ap = load_options(__doc__, 150_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--serve", choices=["raw", "codec"], help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    print(f"server CPU floor: {args.messages:,} SEND_MESSAGE_V2 x {args.size} B, {args.inflight} in flight, "
          f"one connection, {time.strftime('%Y-%m-%d %H:%M')}")
    cases = [("floor, raw", lambda: floor_run("raw", args)), ("floor, rmq codec", lambda: floor_run("codec", args)),
             ("rmqd ASYNC_FLUSH", lambda: rmqd_run(args))]
    for r in range(args.rounds):
        for name, run in cases:
            rate, us = run()
            print(f"  round {r + 1}  {name:<18} {rate:>9,.0f} req/s   server CPU {us:5.1f} µs/request", flush=True)


if __name__ == "__main__":
    main()
