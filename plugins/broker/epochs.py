"""The epoch file of a broker in controller mode (RocketMQ's EpochFileCache, ``epochFileCheckpoint``).

Each entry says "from commitlog offset S on, the data was written under master epoch E".
Two replicas agree on their logs up to the end of the last epoch they share with the same
start; past that point one of them holds a tail the other never had (an old master's
unreplicated writes), and a replica that follows a new master cuts its log there
(:func:`common_point`).

File format as RocketMQ writes it: line 1 the entry count, line 2 the CRC32 of the entry
lines (with their line ends) & 0x7FFFFFFF in decimal, then ``<epoch>-<startOffset>`` per
line; written as a ``.tmp`` then renamed, the previous file kept as ``.bak``; a missing,
empty or inconsistent file falls back to the ``.bak``. An empty list is never written.
"""

from __future__ import annotations

import logging
import os
import zlib
from collections.abc import Sequence
from pathlib import Path

__all__ = ["EpochFile", "common_point", "epoch_list"]

log = logging.getLogger("rmq.broker")


class EpochFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[tuple[int, int]] = []  # (epoch, start offset), both strictly increasing

    # ------------------------------------------------------------------ file

    def load(self) -> None:
        for p in (self.path, self.path.with_name(self.path.name + ".bak")):
            entries = self._read(p)
            if entries is not None:
                self.entries = entries
                return
        self.entries = []

    @staticmethod
    def _read(p: Path) -> list[tuple[int, int]] | None:
        try:
            lines = p.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            return None
        if len(lines) < 2:
            return None
        try:
            count, crc = int(lines[0]), int(lines[1])
            body = lines[2:]
            if len(body) != count:
                return None
            if crc and crc != zlib.crc32("".join(x + "\n" for x in body).encode()) & 0x7FFFFFFF:
                return None
            out = []
            for line in body:
                e, _, s = line.partition("-")
                out.append((int(e), int(s)))
        except ValueError:
            return None
        return out

    def _write(self) -> None:
        if not self.entries:
            return  # as RocketMQ: an empty list is never written
        body = "".join(f"{e}-{s}\n" for e, s in self.entries)
        crc = zlib.crc32(body.encode()) & 0x7FFFFFFF
        tmp = self.path.with_name(self.path.name + ".tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as f:
            f.write(f"{len(self.entries)}\n{crc}\n{body}")
            f.flush()
            os.fsync(f.fileno())
        if self.path.exists():
            os.replace(self.path, self.path.with_name(self.path.name + ".bak"))
        os.replace(tmp, self.path)

    # ------------------------------------------------------------------ entries

    @property
    def last_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    def append(self, epoch: int, start: int) -> bool:
        """Record that ``epoch`` starts at ``start`` (both must grow); False when refused."""
        if self.entries and (epoch <= self.entries[-1][0] or start < self.entries[-1][1]):
            return False
        self.entries.append((epoch, start))
        self._write()
        return True

    def truncate_from_epoch(self, epoch: int) -> None:
        self.entries = [(e, s) for e, s in self.entries if e < epoch]
        self._write()

    def truncate_from_offset(self, offset: int) -> None:
        self.entries = [(e, s) for e, s in self.entries if s < offset]
        self._write()

    def replace(self, entries: Sequence[tuple[int, int]]) -> None:
        """Adopt a master's entries (a slave's log is a prefix of its master's)."""
        if list(entries) != self.entries:
            self.entries = list(entries)
            self._write()


def epoch_list(entries: Sequence[tuple[int, int]], max_offset: int) -> list[dict[str, int]]:
    """GET_BROKER_EPOCH_CACHE's ``epochList``: each entry with its end (the next start, or the log's end)."""
    out = []
    for i, (e, s) in enumerate(entries):
        end = entries[i + 1][1] if i + 1 < len(entries) else max_offset
        out.append({"epoch": e, "startOffset": s, "endOffset": end})
    return out


def common_point(
    local: Sequence[tuple[int, int]], local_max: int, master: Sequence[tuple[int, int]], master_max: int
) -> int | None:
    """Where a replica's log stops agreeing with its master's: the end of the newest epoch both hold
    with the same start (the smaller of the two ends). 0 for an empty local history; None when they
    share no epoch (the logs cannot be reconciled automatically)."""
    if not local:
        return 0
    m_end = {d["epoch"]: (d["startOffset"], d["endOffset"]) for d in epoch_list(master, master_max)}
    l_ends = epoch_list(local, local_max)
    for d in reversed(l_ends):
        other = m_end.get(d["epoch"])
        if other is not None and other[0] == d["startOffset"]:
            return min(d["endOffset"], other[1])
    return None
