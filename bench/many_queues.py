"""Start-up of an mmap store holding many consume queues: time to open and memory (issue #26).

    python bench/many_queues.py --topics 5000 --queues 4 [--dir /tmp/mq] [--cq-size 6000000]

Writes one message into every queue of ``topics`` x ``queues`` through the store in-process,
closes it, then opens it again in a fresh process and prints how long the open took, the
resident set size after it, and how many consume-queue files are mapped. The consume-queue
file size defaults to RocketMQ's (300,000 units = 6,000,000 bytes).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import anyio

from rmq.kernel import MessageRecord
from rmq.plugins.flush import AsyncFlushPlugin
from rmq.plugins.storage_mmap import MmapStoragePlugin
from rmq.testing import make_kernel
from rmq.testing.storage import attach_from_hooks


def _store(root: Path, cq_size: int) -> object:
    cfg = {"storePathRootDir": str(root), "mappedFileSizeConsumeQueue": cq_size,
           "mappedFileSizeCommitLog": 64 * 1024 * 1024}
    kernel = make_kernel([MmapStoragePlugin({}), AsyncFlushPlugin()], {"broker": cfg})
    store = kernel.hook.rmq_storage_make_store(kernel=kernel, config=kernel.config.broker)
    return attach_from_hooks(kernel, store)


async def _make(root: Path, topics: int, queues: int, cq_size: int) -> None:
    async with _store(root, cq_size) as store:  # type: ignore[attr-defined]
        for t in range(topics):
            for q in range(queues):
                await store.put_message(MessageRecord(f"T{t:05d}", q, b"x" * 64, 0, "", 0, 1700000000000,
                                                      b"\x7f\x00\x00\x01\x00\x00\x00\x01"))
        await store.wait_dispatched()


def _mapped_cq_files() -> int:
    maps = Path("/proc/self/maps").read_text()
    return len({line.split()[-1] for line in maps.splitlines() if "/consumequeue/" in line})


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


async def _open(root: Path, cq_size: int) -> dict[str, object]:
    t0 = time.monotonic()
    async with _store(root, cq_size) as store:  # type: ignore[attr-defined]
        opened = time.monotonic() - t0
        mapped = _mapped_cq_files()
        rss = _rss_kib()
        queues = store.stats()["consume_queues"]
    return {"open_s": round(opened, 2), "rss_mib": rss // 1024, "mapped_cq_files": mapped, "queues": queues}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=5000)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/rmq-many-queues"))
    ap.add_argument("--cq-size", type=int, default=300_000 * 20)
    ap.add_argument("--open-only", action="store_true", help="open an existing store (--dir) and report")
    ap.add_argument("--keep", action="store_true", help="leave the store in --dir")
    a = ap.parse_args()
    if a.open_only:
        print(json.dumps(anyio.run(_open, a.dir, a.cq_size)))
        return
    shutil.rmtree(a.dir, ignore_errors=True)
    t0 = time.monotonic()
    anyio.run(_make, a.dir, a.topics, a.queues, a.cq_size)
    print(f"wrote {a.topics * a.queues} queues in {time.monotonic() - t0:.1f}s")
    for _ in range(2):  # the second open finds the files cached
        out = subprocess.run([sys.executable, __file__, "--open-only", "--dir", str(a.dir),
                              "--cq-size", str(a.cq_size)], capture_output=True, text=True, check=True)
        print(out.stdout.strip())
    if not a.keep:
        shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
