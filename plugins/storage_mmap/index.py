"""Key index files: hash slots + chained 20-byte entries, one file per time range (reference §3).

Keys are ``topic#key`` for each ``KEYS`` token and the ``UNIQ_KEY``. A lookup
returns candidate commitlog offsets by hash; the store re-checks the real key
against the record. Files are named by the local time of their creation.

Damage: an index is derived data. At start-up a file of the wrong size, with an
implausible header, or (for the files checked) with entries that break the chain
rules is deleted together with every later file, and the store replays dispatch
from the last good file's end to rebuild them. Damage that goes unseen can only
make a lookup miss: every candidate is re-checked against its record, and chain
walks stop at anything out of order.
"""

from __future__ import annotations

import datetime
import logging
import operator
import struct
import sys
from array import array
from collections.abc import Callable, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, Final

from rmq.kernel import DispatchRequest
from rmq.plugins.storage_mmap.codec import _HIGH31, _LOW31, java_hash_fast
from rmq.plugins.storage_mmap.mapped_file import MappedFile
from rmq.protocol import storepath
from rmq.protocol.common import java_hash

log = logging.getLogger("rmq.store")

HEADER: Final = struct.Struct(">qqqqii")  # beginTs, endTs, beginPhy, endPhy, hashSlotCount, indexCount
HEADER_SIZE: Final = 40
SLOT: Final = struct.Struct(">i")
ENTRY: Final = struct.Struct(">iqii")  # keyHash, phyOffset, timeDiff (s), prevIndex
ENTRY_SIZE: Final = 20
INT_MAX: Final = 0x7FFFFFFF
RESERVE_CHUNK: Final = 1 << 20  # entry bytes reserved ahead of the next entry


def key_hash(key: str) -> int:
    h = java_hash_fast(key)
    return 0 if h == -0x80000000 else abs(h)


def index_file_size(slots: int, entries: int) -> int:
    return HEADER_SIZE + slots * 4 + entries * ENTRY_SIZE


class IndexFile:
    """One index file; the header lives in attributes and is written back after every entry."""

    def __init__(self, mf: MappedFile, slots: int, max_entries: int) -> None:
        self.mf = mf
        self.mm = mf.mm
        self.slots = slots
        self.max_entries = max_entries
        self.entries_at = HEADER_SIZE + slots * 4
        (
            self.begin_ts,
            self.end_ts,
            self.begin_phy,
            self.end_phy,
            self.slot_count,
            self.count,
        ) = HEADER.unpack_from(self.mm, 0)
        if self.count <= 0:
            self.count = 1  # entry 0 is never used

    @property
    def name(self) -> str:
        return self.mf.path.name

    @property
    def full(self) -> bool:
        return self.count >= self.max_entries

    def write_header(self) -> None:
        HEADER.pack_into(
            self.mm, 0, self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, self.count
        )

    def put(self, key: str, phy: int, store_ts: int) -> bool:
        """Add one key; False when the file is full. Order of writes: entry, header, slot, so a
        crash between them leaves every chain walkable."""
        count = self.count
        if count >= self.max_entries:
            return False
        h = key_hash(key)
        slot_pos = HEADER_SIZE + (h % self.slots) * 4
        mm = self.mm
        (prev,) = SLOT.unpack_from(mm, slot_pos)
        if prev <= 0 or prev > count:
            prev = 0
        begin = self.begin_ts
        if begin <= 0:
            diff = 0
        else:
            diff = store_ts - begin
            diff = 0 if diff < 0 else min(diff // 1000, INT_MAX)
        if self.entries_at + (count + 1) * ENTRY_SIZE > self.mf.reserved:
            self.mf.reserve(self.entries_at + (count + 1) * ENTRY_SIZE + RESERVE_CHUNK)
        ENTRY.pack_into(mm, self.entries_at + count * ENTRY_SIZE, h, phy, diff, prev)
        if count <= 1:
            self.begin_phy = phy
            self.begin_ts = store_ts
        if prev == 0:
            self.slot_count += 1
        self.count = count + 1
        self.end_phy = phy
        self.end_ts = store_ts
        HEADER.pack_into(mm, 0, self.begin_ts, store_ts, self.begin_phy, phy, self.slot_count, count + 1)
        SLOT.pack_into(mm, slot_pos, count)
        return True

    def put_many(self, items: list[tuple[str, int, int]], i: int, fast: Any = None) -> int:
        """``put`` for ``items[i:]`` until the file is full; returns the index of the first item not added.

        The reput loop's path (two or so keys per message make this the hottest dispatcher):
        header fields live in locals, and the header is written twice per call instead of
        once per entry. The first write reserves the entry count, so every slot ever written
        points at an entry the header counts; the second sets the end offset/time. A crash in
        between leaves unreachable entries but intact chains, and replay (guarded by the old
        end offset) adds what is missing. ``fast``: the compiled module (``rmq.protocol._faststore``),
        whose ``index_put`` writes the same entries and leaves what it does not take to the loop here.
        """
        mm = self.mm
        slots = self.slots
        at = self.entries_at
        count = self.count
        stop = min(len(items), i + self.max_entries - count)
        if stop <= i:
            return i
        need = at + (count + stop - i) * ENTRY_SIZE
        if need > self.mf.reserved:
            self.mf.reserve(need + RESERVE_CHUNK)
        begin_ts, begin_phy, slot_count = self.begin_ts, self.begin_phy, self.slot_count
        HEADER.pack_into(mm, 0, begin_ts, self.end_ts, begin_phy, self.end_phy, slot_count, count + stop - i)
        slot_unpack, slot_pack, entry_pack = SLOT.unpack_from, SLOT.pack_into, ENTRY.pack_into
        low, high, fallback = _LOW31, _HIGH31, java_hash
        phy = ts = 0
        if fast is not None:
            i, count, begin_ts, begin_phy, slot_count, phy, ts = fast.index_put(
                mm, items, i, stop, at, count, slots, begin_ts, begin_phy, slot_count, phy, ts
            )
        while i < stop:
            key, phy, ts = items[i]
            try:  # java_hash_fast, inlined
                kb = key.encode("latin-1")
                if len(kb) > 4000:
                    raise UnicodeEncodeError("latin-1", key, 0, 1, "long")
                h = (int(kb.translate(low), 31) + 31 * int(kb.translate(high), 31)) & 0xFFFFFFFF
                h = h - 0x100000000 if h & 0x80000000 else h
            except UnicodeEncodeError:
                h = fallback(key)
            h = 0 if h == -0x80000000 else (h if h >= 0 else -h)
            slot_pos = 40 + (h % slots) * 4
            (prev,) = slot_unpack(mm, slot_pos)
            if prev <= 0 or prev > count:
                prev = 0
            if begin_ts <= 0:
                diff = 0
            else:
                diff = ts - begin_ts
                diff = 0 if diff < 0 else min(diff // 1000, INT_MAX)
            entry_pack(mm, at + count * 20, h, phy, diff, prev)
            if count <= 1:
                begin_phy = phy
                begin_ts = ts
            if prev == 0:
                slot_count += 1
            slot_pack(mm, slot_pos, count)
            count += 1
            i += 1
        self.count, self.begin_ts, self.begin_phy, self.slot_count = count, begin_ts, begin_phy, slot_count
        self.end_ts, self.end_phy = ts, phy
        HEADER.pack_into(mm, 0, begin_ts, ts, begin_phy, phy, slot_count, count)
        return i

    def repair_tail(self) -> None:
        """Undo what a crash inside :meth:`put_many` leaves: a count reserved for entries never
        written (zeros at the tail). Count and end are set back to the last written entry."""
        count = self.count
        zero = bytes(ENTRY_SIZE)
        at = self.entries_at
        while count > 1 and self.mm[at + (count - 1) * ENTRY_SIZE : at + count * ENTRY_SIZE] == zero:
            count -= 1
        if count != self.count:
            self.count = count
            if count > 1:
                _h, self.end_phy, diff, _p = ENTRY.unpack_from(self.mm, at + (count - 1) * ENTRY_SIZE)
                self.end_ts = max(self.end_ts, self.begin_ts + diff * 1000)
            self.write_header()

    def problem(self, entries: bool) -> str:
        """Why this file cannot be trusted ("" if it can): header plausibility and, with
        ``entries``, every entry and slot against the chain rules (entries in commitlog
        order, each pointing only backwards, slots within the entries). A damaged link that
        passes these can only make a lookup miss: chain walks stop at anything out of order."""
        count = self.count
        if not 1 <= count <= self.max_entries or not 0 <= self.slot_count <= min(count, self.slots):
            return f"header counts {count}/{self.slot_count} out of range"
        mm = self.mm
        if count == 1:
            if mm[self.entries_at + ENTRY_SIZE : self.entries_at + 2 * ENTRY_SIZE] != bytes(ENTRY_SIZE):
                return "header says empty but entries follow"
            return ""
        _h, first_phy, _d, _p = ENTRY.unpack_from(mm, self.entries_at + ENTRY_SIZE)
        _h, last_phy, _d, _p = ENTRY.unpack_from(mm, self.entries_at + (count - 1) * ENTRY_SIZE)
        if first_phy != self.begin_phy or last_phy < self.end_phy or not 0 <= self.begin_phy <= self.end_phy:
            return "header and entries disagree"
        if not entries:
            return ""
        ints = array("I")  # unsigned: a negative (corrupt) link shows as huge and fails "< own number"
        ints.frombytes(mm[self.entries_at : self.entries_at + count * ENTRY_SIZE])
        slots = array("I")
        slots.frombytes(mm[HEADER_SIZE : self.entries_at])
        if sys.byteorder == "little":
            ints.byteswap()
            slots.byteswap()
        if max(ints[5::5]) >= 1 << 31:
            return "an entry has a negative key hash"
        if not all(map(operator.lt, ints[9::5], range(1, count))):
            return "an entry points forwards"
        phys = list(zip(ints[6::5], ints[7::5], strict=True))  # (high, low) words compare as the offset does
        if not all(map(operator.le, phys, islice(phys, 1, None))):
            return "entries out of commitlog order"
        if max(slots) >= count:
            return "a slot points past the entries"
        return ""

    def time_matched(self, begin: int, end: int) -> bool:
        b, e = self.begin_ts, self.end_ts
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def select(self, key: str, max_num: int, begin: int, end: int, out: list[int]) -> None:
        """Append offsets whose hash equals ``key``'s and whose (second-granular) time is in range."""
        count = self.count
        if count <= 1:
            return
        h = key_hash(key)
        mm = self.mm
        (cur,) = SLOT.unpack_from(mm, HEADER_SIZE + (h % self.slots) * 4)
        if cur <= 0 or cur > count:
            return
        base = self.begin_ts
        steps = 0
        while len(out) < max_num and steps < count:
            steps += 1
            kh, phy, diff, prev = ENTRY.unpack_from(mm, self.entries_at + cur * ENTRY_SIZE)
            t = base + diff * 1000
            if kh == h and begin <= t <= end:
                out.append(phy)
            if prev <= 0 or prev >= cur or t < begin:  # a chain only ever points backwards
                break
            cur = prev

    def close(self) -> None:
        self.mf.close()


class IndexService:
    """The list of index files, oldest first; only the last one takes entries."""

    def __init__(
        self,
        directory: Path,
        slots: int,
        max_entries: int,
        on_full: Callable[[IndexFile], None] | None = None,
    ) -> None:
        self.dir = directory
        self.slots = slots
        self.max_entries = max_entries
        self.size = index_file_size(slots, max_entries)
        self.files: list[IndexFile] = []
        self.entries_at = HEADER_SIZE + slots * 4
        self.damage = ""
        self._on_full = on_full
        self.fast: Any = storepath.FAST  # the compiled index writer, None on the pure path
        self.guard = -1  # records at or below this offset are indexed already (replay guard)

    def load(self, check_all: bool = False) -> None:
        """Map existing files, oldest first. The first that is damaged (see the module docstring)
        is deleted with every later one; ``damage`` then says why, and ``guard`` (the end of the
        last good file) is where dispatch must be replayed from to rebuild them. Entries are
        checked in the newest file, or in all with ``check_all``."""
        self.damage = ""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            log.warning("%s: cannot create the index directory (%s)", self.dir, e)
            return
        for path in self.dir.glob("*.tmp"):
            path.unlink(missing_ok=True)
        paths = sorted(
            p for p in self.dir.iterdir() if p.name.isdigit() and p.is_file() and not p.is_symlink()
        )
        for n, path in enumerate(paths):
            size = path.stat().st_size
            f = None
            if size != self.size:
                problem = f"file is {size} bytes, expected {self.size}"
            else:
                f = IndexFile(MappedFile.open(path, self.size, reserve=0), self.slots, self.max_entries)
                f.repair_tail()
                problem = f.problem(entries=check_all or n == len(paths) - 1)
            if problem:
                if f is not None:
                    f.close()
                self.damage = f"{path}: {problem}"
                log.warning(
                    "index file %s: %s; it and %d later file(s) will be rebuilt from the commitlog",
                    path,
                    problem,
                    len(paths) - n - 1,
                )
                for later in paths[n:]:
                    later.unlink(missing_ok=True)
                break
            self.files.append(f)  # type: ignore[arg-type]
        self.guard = self.end_phy

    def drop_from(self, i: int, why: str) -> None:
        """Delete files ``i`` and later (they are rebuilt from the commitlog)."""
        log.warning("index: %s; %d file(s) will be rebuilt from the commitlog", why, len(self.files) - i)
        while len(self.files) > i:
            self.files.pop().mf.destroy()
        self.damage = why
        self.guard = self.end_phy

    def truncate(self, phys_end: int) -> None:
        """Forget index files that only cover data beyond the recovered commitlog end."""
        while self.files and self.files[-1].begin_phy >= phys_end and self.files[-1].count > 1:
            self.files.pop().mf.destroy()
        self.guard = min(self.end_phy, phys_end - 1)

    @property
    def end_phy(self) -> int:
        """Offset of the last indexed record (-1 when nothing is indexed)."""
        for f in reversed(self.files):
            if f.count > 1:
                return f.end_phy
        return -1

    def _new_name(self) -> Path:
        now = datetime.datetime.now()
        while True:
            name = now.strftime("%Y%m%d%H%M%S") + f"{now.microsecond // 1000:03d}"
            path = self.dir / name
            if not path.exists() and (not self.files or name > self.files[-1].name):
                return path
            now += datetime.timedelta(milliseconds=1)

    def _roll(self) -> IndexFile:
        prev = self.files[-1] if self.files else None
        mf = MappedFile.open(
            self._new_name(), self.size, create=True, reserve=self.entries_at + RESERVE_CHUNK
        )
        f = IndexFile(mf, self.slots, self.max_entries)
        if prev is not None:
            f.begin_ts = f.end_ts = prev.end_ts
            f.begin_phy = f.end_phy = prev.end_phy
            f.write_header()
        self.files.append(f)
        if prev is not None and self._on_full is not None:
            self._on_full(prev)
        return f

    def writable(self) -> IndexFile:
        if not self.files or self.files[-1].full:
            return self._roll()
        return self.files[-1]

    def query(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Candidate commitlog offsets for ``key`` (hash matches), newest file first, de-duplicated."""
        out: list[int] = []
        for f in reversed(self.files):
            if f.time_matched(begin, end):
                f.select(key, max_num, begin, end, out)
            if f.begin_ts < begin or len(out) >= max_num:
                break
        return list(dict.fromkeys(out))

    def delete_expired(self, phys_min: int) -> int:
        deleted = 0
        while len(self.files) > 1 and self.files[0].end_phy < phys_min:
            self.files.pop(0).mf.destroy()
            deleted += 1
        return deleted

    def close(self) -> None:
        for f in self.files:
            f.write_header()
            f.close()
        self.files = []


class IndexDispatcher:
    """Adds ``topic#UNIQ_KEY`` and ``topic#k`` for each KEYS token of every record (not rollbacks)."""

    def __init__(self, service: IndexService) -> None:
        self.service = service

    def dispatch(self, requests: Sequence[DispatchRequest]) -> None:
        svc = self.service
        last = svc.guard
        items: list[tuple[str, int, int]] = []
        add = items.append
        for r in requests:
            phy = r.commit_log_offset
            if phy <= last:
                continue
            last = phy
            if r.sys_flag & 0xC == 12:
                continue
            uniq = r.uniq_key
            keys = r.keys
            if uniq:
                add((r.topic + "#" + uniq, phy, r.store_timestamp))
            if keys:
                if " " in keys:
                    for k in keys.split(" "):
                        if k:
                            add((r.topic + "#" + k, phy, r.store_timestamp))
                else:
                    add((r.topic + "#" + keys, phy, r.store_timestamp))
        i = 0
        while i < len(items):
            i = svc.writable().put_many(items, i, svc.fast)
        svc.guard = last
