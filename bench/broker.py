"""Broker figures over TCP against a real ``rmqd`` child process (rmq's own codec + remoting client).

    python bench/broker.py [--messages N] [--size BYTES] [--inflight K] [--flush async|sync|both] [--batch B]
    python bench/broker.py --workers W [--messages N] [--flush ...]   aggregate capacity of [broker] workers = W
    python bench/broker.py --pull [--runs R] [--drains D] [--messages N] [--size B]   CPU per pulled message

For each flush mode (ASYNC_FLUSH, SYNC_FLUSH) it starts a fresh rmqd (namesrv +
broker, mmap store in a temp dir) and prints:

* produce throughput: N messages of SIZE bytes with K requests in flight on one connection, one
  message per SEND_MESSAGE_V2, or with ``--batch B`` B messages per SEND_BATCH_MESSAGE (the rmqd
  CPU figure stays per message);
* consume throughput: everything pulled back, one puller per queue, 32 messages per pull;
* single-connection sync send latency p50/p99 (one request at a time);
* the rmqd process's CPU per produced message and its share of one core (on a shared box a figure
  below ~95% means the broker was starved, not saturated);
* long-poll wake-up latency p50/p99: a PULL held with the SUSPEND flag at the queue's
  end, then a send to that queue; time from issuing the send to the held pull's response.

With ``--workers W`` it measures produce capacity only, for rmqd with ``workers = 1`` and then ``workers = W``:
one driver process per worker (N messages each, K in flight on one connection to that worker), all
started at one instant; the aggregate is the sum of the drivers' rates (and, beside it, all messages over
the union of their windows), the CPU per message the workers' CPU over the messages they stored. Then
each worker is saturated alone while the others idle: the sum of those rates is the capacity the workers
would have with a core each (they share nothing). On a machine with fewer free cores than workers +
drivers the drivers and workers share cores: read the figures with the machine's core count.

Only rmq.protocol and the tcp remoting client are used (not rmq.client).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import Prop, encode_properties
from rmq.protocol.message import UniqIdGenerator, encode_batch
from rmq.testing.daemon import RmqdProcess

TOPIC = "BenchTopic"
QUEUES = 8


def send_cmd(body: bytes, queue_id: int, uniq: UniqIdGenerator) -> RemotingCommand:
    """A SEND_MESSAGE_V2 request as a Java producer writes it."""
    props = encode_properties({Prop.TAGS: "TagA", Prop.UNIQ_KEY: uniq(), Prop.WAIT: "true"})
    ext = {"a": "bench_producer", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
           "g": str(time.time_ns() // 1_000_000), "h": "0", "i": props, "j": "0", "k": "false", "m": "false"}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, body)


def batch_cmd(body: bytes, queue_id: int, uniq: UniqIdGenerator, count: int) -> RemotingCommand:
    """A SEND_BATCH_MESSAGE request of ``count`` messages, as a Java producer's ``send(Collection)``."""
    items = [(body, 0, encode_properties({Prop.UNIQ_KEY: uniq(), Prop.WAIT: "true"})) for _ in range(count)]
    cmd = send_cmd(encode_batch(items), queue_id, uniq)
    cmd.code = RequestCode.SEND_BATCH_MESSAGE
    cmd.ext["i"] = ""
    cmd.ext["m"] = "true"
    return cmd


def process_times(pid: int) -> tuple[float, float]:
    """CPU seconds (user, system) used so far by ``pid`` (Linux /proc; zeros elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tck = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tck, int(fields[12]) / tck
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by ``pid``."""
    return sum(process_times(pid))


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


async def create_topic(client: TcpRemotingClient, addr: str) -> None:
    ext = {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES), "writeQueueNums": str(QUEUES),
           "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
    r = await client.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext), 10)
    assert r.code == 0, r


async def pipelined(n: int, inflight: int, send: Callable[[int], Awaitable[RemotingCommand]]) -> tuple[float, int]:
    """``n`` requests, ``inflight`` at a time: ``send(queue_id)`` makes and sends each (queues taken in turn).
    The seconds it took and how many answers were not SUCCESS."""
    counter = iter(range(n))
    errors = 0

    async def worker(k: int) -> None:
        nonlocal errors
        for i in counter:
            if (await send((i + k) % QUEUES)).code != 0:
                errors += 1

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for k in range(inflight):
            tg.start_soon(worker, k)
    return time.perf_counter() - t0, errors


async def throughput(addr: str, n: int, size: int, inflight: int, batch: int = 0) -> tuple[float, float]:
    """Messages and MB per second; ``batch`` > 0 sends them ``batch`` per SEND_BATCH_MESSAGE."""
    body = b"x" * size
    uniq = UniqIdGenerator("127.0.0.1")
    async with TcpRemotingClient(RemotingConfig(name="bench")) as client:
        await create_topic(client, addr)
        for q in range(QUEUES):  # warm-up
            await client.invoke(addr, send_cmd(body, q, uniq), 10)

        def make(q: int) -> RemotingCommand:
            return batch_cmd(body, q, uniq, batch) if batch else send_cmd(body, q, uniq)

        dt, errors = await pipelined(n // batch if batch else n, inflight,
                                     lambda q: client.invoke(addr, make(q), 30))
    if errors:
        print(f"  !! {errors} sends failed")
    return n / dt, n * size / dt / 1e6


async def consume(addr: str, subscription: str = "*") -> tuple[float, int]:
    """Pull every queue of the topic from offset 0 to its end (one puller per queue, 32 per pull)."""
    total = 0
    async with TcpRemotingClient(RemotingConfig(name="bench-consume")) as client:
        async def drain(q: int) -> None:
            nonlocal total
            offset = 0
            while True:
                r = await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                    "consumerGroup": "bench_drain", "topic": TOPIC, "queueId": str(q), "queueOffset": str(offset),
                    "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                    "subscription": subscription, "subVersion": "0", "expressionType": "TAG"}), 30)
                if r.code != 0:
                    return
                offset = int(r.ext["nextBeginOffset"])
                total += _records(r.body)

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for q in range(QUEUES):
                tg.start_soon(drain, q)
        dt = time.perf_counter() - t0
    return total / dt, total


def _records(body: bytes) -> int:
    """Count records by walking TOTALSIZE (no decode: the figure is the broker's, not the client's)."""
    n = pos = 0
    end = len(body)
    while pos + 4 <= end:
        pos += int.from_bytes(body[pos : pos + 4], "big")
        n += 1
    return n


async def sync_latency(addr: str, n: int, size: int) -> list[float]:
    body = b"x" * size
    uniq = UniqIdGenerator("127.0.0.1")
    out = []
    async with TcpRemotingClient(RemotingConfig(name="bench")) as client:
        for i in range(200):
            await client.invoke(addr, send_cmd(body, i % QUEUES, uniq), 10)
        for i in range(n):
            cmd = send_cmd(body, i % QUEUES, uniq)
            t0 = time.perf_counter()
            r = await client.invoke(addr, cmd, 10)
            out.append((time.perf_counter() - t0) * 1e6)
            assert r.code == 0
    return out


async def wake_latency(addr: str, n: int, size: int) -> list[float]:
    body = b"x" * size
    uniq = UniqIdGenerator("127.0.0.1")
    out = []
    queue = 0
    async with TcpRemotingClient(RemotingConfig(name="bench-pull")) as puller, \
            TcpRemotingClient(RemotingConfig(name="bench-send")) as sender:
        r = await sender.invoke(addr, RemotingCommand.request(
            RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": str(queue)}), 10)
        offset = int(r.ext["offset"])
        for _ in range(n):
            pull = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                "consumerGroup": "bench_consumer", "topic": TOPIC, "queueId": str(queue), "queueOffset": str(offset),
                "maxMsgNums": "32", "sysFlag": str(2 | 4), "commitOffset": "0", "suspendTimeoutMillis": "15000",
                "subscription": "*", "subVersion": "0", "expressionType": "TAG"})
            done = anyio.Event()
            result: dict[str, Any] = {}

            async def held(pull: RemotingCommand = pull, done: anyio.Event = done,
                           result: dict[str, Any] = result) -> None:
                result["resp"] = await puller.invoke(addr, pull, 30)
                result["t"] = time.perf_counter()
                done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(held)
                await anyio.sleep(0.005)  # let the pull reach the broker and park
                t0 = time.perf_counter()
                await sender.invoke(addr, send_cmd(body, queue, uniq), 10)
                await done.wait()
            resp = result["resp"]
            assert resp.code == 0, resp
            offset = int(resp.ext["nextBeginOffset"])
            out.append((result["t"] - t0) * 1e6)
    return out


async def run_all(addr: str, args: argparse.Namespace, pid: int) -> dict[str, Any]:
    (u0, s0), t0 = process_times(pid), time.perf_counter()
    tput, mbps = await throughput(addr, args.messages, args.size, args.inflight, args.batch)
    (u1, s1), wall = process_times(pid), time.perf_counter() - t0
    cpu, sys_share = (u1 - u0) + (s1 - s0), (s1 - s0) / max((u1 - u0) + (s1 - s0), 1e-9)
    ctput, consumed = await consume(addr)
    lat = await sync_latency(addr, args.latency_count, args.size)
    wake = await wake_latency(addr, args.wake_count, args.size)
    return {"tput": tput, "mbps": mbps, "cpu_us": cpu / (args.messages + QUEUES) * 1e6, "cpu_share": cpu / wall,
            "sys_share": sys_share, "ctput": ctput, "consumed": consumed, "lat": lat, "wake": wake}


async def pull_cpu(addr: str, args: argparse.Namespace, pid: int) -> dict[str, Any]:
    """``--pull``: store the messages (single sends, tag TagA), wait until the reput dispatched them all, then
    drain the queues ``--drains`` times with each subscription (subscribe-all, then TAG ``TagA``): rate and rmqd
    CPU per message (/proc's CPU figure moves in 10 ms ticks: drain enough for a few hundred of them)."""
    await throughput(addr, args.messages, args.size, args.inflight)
    async with TcpRemotingClient(RemotingConfig(name="bench-offsets")) as client:
        async def stored() -> int:
            total = 0
            for q in range(QUEUES):
                r = await client.invoke(addr, RemotingCommand.request(
                    RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": str(q)}), 10)
                total += int(r.ext["offset"])
            return total

        want = args.messages + QUEUES  # and the warm-up sends
        for _ in range(1200):  # the reput dispatches them in a moment; a minute at most
            if await stored() >= want:
                break
            await anyio.sleep(0.1)
    out: dict[str, Any] = {}
    for sub in ("*", "TagA"):
        cpu0, t0, n = process_cpu(pid), time.perf_counter(), 0
        for _ in range(args.drains):
            n += (await consume(addr, sub))[1]
        out[sub] = (n / (time.perf_counter() - t0), n, (process_cpu(pid) - cpu0) / max(n, 1) * 1e6)
    return out


def main_pull(args: argparse.Namespace) -> None:
    """``--pull``: compiled pulls (the walk, the requests decoded and answered per read) against the compiled walk
    with a task per request (RMQ_PURE_PULL_REQUESTS=1) and RMQ_PURE_PULL=1 (everything else compiled alike),
    alternated."""
    print(f"rmqd pull bench: {args.messages} x {args.size} B stored, drained by 8 pullers (32 per pull), "
          f"{args.runs} alternated runs, {os.cpu_count()} CPUs")
    for run in range(args.runs):
        for path, env in (("compiled", {}), ("per-task", {"RMQ_PURE_PULL_REQUESTS": "1"}), ("pure", {"RMQ_PURE_PULL": "1"})):
            with tempfile.TemporaryDirectory(prefix="rmq-bench-") as tmp:
                proc = RmqdProcess(Path(tmp), env=env, proxy=False, broker_conf={
                    "flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": 256 * 1024 * 1024})
                proc.start(120)
                try:
                    assert proc.proc is not None
                    r = anyio.run(pull_cpu, proc.broker_addr, args, proc.proc.pid, backend="asyncio",
                                  backend_options={} if args.no_uvloop else {"use_uvloop": True})
                finally:
                    proc.stop()
            for sub, (rate, n, cpu) in r.items():
                print(f"  run {run + 1} {path:<9} subscription {sub:<4}  {rate:>9,.0f} msg/s  rmqd CPU {cpu:5.2f} µs/msg"
                      f"  ({n} messages)")


def _drive(addr: str, n: int, size: int, inflight: int, batch: int, start_at: float, uvloop: bool) -> dict[str, Any]:
    """One driver process of ``--workers``: warm up, wait for ``start_at`` (wall clock), send ``n`` messages."""
    async def go() -> dict[str, Any]:
        body = b"x" * size
        uniq = UniqIdGenerator("127.0.0.1")
        async with TcpRemotingClient(RemotingConfig(name="bench")) as client:
            await create_topic(client, addr)
            for q in range(QUEUES):
                await client.invoke(addr, send_cmd(body, q, uniq), 10)
            await anyio.sleep(max(0.0, start_at - time.time()))
            t0 = time.time()

            def make(q: int) -> RemotingCommand:
                return batch_cmd(body, q, uniq, batch) if batch else send_cmd(body, q, uniq)

            dt, errors = await pipelined(n // batch if batch else n, inflight, lambda q: client.invoke(addr, make(q), 30))
        return {"t0": t0, "t1": t0 + dt, "n": n, "errors": errors}

    return anyio.run(go, backend="asyncio", backend_options={"use_uvloop": True} if uvloop else {})


def workers_capacity(args: argparse.Namespace, mode: str, workers: int) -> dict[str, Any]:
    """rmqd with ``workers`` workers, one driver process per worker started together (see the docstring)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with tempfile.TemporaryDirectory(prefix="rmq-bench-") as tmp:
        proc = RmqdProcess(Path(tmp), workers=workers, proxy=False, broker_conf={
            "flushDiskType": mode, "mappedFileSizeCommitLog": 256 * 1024 * 1024})
        proc.start(120)
        try:
            assert proc.proc is not None
            pids = proc.worker_pids() if workers > 1 else {0: proc.proc.pid}
            addrs = [proc.worker_addr(k) for k in range(workers)]
            start_at = time.time() + 8.0  # the drivers' interpreters start, connect and warm up first
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
                futures = [pool.submit(_drive, a, args.messages, args.size, args.inflight, args.batch, start_at,
                                       not args.no_uvloop) for a in addrs]
                time.sleep(max(0.0, start_at - time.time()))
                cpu0 = {k: process_cpu(pid) for k, pid in pids.items()}
                runs = [f.result() for f in futures]
                cpu = {k: process_cpu(pid) - cpu0[k] for k, pid in pids.items()}
                alone = []  # then each worker saturated by its driver while the others idle
                for a in addrs if workers > 1 else ():
                    r = pool.submit(_drive, a, args.messages, args.size, args.inflight, args.batch, time.time() + 3,
                                    not args.no_uvloop).result()
                    alone.append(r["n"] / (r["t1"] - r["t0"]))
        finally:
            proc.stop(timeout=60)
    total = sum(r["n"] for r in runs)
    window = max(r["t1"] for r in runs) - min(r["t0"] for r in runs)
    late = max(r["t0"] for r in runs) - min(r["t0"] for r in runs)
    return {"rates": [r["n"] / (r["t1"] - r["t0"]) for r in runs], "union": total / window, "late": late,
            "cpu_us": [cpu[k] / r["n"] * 1e6 for k, r in enumerate(runs)], "cpu_total_us": sum(cpu.values()) / total * 1e6,
            "errors": sum(r["errors"] for r in runs), "alone": alone}


def main_workers(args: argparse.Namespace, modes: list[str]) -> None:
    per = f", {args.batch} per batch" if args.batch else ""
    print(f"rmqd workers bench: {args.messages} x {args.size} B per driver{per}, {args.inflight} in flight, "
          f"one driver process per worker, {os.cpu_count()} CPUs")
    for mode in modes:
        print(f"{mode}:")
        base = None
        for w in sorted({1, args.workers}):
            r = workers_capacity(args, mode, w)
            agg = sum(r["rates"])
            base = base or agg
            each = ", ".join(f"{x:,.0f}" for x in r["rates"])
            cpus = ", ".join(f"{x:.1f}" for x in r["cpu_us"])
            print(f"  workers={w}: aggregate {agg:>9,.0f} msg/s ({agg / base:.2f}x workers=1; per worker {each}; "
                  f"all over the union window {r['union']:,.0f}, drivers' starts {r['late'] * 1000:.0f} ms apart)")
            print(f"             rmqd CPU {r['cpu_total_us']:.1f} µs/msg (per worker {cpus})"
                  + (f"  !! {r['errors']} sends failed" if r["errors"] else ""))
            if r["alone"]:
                print(f"             each worker alone (the others idle): {', '.join(f'{x:,.0f}' for x in r['alone'])} "
                      f"msg/s, sum {sum(r['alone']):,.0f} ({sum(r['alone']) / base:.2f}x workers=1)")


def load_options(doc: str | None, messages: int, *, inflight: bool = True) -> argparse.ArgumentParser:
    """A bench's command line with the load the sending benches share: --messages (default ``messages``),
    --size and, with ``inflight``, --inflight."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=messages)
    p.add_argument("--size", type=int, default=1024)
    if inflight:
        p.add_argument("--inflight", type=int, default=32)
    return p


def main() -> None:
    p = load_options(__doc__, 100_000)
    p.add_argument("--latency-count", type=int, default=5000)
    p.add_argument("--wake-count", type=int, default=300)
    p.add_argument("--batch", type=int, default=0, help="messages per SEND_BATCH_MESSAGE (0: single sends)")
    p.add_argument("--flush", choices=["async", "sync", "both"], default="both")
    p.add_argument("--no-uvloop", action="store_true", help="client event loop: plain asyncio")
    p.add_argument("--workers", type=int, default=0,
                   help="measure produce capacity of [broker] workers = 1 and = WORKERS (one driver per worker)")
    p.add_argument("--pull", action="store_true", help="rmqd CPU per pulled message, compiled pull walk vs pure")
    p.add_argument("--runs", type=int, default=2, help="with --pull: alternated runs of each path")
    p.add_argument("--drains", type=int, default=5, help="with --pull: drains of all messages per subscription")
    args = p.parse_args()
    if args.pull:
        main_pull(args)
        return
    modes = ["ASYNC_FLUSH", "SYNC_FLUSH"] if args.flush == "both" else [f"{args.flush.upper()}_FLUSH"]
    if args.workers:
        if args.batch:
            args.messages -= args.messages % args.batch
        main_workers(args, modes)
        return
    backend_options = {} if args.no_uvloop else {"use_uvloop": True}
    if args.batch:
        args.messages -= args.messages % args.batch
    per = f", {args.batch} per batch" if args.batch else ""
    print(f"rmqd broker bench: {args.messages} x {args.size} B{per}, {args.inflight} in flight, one connection")
    for mode in modes:
        with tempfile.TemporaryDirectory(prefix="rmq-bench-") as tmp:
            proc = RmqdProcess(Path(tmp), broker_conf={"flushDiskType": mode,
                                                       "mappedFileSizeCommitLog": 256 * 1024 * 1024})
            proc.start()
            try:
                assert proc.proc is not None
                r = anyio.run(run_all, proc.broker_addr, args, proc.proc.pid, backend="asyncio",
                              backend_options=backend_options)
            finally:
                proc.stop()
        print(f"{mode}:")
        print(f"  produce           {r['tput']:>10,.0f} msg/s  ({r['mbps']:.1f} MB/s; rmqd CPU {r['cpu_us']:.1f} µs/msg, "
              f"{r['cpu_share'] * 100:.0f}% of a core, {r['sys_share'] * 100:.0f}% of it in the kernel)")
        print(f"  consume (pull)    {r['ctput']:>10,.0f} msg/s  ({r['consumed']} messages, 8 queues, 32 per pull)")
        print(f"  sync send         p50 {statistics.median(r['lat']):7.0f} µs   p99 {pct(r['lat'], 0.99):7.0f} µs")
        print(f"  long-poll wake    p50 {statistics.median(r['wake']) / 1000:7.2f} ms   "
              f"p99 {pct(r['wake'], 0.99) / 1000:7.2f} ms")


if __name__ == "__main__":
    main()
