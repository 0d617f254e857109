"""Message-store benchmark: prints figures, asserts nothing.

    python bench/store.py                      # everything (~1 min plus the 1 GiB recovery run)
    python bench/store.py --quick              # a quarter of the messages, a 256 MiB recovery run
    python bench/store.py put get              # a subset: put, get, sync, dispatch, recovery
    python bench/store.py --uvloop --dir /data # event loop and where the store lives

put      msgs/s and MB/s for 128 B, 1 KiB, 16 KiB bodies, single puts and batches of 32,
         until the reput loop has dispatched everything (consume queue + key index)
get      msgs/s reading 32 records per get_messages call
sync     group-commit puts (SYNC_FLUSH) from 1 and 32 concurrent putters: msgs/s, p50/p99
dispatch the reput's consume-queue writes alone, batches of 32 over 8 queues: CPU per unit of the
         pure loop and of the compiled writer (rmq.protocol._faststore.cq_put)
recovery SIGKILL a writer after 1 GiB of 1 KiB messages, then time the abnormal recovery, and a
         clean restart of the same store (normal recovery: every record and unit verified)

Messages look like a Java/C++ producer's: TAGS, KEYS, a 32-hex UNIQ_KEY and WAIT.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from rmq.kernel.model import DispatchRequest, MessageRecord
from rmq.plugins.flush import AsyncFlushPlugin, SyncFlushPlugin
from rmq.plugins.storage_mmap import MmapMessageStore, MmapStoragePlugin
from rmq.plugins.storage_mmap.queue_table import ConsumeQueueDispatcher, ConsumeQueueTable
from rmq.protocol import storepath
from rmq.testing import make_kernel
from rmq.testing.storage import attach_from_hooks

TOPIC = "BenchTopic"
QUEUES = 8
SCALE = 1  # --quick: 4 (a quarter of the messages)


def props(i: int, keys: bool = False) -> str:
    """As a Java producer sends them: UNIQ_KEY always, TAGS usually, KEYS when the user sets one."""
    k = f"KEYS\x01order-{i}\x02" if keys else ""
    return f"TAGS\x01TagA\x02{k}UNIQ_KEY\x017F0000010B9A18B4AAC2{i:012X}\x02WAIT\x01true"


def messages(n: int, size: int, keys: bool = False) -> list[MessageRecord]:
    """Test data, built before timing and frozen out of the cyclic GC's view (it is not what we measure)."""
    body = os.urandom(size)
    now = int(time.time() * 1000)
    out = [
        MessageRecord(TOPIC, i % QUEUES, body, properties=props(i, keys), born_timestamp=now)
        for i in range(n)
    ]
    gc.collect()
    gc.freeze()
    return out


def make_store(root: Path, sync: bool = False, **broker: Any) -> MmapMessageStore:
    cfg = {"storePathRootDir": str(root), **broker}
    if sync:
        cfg["flushDiskType"] = "SYNC_FLUSH"
    flush = SyncFlushPlugin() if sync else AsyncFlushPlugin()
    kernel = make_kernel([MmapStoragePlugin(), flush], {"broker": cfg})
    store = attach_from_hooks(kernel, kernel.hook.rmq_storage_make_store(kernel=kernel, config=kernel.config.broker))
    store.disk_usage_probe = lambda: 0.1
    return store


class Clock:
    """Wall and CPU time of this process: the machine may be shared, CPU time shows our own cost."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def lap(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def line(name: str, n: int, wall: float, cpu: float, nbytes: int = 0, extra: str = "") -> None:
    mb = f"{nbytes / wall / 1e6:8.1f} MB/s" if nbytes else " " * 13
    print(
        f"{name:<36} {n / wall:>10,.0f} msg/s {mb}  (cpu-bound rate {n / max(cpu, 1e-9):>10,.0f} msg/s;"
        f" {n:,} in {wall:.2f}s){extra}",
        flush=True,
    )


async def bench_put(base: Path) -> None:
    cases = [
        (128, 200_000, False, True),
        (1024, 200_000, False, True),
        (16 * 1024, 40_000, False, True),
        (128, 200_000, True, True),  # KEYS set too: two index entries per message
        (128, 200_000, False, False),  # messageIndexEnable=false: consume queue only
    ]
    for size, n, keys, index in cases:
        n //= SCALE
        for batch in (1, 32):
            root = Path(tempfile.mkdtemp(dir=base))
            msgs = messages(n, size, keys)
            chunks: list[list[MessageRecord]] = []
            if batch > 1:  # built before the clock starts, and frozen like the messages: test data
                by_queue = [msgs[q::QUEUES] for q in range(QUEUES)]
                chunks = [qm[i : i + batch] for qm in by_queue for i in range(0, len(qm), batch)]
                gc.freeze()
            async with make_store(root, messageIndexEnable=index) as store:
                clock = Clock()
                if batch == 1:
                    put = store.put_message
                    for m in msgs:
                        await put(m)
                else:
                    put_many = store.put_messages
                    for c in chunks:
                        await put_many(c)
                await store.wait_dispatched()
                wall, cpu = clock.lap()
                nbytes = store.stats()["put_bytes"]
            del msgs, chunks
            gc.unfreeze()
            kind = "single" if batch == 1 else f"batch {batch}"
            note = " +KEYS" if keys else "" if index else " noidx"
            line(f"put {size:>5} B {kind:<8}{note}", n, wall, cpu, nbytes)


async def bench_get(base: Path) -> None:
    root = Path(tempfile.mkdtemp(dir=base))
    n = 200_000 // SCALE
    async with make_store(root) as store:
        for size in (128, 1024):
            topic_msgs = messages(n, size)
            for m in topic_msgs:
                m.topic = f"{TOPIC}{size}"
            for m in topic_msgs:
                await store.put_message(m)
            await store.wait_dispatched()
            del topic_msgs
            gc.unfreeze()
            clock = Clock()
            got = 0
            nbytes = 0
            for q in range(QUEUES):
                off = 0
                mx = store.get_max_offset(f"{TOPIC}{size}", q)
                while off < mx:
                    r = store.get_messages("g", f"{TOPIC}{size}", q, off, 32)
                    got += len(r.messages)
                    nbytes += r.total_size
                    off = r.next_begin_offset
            line(f"get {size:>5} B x32", got, *clock.lap(), nbytes)


async def bench_sync(base: Path) -> None:
    for putters, n in ((1, 3_000 // SCALE), (32, 60_000 // SCALE)):
        root = Path(tempfile.mkdtemp(dir=base))
        msgs = messages(n, 1024)
        lat: list[float] = []
        async with make_store(root, sync=True) as store:
            per = n // putters

            async def run(
                k: int,
                store: MmapMessageStore = store,
                msgs: list[MessageRecord] = msgs,
                per: int = per,
                lat: list[float] = lat,
            ) -> None:
                for m in msgs[k * per : (k + 1) * per]:
                    t = time.perf_counter()
                    r = await store.put_message(m)
                    lat.append(time.perf_counter() - t)
                    assert r.ok, r

            clock = Clock()
            async with anyio.create_task_group() as tg:
                for k in range(putters):
                    tg.start_soon(run, k)
            wall, cpu = clock.lap()
            rounds = store.policy.rounds  # type: ignore[union-attr]
        gc.unfreeze()
        lat.sort()
        p50 = statistics.median(lat) * 1e3
        p99 = lat[int(len(lat) * 0.99)] * 1e3
        line(
            f"sync put 1 KiB, {putters:>2} putters",
            len(lat),
            wall,
            cpu,
            len(lat) * 1024,
            f"  p50 {p50:.2f} ms  p99 {p99:.2f} ms  ({len(lat) / max(rounds, 1):.1f} puts/fsync)",
        )


WRITER = """
import anyio, os, signal, sys
sys.path.insert(0, {here!r})
import store as b

async def main():
    s = b.make_store(b.Path({root!r}))
    msgs = b.messages(4096, 1024)
    async with s:
        while s.max_phy_offset < {target}:
            for m in msgs:
                await s.put_message(m)
        await s.wait_dispatched()
        print(s.max_phy_offset, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

anyio.run(main)
"""


def write_and_kill(base: Path, gib: float) -> tuple[Path, int] | None:
    """A child process writes ``gib`` GiB of 1 KiB messages, lets dispatch catch up, then SIGKILLs itself."""
    root = Path(tempfile.mkdtemp(dir=base))
    target = int(gib * (1 << 30))
    code = WRITER.format(here=str(Path(__file__).parent), root=str(root), target=target)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != -signal.SIGKILL:
        print("recovery: writer failed:", proc.stderr[-2000:])
        return None
    written = int(proc.stdout.split()[0])
    print(
        f"recovery: wrote {written / (1 << 30):.2f} GiB of 1 KiB messages in {time.perf_counter() - t0:.1f}s; SIGKILLed"
    )
    os.sync()
    return root, written


async def bench_dispatch(base: Path) -> None:
    """The consume-queue dispatcher alone: the same batches through the pure loop and the compiled writer."""
    fast = storepath.compiled_store()
    n_batches, per, queues = 8000 // SCALE, 32, 8
    for name, mod in (("pure", None), ("compiled", fast)):
        if name == "compiled" and fast is None:
            print("cq dispatch, compiled: not built (no compiler at install)")
            continue
        table = ConsumeQueueTable(base / f"cq-{name}", 300_000 * 20)
        d = ConsumeQueueDispatcher(table)
        d.fast = mod
        phys, batches = 0, []
        for b in range(n_batches):
            batches.append([DispatchRequest("T", k % queues, phys + k * 1200, 1200, 7, 1, b * (per // queues) + k // queues)
                            for k in range(per)])
            phys += per * 1200
        d.dispatch(batches[0])  # the queues' files made
        clock = Clock()
        for reqs in batches[1:]:
            d.dispatch(reqs)
        wall, cpu = clock.lap()
        table.close()
        n = (n_batches - 1) * per
        line(f"cq dispatch, {per} per batch, {name}", n, wall, cpu, extra=f"; {cpu / n * 1e6:.2f} µs CPU per unit")


async def bench_recovery(root: Path, written: int) -> None:
    store = make_store(root)
    t1 = time.perf_counter()
    async with store:
        dt = time.perf_counter() - t1
        rec = store.stats()["recovery"]
    print(
        f"recovery: abnormal={rec['abnormal']} {written / (1 << 30):.2f} GiB commitlog recovered in {dt:.2f}s"
        f" (replayed {rec['replay_bytes'] / (1 << 20):.1f} MiB of dispatch)",
        flush=True,
    )
    print(json.dumps(rec))
    t2 = time.perf_counter()
    async with make_store(root) as store:
        dt = time.perf_counter() - t2
        rec = store.stats()["recovery"]
    print(f"recovery: abnormal={rec['abnormal']} clean restart of the same store in {dt:.2f}s", flush=True)
    print(json.dumps(rec))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="*", default=["put", "get", "sync", "dispatch", "recovery"])
    ap.add_argument("--dir", default=None, help="parent directory for the stores (default: a temp dir)")
    ap.add_argument("--uvloop", action="store_true")
    ap.add_argument("--gib", type=float, default=None, help="commitlog size for the recovery run (1)")
    ap.add_argument("--quick", action="store_true", help="a quarter of the messages, 0.25 GiB recovery")
    args = ap.parse_args()
    global SCALE
    SCALE = 4 if args.quick else 1
    gib = args.gib if args.gib is not None else (0.25 if args.quick else 1.0)
    base = Path(tempfile.mkdtemp(prefix="rmq-bench-", dir=args.dir))
    backend_options = {"use_uvloop": True} if args.uvloop else {}
    print(f"python {sys.version.split()[0]}, {'uvloop' if args.uvloop else 'asyncio'}, stores under {base}")
    try:
        for what in args.what:
            if what == "recovery":
                made = write_and_kill(base, gib)
                if made is not None:
                    anyio.run(bench_recovery, *made, backend_options=backend_options)
            else:
                anyio.run(globals()[f"bench_{what}"], base, backend_options=backend_options)
    finally:
        subprocess.run(["rm", "-rf", str(base)])


if __name__ == "__main__":
    main()
