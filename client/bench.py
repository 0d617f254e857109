"""rmq-bench: producer, consumer and end-to-end latency benchmarks (like RocketMQ's benchmark tools).

    rmq-bench producer -n 127.0.0.1:9876 -t BenchTopic -s 1024 -c 32 -d 10
    rmq-bench producer -n ... -t BenchTopic -b 32            # batches of 32
    rmq-bench producer -n ... --mode async -c 1000           # 1000 sends in flight
    rmq-bench consumer -n ... -t BenchTopic -g bench_group --from first --expect 1000000
    rmq-bench e2e -n ... -t LatTopic --rate 10000 -d 10      # timestamp in the body
    rmq-bench e2e -n ... --rate 10000 --split                # producer in a process of its own

A line per second (TPS, average/max/p99 RT, failures) and a summary at the end.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread

from rmq.client.admin import Admin
from rmq.client.message import Message
from rmq.client.producer import Producer
from rmq.client.push import PushConsumer
from rmq.protocol.names import is_system_topic

_TS = struct.Struct(">q")


class Stats:
    """Per-second and total counters with latency samples (ms)."""

    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0
        self.lat: list[float] = []
        self.all_lat: list[float] = []
        self.total_ok = 0
        self.total_failed = 0
        self.start = time.perf_counter()
        self.last_tick = self.start
        self.lines: list[str] = []

    def record(self, ms: float, n: int = 1) -> None:
        self.ok += n
        self.lat.append(ms)

    def fail(self, n: int = 1) -> None:
        self.failed += n

    @staticmethod
    def pct(sorted_vals: Sequence[float], p: float) -> float:
        if not sorted_vals:
            return 0.0
        k = min(len(sorted_vals) - 1, max(0, math.ceil(p / 100.0 * len(sorted_vals)) - 1))
        return sorted_vals[k]

    def tick(self, label: str, interval: float) -> str:
        lat = sorted(self.lat)
        self.all_lat.extend(lat)
        self.total_ok += self.ok
        self.total_failed += self.failed
        avg = sum(lat) / len(lat) if lat else 0.0
        line = (
            f"[{time.perf_counter() - self.start:6.1f}s] {label} TPS {self.ok / interval:10.0f}  "
            f"RT avg {avg:7.3f} ms  max {lat[-1] if lat else 0.0:8.3f} ms  p99 {self.pct(lat, 99):7.3f} ms  "
            f"failed {self.failed}"
        )
        self.ok = 0
        self.failed = 0
        self.lat = []
        self.last_tick = time.perf_counter()
        self.lines.append(line)
        return line

    def close(self, label: str, quiet: bool) -> None:
        """The last, partial interval: shown like the others, and counted in the summary (a run shorter
        than a second, or a slow start on a busy machine, still prints its rate line)."""
        line = self.tick(label, max(1e-9, time.perf_counter() - self.last_tick))
        if not quiet:
            print(line, flush=True)

    def summary(self, label: str, elapsed: float, unit: str = "msgs") -> str:
        lat = sorted(self.all_lat)
        avg = sum(lat) / len(lat) if lat else 0.0
        return (
            f"== {label}: {self.total_ok} {unit} in {elapsed:.2f}s = {self.total_ok / max(elapsed, 1e-9):.0f}/s; "
            f"RT avg {avg:.3f} ms, p50 {self.pct(lat, 50):.3f} ms, p99 {self.pct(lat, 99):.3f} ms, "
            f"p99.9 {self.pct(lat, 99.9):.3f} ms, max {lat[-1] if lat else 0.0:.3f} ms; failed {self.total_failed}"
        )


async def _reporter(stats: Stats, label: str, quiet: bool) -> None:
    while True:
        await anyio.sleep(1.0)
        line = stats.tick(label, time.perf_counter() - stats.last_tick)
        if not quiet:
            print(line, flush=True)


async def _ensure_topic(ns: str, topic: str, queues: int, creds: tuple[str, str] | None = None) -> None:
    if queues <= 0 or is_system_topic(topic):
        return  # a broker carries its system topics (BenchmarkTest, the default) and refuses to create them
    async with Admin(ns, credentials=creds) as admin:
        await admin.create_topic(topic, queues)


def _creds(args: argparse.Namespace) -> tuple[str, str] | None:
    if bool(args.access_key) != bool(args.secret_key):
        raise SystemExit("rmq-bench: --access-key and --secret-key go together")
    return (args.access_key, args.secret_key) if args.access_key else None


async def run_producer(args: argparse.Namespace) -> Stats:
    await _ensure_topic(args.namesrv, args.topic, args.queues, _creds(args))
    body = (b"x" * args.size) if args.size > 0 else b""
    stats = Stats()
    stop = time.perf_counter() + args.duration
    async with Producer(args.group, args.namesrv, compress_over=args.compress_over,
                        credentials=_creds(args)) as producer:
        # warm: routes, connections
        await producer.send(Message(args.topic, body, tags=args.tags))

        async def sync_worker() -> None:
            batch = [Message(args.topic, body, tags=args.tags) for _ in range(args.batch)]
            msg = batch[0]
            perf = time.perf_counter
            while perf() < stop:
                t0 = perf()
                try:
                    if args.batch > 1:
                        await producer.send_batch(batch)
                    elif args.mode == "oneway":
                        await producer.send_oneway(msg)
                    else:
                        await producer.send(msg)
                except Exception as exc:  # noqa: BLE001 - counted
                    stats.fail(args.batch)
                    if args.verbose:
                        print("send failed:", exc, file=sys.stderr)
                    continue
                stats.record((perf() - t0) * 1000.0, args.batch)
                if args.mode == "oneway":
                    await anyio.lowlevel.checkpoint()

        async def async_driver() -> None:
            perf = time.perf_counter
            msg = Message(args.topic, body, tags=args.tags)

            def done(result: Any, exc: BaseException | None, t0: float) -> None:
                if exc is not None:
                    stats.fail()
                else:
                    stats.record((perf() - t0) * 1000.0)

            while perf() < stop:
                t0 = perf()
                await producer.send_async(msg, lambda r, e, t0=t0: done(r, e, t0))
            await producer.wait_async_sends()

        t_start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_reporter, stats, "send", args.quiet)
            async with anyio.create_task_group() as workers:
                if args.mode == "async" and args.batch == 1:
                    workers.start_soon(async_driver)
                else:
                    for _ in range(args.concurrency):
                        workers.start_soon(sync_worker)
            elapsed = time.perf_counter() - t_start
            tg.cancel_scope.cancel()
    stats.close("send", args.quiet)
    print(stats.summary(f"producer {args.mode} size={args.size} batch={args.batch} c={args.concurrency}", elapsed))
    return stats


async def run_consumer(args: argparse.Namespace) -> Stats:
    stats = Stats()
    done = anyio.Event()
    first: list[float] = []
    count = 0

    async def listener(msg: Any) -> None:
        nonlocal count
        if not first:
            first.append(time.perf_counter())
        count += 1
        stats.ok += 1
        if args.expect and count >= args.expect:
            done.set()

    async with PushConsumer(
        args.group,
        args.namesrv,
        listener=listener,
        consume_from_where="FIRST_OFFSET" if args.from_where == "first" else "LAST_OFFSET",
        pull_batch_size=args.pull_batch,
        consume_concurrency=args.concurrency,
        credentials=_creds(args),
    ) as consumer:
        consumer.subscribe(args.topic, args.expression)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_reporter, stats, "consume", args.quiet)
            with anyio.move_on_after(args.duration):
                await done.wait()
            tg.cancel_scope.cancel()
    end = time.perf_counter()
    stats.close("consume", args.quiet)
    elapsed = end - (first[0] if first else end)
    stats.total_ok = count
    print(stats.summary(f"consumer (first message to last, {count} msgs)", elapsed))
    return stats


_WARM, _MEASURED = b"w", b"m"  # byte 8 of an e2e body: only measured messages are counted
_E2E_HEAD = struct.Struct(">qcq")  # an e2e body: monotonic send time (ns), the mark, wall-clock send time (ns)


class Stages:
    """Where an e2e message's time went, on the wall clock the broker stamps (ms resolution):
    send → stored (the producer's send, the network, the put) and stored → listener (the reput,
    the long-poll wake, the pull answer, decode, the hand-off to the listener)."""

    def __init__(self) -> None:
        self.to_store: list[float] = []
        self.to_listener: list[float] = []

    def record(self, sent_wall_ns: int, store_ms: int, now_wall_ns: int) -> None:
        self.to_store.append(store_ms - sent_wall_ns / 1e6)
        self.to_listener.append(now_wall_ns / 1e6 - store_ms)

    def line(self) -> str:
        def one(vals: list[float]) -> str:
            v = sorted(vals)
            return f"avg {sum(v) / max(len(v), 1):.2f} p50 {Stats.pct(v, 50):.2f} p99 {Stats.pct(v, 99):.2f}"

        return (f"== stages (ms, the broker's store time has ms resolution): send→stored {one(self.to_store)}; "
                f"stored→listener {one(self.to_listener)}")


async def _paced_sends(producer: Producer, args: argparse.Namespace, seconds: float, mark: bytes,
                       on_sent: Any) -> int:
    """Send at ``args.rate`` for ``seconds`` (send time and ``mark`` in the body); returns how many."""
    tail = b"p" * max(0, args.size - _E2E_HEAD.size)
    clock, wall, head = time.monotonic_ns, time.time_ns, _E2E_HEAD.pack
    t_start = time.perf_counter()
    stop = t_start + seconds
    sent = 0
    while True:
        now = time.perf_counter()
        if now >= stop:
            break
        due = int((now - t_start) * args.rate)
        while sent < due:
            await producer.send_async(Message(args.topic, head(clock(), mark, wall()) + tail), on_sent)
            sent += 1
        await anyio.sleep(0.001)
    await producer.wait_async_sends()
    return sent


def _e2e_producer_process(args: argparse.Namespace, go: Any, result: Any) -> None:
    """The producer half of ``e2e --split``: its own process, so its CPU is not the consumer's."""

    async def run() -> None:
        failed = 0

        def on_sent(_result: Any, exc: BaseException | None) -> None:
            nonlocal failed
            if exc is not None:
                failed += 1

        async with Producer(args.group + "_p", args.namesrv, credentials=_creds(args)) as producer:
            await producer.send(Message(args.topic, _TS.pack(time.monotonic_ns()) + _WARM))  # route, connection
            result.put(("ready", 0, 0))
            await anyio.to_thread.run_sync(go.wait)
            await _paced_sends(producer, args, args.warmup, _WARM, on_sent)
            result.put(("measuring", 0, 0))
            cpu = time.process_time()
            sent = await _paced_sends(producer, args, args.duration, _MEASURED, on_sent)
            result.put(("done", sent, failed, time.process_time() - cpu))

    opts = {"use_uvloop": True} if not args.no_uvloop and importlib.util.find_spec("uvloop") else {}
    anyio.run(run, backend="asyncio", backend_options=opts)


async def run_e2e(args: argparse.Namespace) -> Stats:
    """Produce at a fixed rate and push-consume: latency = receive time - send time in the body.

    A warm-up at the same rate comes first and is not counted (new queue files, first pulls,
    caches). ``--split`` runs the producer in a child process (CLOCK_MONOTONIC is one clock
    for every process of the machine), so the figure is not one saturated client process's
    queueing. Every measured message must arrive: the run waits for the last one (bounded).
    """
    await _ensure_topic(args.namesrv, args.topic, args.queues, _creds(args))
    stats = Stats()
    stages = Stages()
    received = 0

    async def listener(msg: Any) -> None:
        nonlocal received
        body = msg.body
        if body[8:9] == _MEASURED:
            received += 1
            sent, _, sent_wall = _E2E_HEAD.unpack_from(body, 0)
            stats.record((time.monotonic_ns() - sent) / 1e6)
            stages.record(sent_wall, msg.store_timestamp, time.time_ns())

    def on_sent(_result: Any, exc: BaseException | None) -> None:
        if exc is not None:
            stats.fail()

    async with PushConsumer(args.group, args.namesrv, listener=listener, consume_from_where="LAST_OFFSET",
                            credentials=_creds(args)) as consumer:
        consumer.subscribe(args.topic, "*")
        # wait until this consumer owns queues (its rebalance ran)
        with anyio.fail_after(30):
            while not consumer.assignment():  # noqa: ASYNC110 - start-up only
                await anyio.sleep(0.05)
        await anyio.sleep(0.5)
        async with anyio.create_task_group() as tg:
            if args.split:
                sent, elapsed, producer_cpu, cpu = await _e2e_split(args, stats, tg)
            else:
                async with Producer(args.group + "_p", args.namesrv, credentials=_creds(args)) as producer:
                    await producer.send(Message(args.topic, _TS.pack(time.monotonic_ns()) + _WARM))
                    await _paced_sends(producer, args, args.warmup, _WARM, on_sent)
                    tg.start_soon(_reporter, stats, "e2e", args.quiet)
                    t_start = time.perf_counter()
                    cpu = time.process_time()
                    sent = await _paced_sends(producer, args, args.duration, _MEASURED, on_sent)
                    elapsed = min(time.perf_counter() - t_start, args.duration)
                    producer_cpu = 0.0
            with anyio.move_on_after(max(5.0, args.duration)):
                while received + stats.failed + stats.total_failed < sent:  # noqa: ASYNC110 - bounded drain
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
            cpu = time.process_time() - cpu
    stats.close("e2e", args.quiet)
    how = "producer in its own process" if args.split else "producer and consumer in one process"
    missing = sent - received - stats.total_failed
    print(stats.summary(f"end-to-end latency at {args.rate}/s target ({sent} sent, {how})", elapsed)
          + (f"; {missing} not received" if missing else "") + _cpu_line(args.split, sent, cpu, producer_cpu))
    print(stages.line())
    return stats


def _cpu_line(split: bool, sent: int, cpu: float, producer_cpu: float) -> str:
    """CPU per measured message of the client processes (from the first measured send until the last
    arrived): a figure that holds on a loaded machine, where the latencies only say it was loaded."""
    per = 1e6 / max(sent, 1)
    if split:
        return f"; CPU per message: consumer process {cpu * per:.1f} µs, producer process {producer_cpu * per:.1f} µs"
    return f"; CPU per message (producer + consumer, one process): {cpu * per:.1f} µs"


async def _e2e_split(args: argparse.Namespace, stats: Stats, tg: Any) -> tuple[int, float, float, float]:
    """(sent, seconds measured, the producer process's CPU seconds, this process's CPU clock at the start)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    go, result = ctx.Event(), ctx.Queue()
    child = ctx.Process(target=_e2e_producer_process, args=(args, go, result), daemon=True)
    child.start()
    try:
        async def next_state(expect: str, timeout: float) -> tuple[Any, ...]:
            with anyio.fail_after(timeout):
                got = await anyio.to_thread.run_sync(result.get)
            if got[0] != expect:
                raise RuntimeError(f"producer process: expected {expect!r}, got {got!r}")
            return got

        await next_state("ready", 60)
        go.set()
        await next_state("measuring", args.warmup + 30)
        tg.start_soon(_reporter, stats, "e2e", args.quiet)
        t_start = time.perf_counter()
        cpu = time.process_time()
        _, sent, failed, producer_cpu = await next_state("done", args.duration + 60)
        elapsed = min(time.perf_counter() - t_start, args.duration)
        stats.fail(failed)
        return sent, elapsed, producer_cpu, cpu
    finally:
        await anyio.to_thread.run_sync(child.join, 10)
        if child.is_alive():
            child.kill()


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rmq-bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("-n", "--namesrv", default="127.0.0.1:9876", help="name server(s) host:port;host:port")
        p.add_argument("-t", "--topic", default="BenchmarkTest")
        p.add_argument("-d", "--duration", type=float, default=10.0, help="seconds")
        p.add_argument("-q", "--quiet", action="store_true", help="no per-second lines")
        p.add_argument("-v", "--verbose", action="store_true")
        p.add_argument("--no-uvloop", action="store_true")
        p.add_argument("--access-key", default=None, help="ACL: sign requests with this access key")
        p.add_argument("--secret-key", default=None, help="ACL: ... and this secret key")

    p = sub.add_parser("producer", help="send as fast as possible")
    common(p)
    p.add_argument("-g", "--group", default="benchmark_producer")
    p.add_argument("-s", "--size", type=int, default=128, help="body bytes")
    p.add_argument("-c", "--concurrency", type=int, default=32, help="sending tasks (sync/oneway)")
    p.add_argument("-b", "--batch", type=int, default=1, help="messages per batch send (code 320)")
    p.add_argument("--mode", choices=["sync", "async", "oneway"], default="sync")
    p.add_argument("--tags", default=None)
    p.add_argument("--queues", type=int, default=8, help="create the topic with this many queues (0: don't)")
    p.add_argument("--compress-over", type=int, default=4096)

    p = sub.add_parser("consumer", help="push-consume and count")
    common(p)
    p.add_argument("-g", "--group", default="benchmark_consumer")
    p.add_argument("-e", "--expression", default="*")
    p.add_argument("--from", dest="from_where", choices=["first", "last"], default="last")
    p.add_argument("--expect", type=int, default=0, help="stop after this many messages")
    p.add_argument("-c", "--concurrency", type=int, default=20)
    p.add_argument("--pull-batch", type=int, default=32)

    p = sub.add_parser("e2e", help="end-to-end latency at a fixed rate")
    common(p)
    p.add_argument("-g", "--group", default="benchmark_e2e")
    p.add_argument("-r", "--rate", type=int, default=10000, help="messages per second")
    p.add_argument("-s", "--size", type=int, default=128)
    p.add_argument("--queues", type=int, default=8)
    p.add_argument("--warmup", type=float, default=1.0, help="seconds at the rate before counting")
    p.add_argument("--split", action="store_true", help="run the producer in its own process")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    runner = {"producer": run_producer, "consumer": run_consumer, "e2e": run_e2e}[args.cmd]
    opts = {"use_uvloop": True} if not args.no_uvloop and importlib.util.find_spec("uvloop") else {}
    try:
        anyio.run(runner, args, backend="asyncio", backend_options=opts)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
