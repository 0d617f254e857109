"""Crash tests: a child process putting with sync (or async) flush is SIGKILLed at random points.

After every kill the store must recover with each acknowledged message present exactly
once, and the consume queues must agree with the commitlog as decoded here from the
reference layout. SIGKILL keeps the page cache, so no acknowledged write may be lost
under either policy; what async flush risks is a power cut, which a test cannot make.
"""

from __future__ import annotations

import json
import random
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.testing.storage import decode_record

SCRIPT = Path(__file__).with_name("crash_writer.py")


def scan_commitlog(root: Path) -> tuple[list[dict[str, Any]], int]:
    """Every record of every segment, walked by the reference rules (blank = next segment), and the
    offset where data ends (a kill between rolling and writing leaves it at a segment start)."""
    out = []
    end = 0
    for seg in sorted((root / "commitlog").iterdir()):
        data = seg.read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            total, magic = struct.unpack_from(">ii", data, pos)
            if magic == -875286124:  # blank: the segment is full
                assert pos + total == len(data)
                pos = len(data)
                break
            if magic != -626843481:  # zeros: the end of the data
                break
            out.append(decode_record(data[pos : pos + total]))
            pos += total
        if pos:
            end = int(seg.name) + pos
    return out, end


async def verify(root: Path, open_store: Callable[..., Any], acked: set[str], cfg: dict[str, Any]) -> int:
    async with open_store(root, **cfg) as store:
        records, end = scan_commitlog(root)
        keys = [r["properties"]["UNIQ_KEY"] for r in records]
        dupes = {k for k in keys if keys.count(k) > 1} if len(set(keys)) != len(keys) else set()
        assert not dupes, f"stored twice: {sorted(dupes)[:5]}"
        lost = acked - set(keys)
        assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {sorted(lost)[:5]}"
        assert store.max_phy_offset == end
        expected: dict[int, list[int]] = defaultdict(list)
        for r in records:
            if r["sys_flag"] & 0xC in (0, 8):
                assert r["queue_offset"] == len(expected[r["queue_id"]])
                expected[r["queue_id"]].append(r["phys_offset"])
        for q in range(4):
            assert store.get_max_offset("Crash", q) == len(expected[q])
            got: list[int] = []
            off = 0
            while off < store.get_max_offset("Crash", q):
                res = store.get_messages("g", "Crash", q, off, 64)
                got.extend(decode_record(m)["phys_offset"] for m in res.messages)
                off = res.next_begin_offset
            assert got == expected[q], f"queue {q}: consume queue disagrees with the commitlog"
        return len(records)


def run_rounds(
    tmp_path: Path, open_store: Callable[..., Any], cfg: dict[str, Any], flush: str, rounds: int
) -> None:
    root = tmp_path / "store"
    rnd = random.Random(f"crash-{flush}")
    acked: set[str] = set()
    stored = 0
    for n in range(rounds):
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), str(root), flush, f"r{n}", json.dumps(cfg)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: list[str] = []
        ready = threading.Event()

        def read(stream: Any = proc.stdout, lines: list[str] = lines, ready: threading.Event = ready) -> None:
            for line in stream:
                if line.endswith("\n"):  # a line cut by the kill was not acknowledged in full
                    if line == "READY\n":
                        ready.set()
                    else:
                        lines.append(line[:-1])
            ready.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        if n % 4 == 3:
            time.sleep(rnd.uniform(0.05, 0.5))  # may land in start-up/recovery
        else:
            assert ready.wait(30), proc.stderr.read() if proc.poll() is not None else "child never ready"
            time.sleep(rnd.uniform(0.1, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        reader.join(10)
        err = proc.stderr.read()
        assert "Traceback" not in err, err
        acked.update(lines)
        if n % 3 == 1:
            continue  # start the next child straight on the crashed store: recovery after recovery
        count = anyio.run(verify, root, open_store, acked, cfg)
        assert count >= stored  # nothing that was there before disappears
        stored = count
    count = anyio.run(verify, root, open_store, acked, cfg)
    assert len(acked) > 100 and count >= len(acked)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkill_with_sync_flush(
    tmp_path: Path, store_factory: Callable[..., Any], small_config: dict[str, Any]
) -> None:
    run_rounds(tmp_path, store_factory, small_config, "sync", rounds=8)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkill_with_async_flush(
    tmp_path: Path, store_factory: Callable[..., Any], small_config: dict[str, Any]
) -> None:
    run_rounds(tmp_path, store_factory, small_config, "async", rounds=6)
