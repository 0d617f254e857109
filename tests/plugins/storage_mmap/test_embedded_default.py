"""The embedded default (``rmqd`` with no config) reserves at most 300 MB of disk.

Measured as ``du`` does (allocated blocks): right after ``rmqd`` started on an empty store
(the first 64 MiB segment, reserved whole, plus small files), and after the first
messages (an index file's slot table and first chunk, consume-queue chunks). After the
first roll the next segment is pre-created too: 3 x 64 MiB plus the index, still under.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest

from rmq.kernel.config import embedded_default
from rmq.kernel.model import MessageRecord
from rmq.plugins.flush import AsyncFlushPlugin
from rmq.plugins.storage_mmap import MmapStoragePlugin
from rmq.testing import make_kernel
from rmq.testing.daemon import free_port
from rmq.testing.storage import attach_from_hooks

pytestmark = pytest.mark.integration  # starts rmqd processes itself (tests/conftest.py: tiers)

LIMIT = 300 * 1000 * 1000


def allocated(root: Path) -> int:
    total = 0
    for d, _dirs, files in os.walk(root):
        for name in files:
            total += os.lstat(os.path.join(d, name)).st_blocks * 512
    return total


def start_rmqd(cwd: Path) -> tuple[subprocess.Popen[bytes], list[str]]:
    cmd = [
        sys.executable,
        "-m",
        "rmq.kernel.daemon",
        "--set",
        f"namesrv.listenPort={free_port()}",
        "--set",
        f"broker.listenPort={free_port()}",
        "--set",
        f"proxy.grpcServerPort={free_port()}",
        "--set",
        f"dashboard.listenPort={free_port()}",
    ]
    env = {k: v for k, v in os.environ.items() if k != "RMQ_HOME"}
    proc = subprocess.Popen(cmd, cwd=cwd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            lines.append(raw.decode("utf-8", "replace").rstrip())
            if " ready: " in lines[-1]:
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(60) or proc.poll() is not None:
        proc.kill()
        raise AssertionError("rmqd did not start:\n" + "\n".join(lines[-30:]))
    return proc, lines


@pytest.mark.timeout(120)
def test_embedded_default_reserves_at_most_300_mb(tmp_path: Path) -> None:
    proc, lines = start_rmqd(tmp_path)
    try:
        assert any("embedded default" in line for line in lines)
        time.sleep(0.5)
        store = tmp_path / "rmq-store"
        empty = allocated(store)
        assert (store / "commitlog").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert empty <= LIMIT, f"an empty embedded-default store reserves {empty / 1e6:.0f} MB"

    async def first_messages() -> int:
        doc = embedded_default()
        doc["broker"]["storePathRootDir"] = str(store)
        kernel = make_kernel([MmapStoragePlugin(), AsyncFlushPlugin()], doc)
        async with attach_from_hooks(kernel, kernel.hook.rmq_storage_make_store(kernel=kernel, config=kernel.config.broker)) as s:
            for i in range(100):
                props = f"KEYS\x01k{i}\x02UNIQ_KEY\x01U{i:030d}"
                assert (await s.put_message(MessageRecord("T", i % 8, b"x" * 1024, properties=props))).ok
            await s.wait_dispatched()
            return allocated(store)

    busy = anyio.run(first_messages)
    print(
        f"embedded default: {empty / 1e6:.1f} MB reserved empty, {busy / 1e6:.1f} MB after the first messages"
    )
    assert busy <= LIMIT, f"the embedded-default store reserves {busy / 1e6:.0f} MB after its first messages"
    assert busy >= 64 * 1024 * 1024  # the measure is real: the segment being written is reserved whole
