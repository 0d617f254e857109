"""Produce side by side: rmqd against Apache RocketMQ 4.9.8 itself and the stores a user would run instead.

    python bench/peers.py [--size 1024] [--inflight 1,8,32] [--seconds 5] [--flush sync,async]
                          [--peers java,redis,nats] [--drivers cpp,rmq,raw]

One run, one machine, the same message size and concurrency for everyone:

* **rmqd** (namesrv + broker, ``flushDiskType`` SYNC_FLUSH and/or ASYNC_FLUSH, a fresh store in a temp
  dir), driven by the official C++ client (PyPI ``rocketmq`` 0.4.4: K threads, one synchronous send
  each) and by ``rmq.client`` (K tasks on one asyncio producer, one ``await send`` each);
* **the Java broker**, Apache RocketMQ 4.9.8 built from source (``../shared/java`` or ``$RMQ_JAVA_HOME``:
  its NameServer and Broker JVMs, the same flush modes), driven by the same two clients;
* **Redis** (Debian's ``redis-server``, started here on loopback: AOF on, ``appendfsync always``),
  driven by ``redis-benchmark -c K`` with ``XADD`` of a SIZE-byte field;
* **NATS JetStream** (Debian's ``nats-server``, file storage, ``sync_interval: always`` where the server
  has it — 2.10+; Debian 12 ships 2.9, which fsyncs on its own timer and is labelled "no fsync"), driven
  by ``nats-py`` (``pip install nats-py``) with K tasks each awaiting its publish ack;
* with ``--drivers raw``, both RocketMQ brokers also get ``bench/broker.py``'s driver: one connection of
  rmq's remoting client pipelining K SEND_MESSAGE_V2 requests (no client library in the way).

Each driver runs in its own process for ``--seconds`` after a short warm-up and reports msgs/s and
the p50/p99 latency of one acknowledged send. The table gives rmqd's throughput as a ratio of
Redis', the CPU per acknowledged send of the server process and of the driving process (on a small
machine both share the cores, so a client's own cost bounds what any server can show), and the
broker's resident memory at rest (before the first send) and its peak under load. Peers that are not installed are listed as skipped; figures never change the exit status,
only errors do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from broker import process_cpu  # bench/ is on sys.path when run as a script

TOPIC = "PeerBench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def summary(n: int, seconds: float, lat: list[float], cpu_s: float = float("nan")) -> dict[str, float]:
    """A driver's figures; ``client_us`` is its own process's CPU per acknowledged send."""
    return {"rate": n / seconds if seconds else 0.0, "p50_ms": pct(lat, 0.5) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3,
            "n": n, "client_us": cpu_s / n * 1e6 if n else float("nan")}


def self_cpu() -> float:
    """CPU seconds of this process, every thread."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:g}s")


# ----------------------------------------------------------------------------- drivers (child processes)


def drive_cpp(namesrv: str, size: int, threads: int, seconds: float) -> dict[str, float]:
    from rocketmq.client import Message, Producer

    producer = Producer(f"peer-bench-{os.getpid()}")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    body = b"x" * size
    try:
        for _ in range(20):  # warm-up: route lookup, connection
            m = Message(TOPIC)
            m.set_body(body)
            producer.send_sync(m)
        lats: list[list[float]] = [[] for _ in range(threads)]
        stop = time.monotonic() + seconds

        def run(mine: list[float]) -> None:
            while time.monotonic() < stop:
                m = Message(TOPIC)
                m.set_body(body)
                t = time.perf_counter()
                producer.send_sync(m)
                mine.append(time.perf_counter() - t)

        t0, c0 = time.monotonic(), self_cpu()
        workers = [threading.Thread(target=run, args=(lats[i],)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed, cpu = time.monotonic() - t0, self_cpu() - c0
    finally:
        producer.shutdown()
    flat = [x for xs in lats for x in xs]
    return summary(len(flat), elapsed, flat, cpu)


def drive_rmq(namesrv: str, size: int, tasks: int, seconds: float) -> dict[str, float]:
    from rmq.client import Message, Producer

    async def main() -> dict[str, float]:
        body = b"x" * size
        async with Producer(f"peer-bench-{os.getpid()}", namesrv_addr=namesrv) as producer:
            for _ in range(20):
                await producer.send(Message(TOPIC, body))
            lat: list[float] = []
            stop = time.monotonic() + seconds

            async def run() -> None:
                while time.monotonic() < stop:
                    t = time.perf_counter()
                    await producer.send(Message(TOPIC, body))
                    lat.append(time.perf_counter() - t)

            t0, c0 = time.monotonic(), self_cpu()
            await asyncio.gather(*(run() for _ in range(tasks)))
            return summary(len(lat), time.monotonic() - t0, lat, self_cpu() - c0)

    try:
        import uvloop

        return uvloop.run(main())
    except ImportError:
        return asyncio.run(main())


def drive_raw(broker: str, size: int, inflight: int, seconds: float) -> dict[str, float]:
    """``bench/broker.py``'s driver: one connection of rmq's remoting client, ``inflight`` SEND_MESSAGE_V2
    requests pipelined on it (each task sends its next when its answer arrives), queues taken in turn."""
    import anyio
    from broker import send_cmd

    from rmq.kernel.hookspecs.remoting import RemotingConfig
    from rmq.plugins.remoting_tcp import TcpRemotingClient
    from rmq.protocol.message import UniqIdGenerator

    async def main() -> dict[str, float]:
        body = b"x" * size
        uniq = UniqIdGenerator("127.0.0.1")

        def make(q: int) -> Any:
            cmd = send_cmd(body, q, uniq)
            cmd.ext["b"] = TOPIC
            return cmd

        async with TcpRemotingClient(RemotingConfig(name="peer-bench-raw")) as client:
            for q in range(20):
                assert (await client.invoke(broker, make(q % 4), 10)).code == 0
            lat: list[float] = []
            errors = 0
            stop = time.monotonic() + seconds

            async def run(k: int) -> None:
                nonlocal errors
                q = k
                while time.monotonic() < stop:
                    q += 1
                    t = time.perf_counter()
                    if (await client.invoke(broker, make(q % 4), 30)).code != 0:
                        errors += 1
                    lat.append(time.perf_counter() - t)

            t0, c0 = time.monotonic(), self_cpu()
            async with anyio.create_task_group() as tg:
                for k in range(inflight):
                    tg.start_soon(run, k)
            if errors:
                raise RuntimeError(f"{errors} sends failed")
            return summary(len(lat), time.monotonic() - t0, lat, self_cpu() - c0)

    return anyio.run(main, backend="asyncio", backend_options={"use_uvloop": True})


def drive_nats(port: int, size: int, tasks: int, seconds: float) -> dict[str, float]:
    import nats

    async def main() -> dict[str, float]:
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        js = nc.jetstream()
        await js.add_stream(name="PEER", subjects=["peer.bench"], storage="file")
        body = b"x" * size
        for _ in range(20):
            await js.publish("peer.bench", body)
        lat: list[float] = []
        stop = time.monotonic() + seconds

        async def run() -> None:
            while time.monotonic() < stop:
                t = time.perf_counter()
                await js.publish("peer.bench", body)
                lat.append(time.perf_counter() - t)

        t0, c0 = time.monotonic(), self_cpu()
        await asyncio.gather(*(run() for _ in range(tasks)))
        out = summary(len(lat), time.monotonic() - t0, lat, self_cpu() - c0)
        await nc.close()
        return out

    return asyncio.run(main())


DRIVER_LABELS = {"cpp": "C++", "rmq": "rmq.client", "raw": "raw pipeline"}
DRIVERS = {"cpp": drive_cpp, "rmq": drive_rmq, "raw": drive_raw, "nats": drive_nats}


def rss_mib(pid: int) -> float:
    """Resident set of ``pid`` in MiB (Linux /proc; NaN when unreadable)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def child(kind: str, target: str, size: int, k: int, seconds: float, server_pid: int | None = None) -> dict[str, float]:
    """Run one driver in a fresh process (no GIL or client state shared between measurements);
    with ``server_pid``, the server's CPU over the run goes in as ``server_us`` per send and its peak
    resident memory, sampled while the driver runs, as ``rss_mib``."""
    cmd = [sys.executable, __file__, "--child", kind, target, str(size), str(k), str(seconds)]
    s0 = process_cpu(server_pid) if server_pid else float("nan")
    peak = [float("nan")]
    done = threading.Event()

    def sample() -> None:
        while server_pid and not done.wait(0.2):
            r = rss_mib(server_pid)
            peak[0] = r if peak[0] != peak[0] else max(peak[0], r)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    finally:
        done.set()
        sampler.join()
    if out.returncode != 0:
        raise RuntimeError(f"{kind} driver failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    r: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    if server_pid:
        r["server_us"] = (process_cpu(server_pid) - s0) / r["n"] * 1e6 if r["n"] else float("nan")
        r["rss_mib"] = peak[0]
    return r


# ----------------------------------------------------------------------------- servers


def redis_run(tmp: Path, size: int, k: int, seconds: float) -> dict[str, float]:
    port = free_port()
    data = tmp / f"redis-{k}"
    data.mkdir()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--save", "",
         "--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no", "--logfile", str(data / "log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port)
        value = "x" * size
        base = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(k), "--csv"]
        subprocess.run([*base, "-n", "2000", "XADD", "warm", "*", "f", value], capture_output=True, timeout=60)
        # size the run to about --seconds from a short probe
        probe = subprocess.run([*base, "-n", str(max(1000, 200 * k)), "XADD", "s", "*", "f", value],
                               capture_output=True, text=True, timeout=120)
        rate = float(_redis_csv(probe.stdout)["rps"])
        n = max(2000, int(rate * seconds))
        s0, c0 = process_cpu(server.pid), resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([*base, "-n", str(n), "XADD", "s", "*", "f", value], capture_output=True, text=True,
                             timeout=seconds * 10 + 60)
        s1, c1 = process_cpu(server.pid), resource.getrusage(resource.RUSAGE_CHILDREN)
        row = _redis_csv(out.stdout)
        client = (c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)
        return {"rate": float(row["rps"]), "p50_ms": float(row["p50_latency_ms"]), "p99_ms": float(row["p99_latency_ms"]),
                "n": n, "client_us": client / n * 1e6, "server_us": (s1 - s0) / n * 1e6}
    finally:
        server.terminate()
        server.wait(10)


def _redis_csv(text: str) -> dict[str, str]:
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    head = [h.strip('"') for h in lines[0].split(",")]
    vals = [v.strip('"') for v in lines[-1].split(",")]
    return dict(zip(head, vals, strict=False))


async def create_topic(broker_addr: str, namesrv_addr: str) -> None:
    """The bench topic with 4 queues (RocketMQ's default), then until the name server routes it."""
    from rmq.kernel.hookspecs.remoting import RemotingConfig
    from rmq.plugins.remoting_tcp import TcpRemotingClient
    from rmq.protocol.codes import RequestCode
    from rmq.protocol.command import RemotingCommand

    async with TcpRemotingClient(RemotingConfig(name="bench")) as c:
        r = await c.invoke(broker_addr, RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "readQueueNums": "4", "writeQueueNums": "4",
                                                  "perm": "6", "defaultTopic": "TBW102",
                                                  "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0",
                                                  "order": "false"}), 10)
        assert r.code == 0, r
        for _ in range(300):
            r = await c.invoke(namesrv_addr, RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                                     {"topic": TOPIC}), 10)
            if r.code == 0:
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{namesrv_addr} has no route for {TOPIC}")


class Server:
    """A broker under test: where clients find it, the process whose CPU and memory count, how to stop it."""

    def __init__(self, namesrv: str, pid: int, stop: Any, broker: str) -> None:
        self.namesrv, self.pid, self.stop, self.broker = namesrv, pid, stop, broker
        self.rest_mib = rss_mib(pid)


def start_rmqd(tmp: Path, flush: str) -> Server:
    from rmq.testing.daemon import RmqdProcess

    rmqd = RmqdProcess(tmp / f"rmqd-{flush}", broker_conf={"flushDiskType": flush,
                                                           "mappedFileSizeCommitLog": 256 << 20})
    rmqd.start()
    asyncio.run(create_topic(rmqd.broker_addr, rmqd.namesrv_addr))
    assert rmqd.proc is not None
    return Server(rmqd.namesrv_addr, rmqd.proc.pid, rmqd.stop, rmqd.broker_addr)


def start_java(tmp: Path, flush: str) -> Server:
    """Apache RocketMQ 4.9.8's NameServer + Broker JVMs; the broker's process is the one measured."""
    from rmq.testing.java import JavaBroker

    java = JavaBroker(tmp / f"java-{flush}", flush=flush, conf={"mappedFileSizeCommitLog": 256 << 20})
    java.start()
    try:
        asyncio.run(create_topic(java.broker_addr, java.namesrv_addr))
    except BaseException:
        java.stop()
        raise
    return Server(java.namesrv_addr, java.broker_pid, java.stop, java.broker_addr)


def nats_start(tmp: Path) -> tuple[subprocess.Popen[bytes], int, str]:
    """nats-server with JetStream on file storage; fsync per message where the server supports it (2.10+)."""
    store = tmp / "nats"
    store.mkdir()
    for sync in ("always", None):
        port = free_port()
        conf = store / "nats.conf"
        conf.write_text(f'listen: "127.0.0.1:{port}"\njetstream {{ store_dir: "{store}"'
                        + (f', sync_interval: "{sync}"' if sync else "") + " }\n")
        proc = subprocess.Popen(["nats-server", "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(port, 10)
        except RuntimeError:
            proc.kill()
            proc.wait(5)
            continue
        return proc, port, "NATS JS, file, fsync each" if sync else "NATS JS, file (no fsync)"
    raise RuntimeError("nats-server did not start")


def fdatasync_p50(tmp: Path, n: int = 200) -> float:
    """This disk's fdatasync latency for a 1 KiB append (what a durable send cannot beat)."""
    path = tmp / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    lat = []
    try:
        for _ in range(n):
            os.write(fd, b"x" * 1024)
            t = time.perf_counter()
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t)
    finally:
        os.close(fd)
    return pct(lat, 0.5) * 1e3


# ----------------------------------------------------------------------------- main


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, target, size, k, seconds = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
        target_arg: Any = int(target) if kind == "nats" else target
        print(json.dumps(DRIVERS[kind](target_arg, size, k, seconds)), flush=True)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--inflight", default="1,8,32")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=5.0,
                    help="seconds of untimed load on each broker first (the JVM's JIT compiles the hot path)")
    ap.add_argument("--flush", default="sync", help="comma-separated flushDiskType of both brokers: sync, async")
    ap.add_argument("--peers", default="java,redis,nats", help="comma-separated: java, redis, nats")
    ap.add_argument("--drivers", default="cpp,rmq",
                    help="comma-separated RocketMQ drivers: cpp (the C++ client), rmq (rmq.client), raw (bench/broker.py's "
                         "pipelined single connection)")
    args = ap.parse_args()
    ks = [int(x) for x in args.inflight.split(",")]
    drivers = [d.strip() for d in args.drivers.split(",") if d.strip()]
    unknown = set(drivers) - set(DRIVER_LABELS)
    if unknown:
        ap.error(f"unknown drivers: {', '.join(sorted(unknown))}")
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    flushes = [f"{f.strip().upper()}_FLUSH" for f in args.flush.split(",") if f.strip()]
    from rmq.testing.java import java_home

    have = {
        "java": java_home() is not None,
        "redis": shutil.which("redis-server") is not None and shutil.which("redis-benchmark") is not None,
        "nats": shutil.which("nats-server") is not None and _importable("nats"),
    }
    results: dict[tuple[str, int], dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="rmq-peers-") as d:
        tmp = Path(d)
        print(f"# {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, fdatasync p50 {fdatasync_p50(tmp):.3f} ms "
              f"(1 KiB appends), message {args.size} B, {args.seconds:g} s per figure", flush=True)
        skipped = [p for p in peers if not have.get(p)]
        if skipped:
            print(f"# not installed, skipped: {', '.join(skipped)}", flush=True)
        brokers = [("rmqd", start_rmqd)] + ([("Java 4.9.8", start_java)] if "java" in peers and have["java"] else [])
        for flush in flushes:
            for name, start in brokers:
                server = start(tmp, flush)
                label = f"{name} {flush.split('_')[0].lower()}"
                try:
                    if args.warmup > 0:
                        child("rmq", server.namesrv, args.size, max(ks), args.warmup)
                    for k in ks:
                        for kind in drivers:
                            target = server.broker if kind == "raw" else server.namesrv
                            r = child(kind, target, args.size, k, args.seconds, server.pid)
                            client = DRIVER_LABELS[kind]
                            results[(f"{label} + {client}", k)] = {**r, "rest_mib": server.rest_mib}
                finally:
                    server.stop()
        if "redis" in peers and have["redis"]:
            for k in ks:
                results[("Redis XADD, AOF always", k)] = redis_run(tmp, args.size, k, args.seconds)
        if "nats" in peers and have["nats"]:
            proc, port, label = nats_start(tmp)
            try:
                for k in ks:
                    results[(label, k)] = child("nats", str(port), args.size, k, args.seconds, proc.pid)
            finally:
                proc.terminate()
                proc.wait(10)
    print(f"\n{'system':<30} {'in flight':>9} {'msgs/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'vs Redis':>9}"
          f" {'server µs':>10} {'client µs':>10} {'RSS rest':>9} {'RSS load':>9}")
    nan = float("nan")
    for (name, k), r in results.items():
        redis = results.get(("Redis XADD, AOF always", k))
        ratio = f"{r['rate'] / redis['rate']:.2f}" if redis and redis["rate"] else "-"
        print(f"{name:<30} {k:>9} {r['rate']:>10,.0f} {r['p50_ms']:>8.3f} {r['p99_ms']:>8.3f} {ratio:>9}"
              f" {r.get('server_us', nan):>10.1f} {r.get('client_us', nan):>10.1f}"
              f" {r.get('rest_mib', nan):>9.0f} {r.get('rss_mib', nan):>9.0f}")
    print("(server µs / client µs: CPU of the server process / of the driving process per acknowledged send;"
          " on a 2-core machine the two share the cores. RSS MiB of the broker process at rest and its peak"
          " under load; the Java figures leave out its NameServer JVM, rmqd's include its name server role)")
    return 0


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
