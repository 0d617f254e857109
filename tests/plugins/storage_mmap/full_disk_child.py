"""Child process of the full-disk tests (not a test module): a store on a filesystem that fills up.

``python full_disk_child.py DIR MODE``. MODE ``tmpfs``: DIR is a fresh 8 MiB tmpfs (the
parent mounts it in a private mount namespace), so space really runs out, and a write
into an unreserved page of a mapping would be answered with SIGBUS. MODE ``inject``:
DIR is an ordinary directory and ``os.posix_fallocate`` answers ENOSPC once the files
under DIR would exceed 8 MiB (what the brief calls an injected ENOSPC at the file layer).

It asserts as it goes and prints ``FULL-DISK-OK <summary>`` at the end; the parent
checks the exit status (a negative one is the signal that ended it).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

from rmq.kernel.model import MessageRecord, PutStatus
from rmq.plugins.flush import AsyncFlushPlugin
from rmq.plugins.storage_mmap import MmapStoragePlugin
from rmq.testing import make_kernel
from rmq.testing.storage import SMALL_STORE, attach_from_hooks, decode_record

CAPACITY = 8 * 1024 * 1024
QUEUES = 2
BROKER = {
    **SMALL_STORE,
    "mappedFileSizeCommitLog": 1024 * 1024,
    "cleanResourceInterval": 100,
    "deleteWhen": "99",
    "cleanFileForciblyEnable": False,  # a forced clean would free space by deleting what we check
}


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def count(self, text: str) -> int:
        return sum(text in line for line in self.lines)


def used_bytes(root: Path) -> int:
    total = 0
    for d, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(d, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def install_quota(root: Path) -> None:
    """posix_fallocate under ``root`` fails with ENOSPC past CAPACITY (the injected mode)."""
    real = os.posix_fallocate
    prefix = str(root.resolve())

    def fallocate(fd: int, offset: int, length: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(prefix):
            have = os.fstat(fd).st_blocks * 512
            if used_bytes(root) + max(0, offset + length - have) > CAPACITY:
                raise OSError(errno.ENOSPC, "No space left on device (injected)")
        real(fd, offset, length)

    os.posix_fallocate = fallocate  # type: ignore[assignment]


def ratio_probe(root: Path, mode: str) -> Any:
    def probe() -> float:
        if mode == "tmpfs":
            st = os.statvfs(root)
            return 1 - st.f_bavail / st.f_blocks
        return used_bytes(root) / CAPACITY

    return probe


def make_store(root: Path, probe: Any) -> Any:
    kernel = make_kernel(
        [MmapStoragePlugin({"disk_retry_ms": 50}), AsyncFlushPlugin()],
        {"broker": {"storePathRootDir": str(root / "store"), **BROKER}},
    )
    store = attach_from_hooks(kernel, kernel.hook.rmq_storage_make_store(kernel=kernel, config=kernel.config.broker))
    store.disk_usage_probe = probe
    return store


def msg(i: int) -> MessageRecord:
    props = f"KEYS\x01k{i}\x02UNIQ_KEY\x01U{i:07d}"
    return MessageRecord("Full", i % QUEUES, bytes([i % 251]) * 2000, flag=i, properties=props)


def read_all(store: Any) -> Counter[str]:
    seen: Counter[str] = Counter()
    for q in range(QUEUES):
        off = store.get_min_offset("Full", q)
        while off < store.get_max_offset("Full", q):
            r = store.get_messages("g", "Full", q, off, 64, max_bytes=1 << 30)
            for raw in r.messages:
                rec = decode_record(raw)  # lengths and body CRC: nothing half-written is served
                assert rec["body"] == bytes([rec["flag"] % 251]) * 2000
                seen[rec["properties"]["UNIQ_KEY"]] += 1
            assert r.next_begin_offset > off
            off = r.next_begin_offset
    return seen


async def fill(store: Any, start: int, acked: set[str]) -> tuple[int, Any]:
    """Put until the store refuses; returns (next index, the refusal)."""
    i = start
    while True:
        r = await store.put_message(msg(i))
        if r.status != PutStatus.PUT_OK:
            return i, r
        acked.add(f"U{i:07d}")
        i += 1
        assert i - start < 100_000, "the disk never filled"


async def until_writable(store: Any, i: int, acked: set[str], seconds: float = 10.0) -> int:
    deadline = time.monotonic() + seconds
    while True:
        r = await store.put_message(msg(i))
        if r.status == PutStatus.PUT_OK:
            acked.add(f"U{i:07d}")
            return i + 1
        assert r.status == PutStatus.SERVICE_NOT_AVAILABLE and r.remark.startswith("disk full: "), r
        assert time.monotonic() < deadline, f"writes did not resume: {r.remark}"
        await anyio.sleep(0.05)


def ballast(root: Path, name: str, size: int) -> Path:
    path = root / name
    with open(path, "wb") as f:
        f.write(os.urandom(size))
    return path


def fill_up(path: Path, room: int) -> Path:
    """Write zeros to ``path`` until ``room`` bytes are written or the filesystem says ENOSPC."""
    with open(path, "wb") as f:
        try:
            for _ in range(room // 65536 + 1):
                f.write(bytes(65536))
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    return path


def check_exactly_once(store: Any, acked: set[str], where: str) -> None:
    seen = read_all(store)
    twice = [k for k, n in seen.items() if n > 1]
    assert not twice, f"{where}: served twice: {twice[:5]}"
    lost = acked - set(seen)
    assert not lost, f"{where}: {len(lost)} acknowledged messages not readable, e.g. {sorted(lost)[:5]}"
    assert set(seen) <= acked, f"{where}: served messages never acknowledged"


async def main(root: Path, mode: str) -> dict[str, Any]:
    lines = Lines()
    logging.getLogger("rmq.store").addHandler(lines)
    logging.getLogger("rmq.store").setLevel(logging.INFO)
    if mode == "inject":
        install_quota(root)
    acked: set[str] = set()
    fixed = lambda: 0.10  # noqa: E731 - phase 1 tests the reservation path, not the 90 % guard

    # 1. the disk fills while writing: refused with "disk full", reads go on, writes resume by themselves
    ball = ballast(root, "ballast1", 4 * 1024 * 1024)
    async with make_store(root, fixed) as store:
        i, refusal = await fill(store, 0, acked)
        assert refusal.status == PutStatus.SERVICE_NOT_AVAILABLE, refusal
        assert refusal.remark.startswith("disk full: "), refusal.remark
        phase1_acked = len(acked)
        for k in range(50):  # refusals are cheap and stay refusals
            r = await store.put_message(msg(i + k))
            assert r.status == PutStatus.SERVICE_NOT_AVAILABLE and r.remark.startswith("disk full: ")
        await anyio.sleep(0.5)  # ten retries later: still full, still refused, no new line
        st = store.stats()
        assert st["writable"] is False and st["remark"].startswith("disk full: ")
        r = await store.put_message(msg(i + 50))
        assert r.status == PutStatus.SERVICE_NOT_AVAILABLE and r.remark.startswith("disk full: ")
        with anyio.move_on_after(5):  # dispatch goes on (unless its own files found no room)
            await store.wait_dispatched()
        seen = read_all(store)
        assert set(seen) <= acked and max(seen.values()) == 1
        if store.stats()["dispatch_lag_bytes"] == 0:
            assert set(seen) == acked, "acknowledged and dispatched, but not served"
        assert lines.count("writes stopped: disk full: ") == 1, lines.lines
        assert lines.count("writes resumed") == 0, lines.lines
        ball.unlink()
        i = await until_writable(store, i + 50, acked)
        assert lines.count("writes resumed") == 1, lines.lines
        for _ in range(20):
            r = await store.put_message(msg(i))
            assert r.ok, r
            acked.add(f"U{i:07d}")
            i += 1
        await store.wait_dispatched()
        check_exactly_once(store, acked, "after space returned")

    # 2. something else fills the disk to the brim while the store is down
    room = CAPACITY - used_bytes(root) if mode == "inject" else CAPACITY
    path = fill_up(root / "ballast2", room)
    if mode == "tmpfs":
        st = os.statvfs(root)
        assert st.f_bavail * st.f_frsize < 64 * 1024, "the filesystem is not full"
    ball = path

    # 3. start on the full disk: read-only, one line saying why, reads served, writes resume by themselves
    lines.lines.clear()
    async with make_store(root, ratio_probe(root, mode)) as store:
        started = [line for line in lines.lines if " started " in line]
        assert len(started) == 1 and "READ-ONLY" in started[0] and "disk full: " in started[0], lines.lines
        assert lines.count("writes stopped") == 0, lines.lines
        check_exactly_once(store, acked, "started on a full disk")
        r = await store.put_message(msg(i))
        assert r.status == PutStatus.SERVICE_NOT_AVAILABLE and r.remark.startswith("disk full: "), r
        ball.unlink()
        i = await until_writable(store, i + 1, acked)
        assert lines.count("writes resumed") == 1, lines.lines
        await store.wait_dispatched()
        check_exactly_once(store, acked, "after the full start")

    # 4. a plain restart finds nothing damaged and every acknowledged message exactly once
    lines.lines.clear()
    async with make_store(root, fixed) as store:
        assert store.stats()["corrupt_ranges"] == 0
        assert not [line for line in lines.lines if "corrupt" in line or "rebuild" in line], lines.lines
        check_exactly_once(store, acked, "after a restart")
    return {"mode": mode, "acked": len(acked), "acked_before_full": phase1_acked, "next": i}


if __name__ == "__main__":
    where = Path(sys.argv[1])
    summary = anyio.run(main, where, sys.argv[2])
    print("FULL-DISK-OK " + json.dumps(summary), flush=True)
