"""Replication figures with real rmqd processes: a name server, a master, a slave (loopback, temp stores).

    python bench/replication.py [--messages N] [--size BYTES] [--backlog-mb MB]

Prints, for ASYNC_MASTER and SYNC_MASTER with one slave:

* produce throughput and ack latency p50/p99 at 1 and 32 requests in flight (one connection,
  one message per SEND_MESSAGE_V2);
* catch-up rate: a master holding ``--backlog-mb`` of commitlog, then a fresh slave started;
  MB/s from its connection until its log equals the master's (the HA stream end to end:
  read, 32 KiB frames, verify, append, report).

Figures only: it exits non-zero only when something fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from broker import batch_cmd, create_topic, load_options, pct, pipelined, send_cmd  # noqa: E402

from rmq.kernel.hookspecs.remoting import RemotingConfig  # noqa: E402
from rmq.plugins.remoting_tcp import TcpRemotingClient  # noqa: E402
from rmq.protocol.codes import RequestCode  # noqa: E402
from rmq.protocol.command import RemotingCommand  # noqa: E402
from rmq.protocol.message import UniqIdGenerator  # noqa: E402
from rmq.testing.daemon import Daemons, RmqdProcess  # noqa: E402


async def runtime(addr: str) -> dict[str, str]:
    async with TcpRemotingClient(RemotingConfig(name="bench-info")) as c:
        r = await c.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}), 10)
    return json.loads(r.body)["table"]  # type: ignore[no-any-return]


async def wait_slave(master: RmqdProcess, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while int((await runtime(master.broker_addr)).get("haConnectionCount", 0)) < 1:
        if time.monotonic() > deadline:
            raise RuntimeError("slave never connected")
        await anyio.sleep(0.1)


async def produce(addr: str, n: int, size: int, inflight: int) -> tuple[float, float, float, int]:
    """msgs/s, ack p50 and p99 (ms), failed sends."""
    body = b"x" * size
    uniq = UniqIdGenerator("127.0.0.1")
    lat: list[float] = []
    async with TcpRemotingClient(RemotingConfig(name="bench")) as client:
        await create_topic(client, addr)

        async def timed(q: int) -> RemotingCommand:
            t = time.perf_counter()
            r = await client.invoke(addr, send_cmd(body, q, uniq), 30)
            lat.append(time.perf_counter() - t)
            return r

        dt, errors = await pipelined(n, inflight, timed)
    return n / dt, pct(lat, 0.5) * 1e3, pct(lat, 0.99) * 1e3, errors


async def fill(addr: str, mb: int, size: int = 4096) -> int:
    """Write about ``mb`` MiB with batches (fast), return the master's commitlog end."""
    uniq = UniqIdGenerator("127.0.0.1")
    body = b"y" * size
    batches = mb * 1024 * 1024 // (size * 32) + 1
    async with TcpRemotingClient(RemotingConfig(name="fill")) as client:
        await create_topic(client, addr)
        _, errors = await pipelined(batches, 8, lambda q: client.invoke(addr, batch_cmd(body, q, uniq, 32), 30))
    assert errors == 0, f"{errors} batches refused"
    return int((await runtime(addr))["commitLogMaxOffset"])


def main() -> int:
    ap = load_options(__doc__, 5000, inflight=False)
    ap.add_argument("--backlog-mb", type=int, default=256, help="at most 500 (one 512 MiB segment)")
    run(ap.parse_args())
    return 0


def run(args: argparse.Namespace) -> None:
    """Sends with one slave (ASYNC_MASTER, SYNC_MASTER), then a fresh slave's catch-up; every daemon and
    store goes at the end."""
    work = Path(tempfile.mkdtemp(prefix="rmq-bench-repl-"))
    with Daemons(scratch=work) as procs:  # the stores go at the end: GiB-sized segments
        ns = procs.start(RmqdProcess(work / "ns", broker=False))
        for role in ("ASYNC_MASTER", "SYNC_MASTER"):
            base = {"namesrvAddr": ns.namesrv_addr}
            master = procs.start(RmqdProcess(work / role / "m", namesrv=False, broker_conf={**base, "brokerRole": role}))
            slave = procs.start(RmqdProcess(work / role / "s", namesrv=False,
                                            broker_conf={**base, "brokerRole": "SLAVE", "brokerId": 1}))
            anyio.run(wait_slave, master)
            print(f"{role} + 1 slave, {args.size}-byte messages, {args.messages} per run")
            for inflight in (1, 32):
                rate, p50, p99, errors = anyio.run(produce, master.broker_addr, args.messages, args.size, inflight)
                print(f"  {inflight:>2} in flight: {rate:>9,.0f} msg/s   ack p50 {p50:6.2f} ms   p99 {p99:6.2f} ms"
                      + (f"   ({errors} failed)" if errors else ""))
            slave.stop()
            master.stop()
        # catch-up: a backlog on a master, then a fresh slave
        seg = 512 * 1024 * 1024  # the whole backlog in one segment: a fresh slave starts at its last one
        base = {"namesrvAddr": ns.namesrv_addr, "mappedFileSizeCommitLog": seg}
        master = procs.start(RmqdProcess(work / "catchup" / "m", namesrv=False,
                                         broker_conf={**base, "brokerRole": "ASYNC_MASTER"}))
        end = anyio.run(fill, master.broker_addr, args.backlog_mb)
        start = end - end % seg
        slave = procs.start(RmqdProcess(work / "catchup" / "s", namesrv=False,
                                        broker_conf={**base, "brokerRole": "SLAVE", "brokerId": 1}))
        anyio.run(wait_slave, master)
        t0 = time.perf_counter()
        samples = []
        while True:
            got = int(anyio.run(runtime, slave.broker_addr)["commitLogMaxOffset"])
            samples.append(got)
            if got >= end:
                break
            if time.perf_counter() - t0 > 300:
                raise RuntimeError(f"slave stuck at {got} of {end}")
            time.sleep(0.05)
        dt = time.perf_counter() - t0
        mb = (end - start) / 1e6
        print(f"catch-up: a fresh slave copied {mb:,.1f} MB (the master's last segment of a "
              f"{end / 1e6:,.0f} MB log) in {dt:.2f} s = {mb / dt:,.1f} MB/s")


if __name__ == "__main__":
    sys.exit(main())
