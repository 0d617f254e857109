"""RocketMQ 5 gRPC vs remoting on one rmqd, in one run: produce rate and latency, receive + ack rate.

    python bench/grpc.py [--count 3000] [--size 1024]

gRPC: the official Python 5.x SDK (rocketmq-python-client 5.1.2, from ``.venv5``; ``make install-test``
makes it): sequential ``send`` then SimpleConsumer ``receive(32)`` + ``ack`` per message.
Remoting: rmq's asyncio client doing the same, sequential ``Producer.send`` then ``SimpleConsumer``
(POP over remoting) receive + ack. Both clients are Python, so the figures compare the two
protocols through the same broker, not the two SDKs' speed alone. Figures only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from rmq.client import Admin, Message, Producer, SimpleConsumer
from rmq.testing.daemon import RmqdProcess

ROOT = Path(__file__).resolve().parents[1]


def pct(v: list[float], q: float) -> float:
    s = sorted(v)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


async def remoting(ns: str, n: int, size: int) -> dict[str, float]:
    body = b"x" * size
    async with Admin(ns) as a:
        await a.create_topic("BenchRem", 4)
    lat = []
    async with Producer("BENCH_REM_P", ns) as p:
        t0 = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            await p.send(Message("BenchRem", body))
            lat.append((time.perf_counter() - t) * 1000)
        send_s = time.perf_counter() - t0
    acks = []
    got = 0
    async with SimpleConsumer("BENCH_REM_C", ns, subscriptions={"BenchRem": "*"}, await_duration=2) as c:
        t0 = time.perf_counter()
        while got < n and time.perf_counter() - t0 < 120:
            for m in await c.receive(32, 30):
                t = time.perf_counter()
                await c.ack(m)
                acks.append((time.perf_counter() - t) * 1000)
                got += 1
        recv_s = time.perf_counter() - t0
    return {"send_rate": n / send_s, "send_p50": pct(lat, .5), "send_p99": pct(lat, .99),
            "recv_rate": got / recv_s, "ack_p99": pct(acks, .99)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=3000)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    py5 = ROOT / ".venv5" / "bin" / "python"
    work = Path(tempfile.mkdtemp(prefix="rmq-bench-grpc-"))
    proc = RmqdProcess(work, broker_conf={"mappedFileSizeCommitLog": 256 << 20})
    try:
        proc.start()

        async def mk() -> None:
            async with Admin(proc.namesrv_addr) as a:
                await a.create_topic("BenchGrpc", 4)

        anyio.run(mk)
        cfg = {"mode": "bench", "endpoint": proc.grpc_endpoint, "topic": "BenchGrpc", "group": "BENCH_GRPC_C",
               "count": args.count, "size": args.size}
        out = subprocess.run([str(py5), str(ROOT / "tests" / "compat" / "grpcworker.py"), json.dumps(cfg)],
                             capture_output=True, text=True, timeout=600)
        g = next(json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith('{"send_rate"'))
        r = anyio.run(remoting, proc.namesrv_addr, args.count, args.size)
        print(f"gRPC (5.x SDK)     send {g['send_rate']:7,.0f} msg/s  p50 {pct(g['send_lat'], .5):5.2f} ms  "
              f"p99 {pct(g['send_lat'], .99):5.2f} ms   receive+ack {g['recv_rate']:7,.0f} msg/s  "
              f"ack p99 {pct(g['ack_lat'], .99):5.2f} ms")
        print(f"remoting (rmq)     send {r['send_rate']:7,.0f} msg/s  p50 {r['send_p50']:5.2f} ms  "
              f"p99 {r['send_p99']:5.2f} ms   receive+ack {r['recv_rate']:7,.0f} msg/s  ack p99 {r['ack_p99']:5.2f} ms")
        print(f"({args.count} x {args.size} B, one at a time)")
        return 0
    finally:
        proc.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
