"""The commitlog segment being written has readahead off (``MappedFile.readahead``); a full one has it on.

With readahead on, a write fault on a fresh segment brought in large page-cache folios, and every flush
then wrote a whole folio for one small record (SYNC_FLUSH dirtied ~400x the bytes it stored). The
kernel shows the advice per mapping: ``rr`` in ``VmFlags`` of /proc/self/smaps is MADV_RANDOM.
"""

from __future__ import annotations

import re
from pathlib import Path

from rmq.plugins.storage_mmap.commitlog import CommitLog

SIZE = 64 * 1024


def _random_read(path: Path) -> bool:
    """Whether this process maps ``path`` with MADV_RANDOM (its smaps VmFlags carry ``rr``)."""
    mapped = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            mapped = line.endswith(" " + str(path))
        elif mapped and line.startswith("VmFlags:"):
            return "rr" in line.split()[1:]
    raise AssertionError(f"{path} is not mapped")


def _fill(cl: CommitLog, n: int) -> None:
    for _ in range(n):
        f = cl.reserve(1000)
        f.mm[f.wrote : f.wrote + 8] = (1000).to_bytes(4, "big") + bytes(4)
        f.wrote += 1000


def test_the_segment_being_written_has_no_readahead_and_a_full_one_has(tmp_path: Path) -> None:
    cl = CommitLog(tmp_path / "commitlog", SIZE, preallocate=True)
    cl.load()
    _fill(cl, 70)  # past the first segment: a roll
    first, second = cl.files[0], cl.files[1]
    assert first.full and not second.full
    assert not _random_read(first.path) and _random_read(second.path)
    cl.close()

    again = CommitLog(tmp_path / "commitlog", SIZE, preallocate=False)  # a restart: the tail is written again
    again.load()
    again.recover(normal=True, check_crc=False, min_timestamp=0, stale_span=SIZE)  # (these records: none valid)
    tail = again.files[-1]
    assert not tail.full and _random_read(tail.path)
    again.close()
