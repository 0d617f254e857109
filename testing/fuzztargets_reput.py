"""The reput's direct path (``_faststore.reput_put``) as a fuzz target of :mod:`rmq.testing.fuzzdrive`.

Its inputs are what the put path packed (hand-off tuples), not peer bytes; the target feeds it runs the
put path never makes as well: gaps between records, any sys flag, queues that do not exist, properties
of any code points (lone surrogates included), more keys than the index file has room for, index state
that claims more room than its buffer has. On every input: it took a prefix of the run, wrote nothing
outside the consume-queue mappings and the index buffer, and the index state it handed back counts what
it wrote; the index bytes equal what ``IndexFile.put_many`` writes for the keys of the records it took
(IndexDispatcher's rules: the guard, rollbacks skipped, ``topic#UNIQ_KEY`` then each KEYS token).
"""

from __future__ import annotations

from typing import Any

from rmq.protocol.common import decode_properties
from rmq.testing.fuzzdrive import Breach, Target
from rmq.testing.fuzztargets import _CQ, _MF, _text

_TOPICS = ("A", "B", "SCHEDULE_TOPIC_XXXX", "C", "T\u00e9")  # "C": no queue of that topic
_CANARY = b"\xee" * 32


class ReputPut(Target):
    """_faststore.reput_put: runs of hand-offs into consume-queue mappings and an index file."""

    name = "reput_put"
    weight = 1
    tokens = (b"TAGS\x01", b"KEYS\x01", b"UNIQ_KEY\x01", b"DELAY\x013", b"\x01", b"\x02", b" ", b"\xfd",
              b"\xed\xa0\x80", b"\xf0\x9f\x98\x80")

    def __init__(self, store: Any) -> None:
        self.reput_put = store.reput_put

    def seeds(self) -> list[bytes]:
        rec = [b"\x00\x00\x00\x01TAGS\x01a\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01u1",
               b"\x01\x00\x04\x01KEYS\x01x",
               b"\x02\x00\x00\x01DELAY\x013\x02KEYS\x01d",
               b"\x04\x00\x08\x01UNIQ_KEY\x01\xc3\xa9",
               b"\x00\x00\x0c\x01KEYS\x01rollback"]
        return [b"\x7e\x00" + b"\xfd".join(rec), b"\x7f\x36" + b"\xfd".join(rec[:2] * 8), b"\x05\x01" + rec[0]]

    @staticmethod
    def _take(data: bytes) -> list[tuple[Any, ...]]:
        take: list[tuple[Any, ...]] = []
        phys, next_q = 1000, {("A", 0): 10}  # where each queue's last mapped file starts (20-byte units)
        for k, chunk in enumerate(data[2:].split(b"\xfd")[:40]):
            a, b, c, d = (chunk[:4] + b"\0\0\0\0")[:4]
            size = 40 + (b >> 1 & 7) * 10
            if d & 0x80:
                phys += 1  # not where the one before ended: a segment roll
            q = b & 1 if b < 0xF0 else 5
            topic = _TOPICS[a % 5]
            qoff = next_q.get((topic, q), 0) if d & 1 else (d * 7 + k)
            next_q[topic, q] = qoff + 1
            ts = (1_700_000_000_000 + k * 1000, 0, -1, 2**62)[d >> 4 & 3]
            take.append((phys, size, topic, q, qoff, c & 0xC, ts, 0, _text(chunk[4:])))
            phys += size
        return take

    def run(self, data: bytes) -> Any:
        from rmq.plugins.storage_mmap.index import IndexFile, index_file_size

        c0, c1 = (data + b"\0\0")[:2]
        slots, entries = (1, 3, 7, 64)[c0 & 3], 1 + (c0 >> 2 & 31)
        take = self._take(data)
        mms = [bytearray(b"\xee" * n) for n in (200, 100, 60, 100)]
        files = [_MF(mms[0], 0, 0, 200, 200), _MF(mms[1], 200, 0, 100, 100), _MF(mms[2], 0, 0, 80, 40),
                 _MF(mms[3], 0, 0, 100, 100)]
        queues = {"A": {0: _CQ([files[0], files[1]]), 1: _CQ([files[2]])}, "B": {0: _CQ([])},
                  "SCHEDULE_TOPIC_XXXX": {0: _CQ([files[3]]), 1: _CQ([])}}
        size = index_file_size(slots, entries)
        bufs = [bytearray(size) + _CANARY for _ in range(2)]
        pure, fast = (IndexFile(_MF(memoryview(b)[:size], 0, 0, 0, 1 << 30), slots, entries)  # type: ignore[arg-type]
                      for b in bufs)
        ix: list[Any] | None = None
        guard = (-1, 1000, 1500, -1)[c1 >> 2 & 3]
        if not c1 & 1:
            reserved = (1 << 30, fast.entries_at + 20 * (c1 >> 4))[c1 >> 1 & 1]
            claimed = entries if c1 < 0xE0 else entries + 50  # more entries than the buffer holds
            ix = [fast.mm, slots, claimed, fast.entries_at, reserved, fast.count, fast.begin_ts, fast.begin_phy,
                  fast.slot_count, fast.end_phy, fast.end_ts, guard]
        n, last_ts = self.reput_put(take, 1000, queues, -7, ix)
        if not 0 <= n <= len(take) or not (last_ts == -7 or any(last_ts == h[6] for h in take[:n])):
            raise Breach(f"reput_put took {n} of {len(take)}, last timestamp {last_ts}")
        for f, mm in zip(files, mms, strict=True):
            if not 0 <= f.wrote <= min(f.size, f.reserved, len(mm)) or f.wrote % 20 or any(mm[f.wrote :].strip(b"\xee")):
                raise Breach(f"a queue file wrote {f.wrote} of {f.size} (reserved {f.reserved}, mapped {len(mm)})")
        if ix is None:
            return n, 0
        if bufs[1][size:] != _CANARY or not all(type(v) is int for v in ix[5:]):
            raise Breach("reput_put wrote past the index buffer or handed back state of another type")
        count = ix[5]
        room = min(claimed, entries, (ix[4] - fast.entries_at) // 20)
        if count < fast.count or (count > fast.count and count > room) or any(bufs[1][fast.entries_at + 20 * count : size]):
            raise Breach(f"index count {fast.count} -> {count} disagrees with its room or the bytes written")
        items = []
        for phys, _size, topic, _q, _qoff, sys_flag, ts, _p, props in take[:n]:
            if phys <= guard:
                continue
            guard = phys
            if sys_flag & 0xC == 12:
                continue
            p = decode_properties(props)
            if p.get("UNIQ_KEY"):
                items.append((topic + "#" + p["UNIQ_KEY"], phys, ts))
            items += [(topic + "#" + k, phys, ts) for k in p.get("KEYS", "").split(" ") if k]
        if items and pure.put_many(items, 0) != len(items):
            raise Breach(f"the pure index took fewer of the {len(items)} keys the compiled call wrote")
        if bufs[0] != bufs[1] or ix[11] != guard or (count, ix[8]) != (pure.count, pure.slot_count):
            raise Breach(f"index: compiled count {count} guard {ix[11]} != pure {pure.count} guard {guard}, or bytes differ")
        return n, min(len(items), 4)
