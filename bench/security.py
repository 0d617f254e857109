"""What ACL and TLS cost: produce rate and broker CPU per message, each on vs off, one rmqd each.

    python bench/security.py [--messages 20000] [--inflight 32] [--size 1024]

Four runs against a fresh rmqd (embedded namesrv + broker, ASYNC_FLUSH): plain; ACL on with a
signing client; TLS (permissive port, client with tls=True); ACL + TLS. Rate = messages / wall
time of the send phase (our asyncio client, ``inflight`` sends in flight); CPU = rmqd's user+sys
seconds over the send phase / messages. Figures only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from rmq.client import Message, Producer
from rmq.testing.daemon import RmqdProcess

ACL = "accounts:\n  - accessKey: benchuser\n    secretKey: benchsecret\n    defaultTopicPerm: PUB|SUB\n" \
      "    defaultGroupPerm: SUB\n    admin: true\n"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def produce(ns: str, n: int, inflight: int, size: int, client: dict[str, Any], pid: int) -> tuple[float, float]:
    body = b"x" * size
    async with Producer("BENCH_SEC", ns, **client) as p:
        for _ in range(200):  # warm-up: routes, connections, the TLS certificate
            await p.send(Message("BenchSec", body))
        counter = iter(range(n))
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()

        async def worker() -> None:
            for _ in counter:
                await p.send(Message("BenchSec", body))

        async with anyio.create_task_group() as tg:
            for _ in range(inflight):
                tg.start_soon(worker)
        dt = time.perf_counter() - t0
        return n / dt, (cpu_seconds(pid) - cpu0) / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--inflight", type=int, default=32)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    runs = [("plain", False, False), ("ACL", True, False), ("TLS", False, True), ("ACL+TLS", True, True)]
    base = None
    for name, acl, tls in runs:
        work = Path(tempfile.mkdtemp(prefix="rmq-bench-sec-"))
        conf: dict[str, Any] = {"mappedFileSizeCommitLog": 256 << 20}
        client: dict[str, Any] = {}
        if acl:
            (work / "plain_acl.yml").write_text(ACL)
            conf.update(aclEnable=True, plainAclFile=str(work / "plain_acl.yml"))
            client["credentials"] = ("benchuser", "benchsecret")
        if tls:
            client["tls"] = True
        proc = RmqdProcess(work / "d", broker_conf=conf)
        try:
            proc.start()
            assert proc.proc is not None
            rate, cpu = anyio.run(produce, proc.namesrv_addr, args.messages, args.inflight, args.size, client,
                                  proc.proc.pid)
        finally:
            proc.stop()
            shutil.rmtree(work, ignore_errors=True)
        base = base or rate
        print(f"{name:8s} {rate:9,.0f} msg/s ({rate / base:.2f}x)  broker CPU {cpu:6.1f} us/msg  "
              f"({args.messages} x {args.size} B, {args.inflight} in flight)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
