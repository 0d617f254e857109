"""Start-up check of a consume queue against the commitlog (``recovery`` calls it per queue).

Consume queues are derived data: a unit that cannot be trusted is repaired from its
record when the record proves what it should be, and otherwise the queue is cut there
and rebuilt by replaying dispatch. See :func:`verify_queue` for the rules.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rmq.kernel import RateLimitedLog
from rmq.plugins.storage_mmap.consume_queue import INT_MAX, UNIT, UNIT_SIZE
from rmq.plugins.storage_mmap.scan import MIN_RECORD, record_unit, unit_agrees

if TYPE_CHECKING:
    from rmq.plugins.storage_mmap.commitlog import CommitLog, Holes
    from rmq.plugins.storage_mmap.consume_queue import ConsumeQueue

log = logging.getLogger("rmq.store")
_limited = RateLimitedLog(log, interval=30.0)


def verify_queue(
cq: ConsumeQueue, cl: CommitLog, scan_start: int, delay_levels: Sequence[int], holes: Holes
) -> tuple[int, int]:
    """Check every unit against the commitlog; repair what can be repaired in place.

    Every unit must point inside the commitlog's valid data, after its predecessor's
    record. One pointing at or after ``scan_start`` (the range recovery just validated)
    must point at the start of a record, and that record must be this unit's:

    * a record in a corrupt range: the unit becomes a filler unit (a hole);
    * the record's topic, queue id and queue offset name this unit: size and tags
      code are rewritten from the record if they differ;
    * they name another unit, and that unit points here too: this unit is wrong
      (its offset field was damaged): the queue is cut here and rebuilt by replay;
    * they name another unit that does not point here: the record's header is what
      was damaged (the CRC covers only the body); the unit is right and kept.

    Returns ``(units checked against records, units repaired in place)``.
    """
    end = cl.max_offset
    cl_min = cl.min_offset
    topic_b = cq.topic.encode()
    qid = cq.queue_id
    checked = repaired = 0
    prev_end = -1  # end of the previous real unit's record
    has_holes = bool(holes)
    segs = cl.files
    fsize = cl.file_size
    first_idx = segs[0].start // fsize if segs else 0
    cache: dict[bytes, int] = {}
    for f in list(cq.files):
        for k, (phys, size, tags) in enumerate(UNIT.iter_unpack(f.mm[0 : f.wrote])):
            if phys == 0 and size == INT_MAX:
                continue
            here = f.start + k * UNIT_SIZE
            if phys < 0 or size < MIN_RECORD or phys + size > end or phys < prev_end:
                cq.broken(here, f"unit ({phys}, {size}) out of range or order")
                return checked, repaired
            if phys < scan_start or phys < cl_min:
                prev_end = phys + size
                continue
            checked += 1
            if has_holes and holes.find(phys) >= 0:
                UNIT.pack_into(f.mm, k * UNIT_SIZE, 0, INT_MAX, 0)
                repaired += 1
                log.warning(
                    "consume queue %s: offset %d pointed at a corrupt record; now a hole",
                    cq.name,
                    here // UNIT_SIZE,
                )
                continue
            seg = segs[phys // fsize - first_idx]
            if unit_agrees(
                seg.mm,
                phys - seg.start,
                seg.wrote,
                (phys, size, tags),
                qid,
                here // UNIT_SIZE,
                topic_b,
                cache,
            ):
                prev_end = phys + size
                continue
            ru = record_unit(seg.mm, phys - seg.start, seg.wrote, delay_levels, cache)
            if ru is None or ru[3] != phys:
                cq.broken(here, f"unit ({phys}, {size}) points at no record")
                return checked, repaired
            total, rqid, rqoff, _p, rtopic, want_tags = ru
            if rqid != qid or rtopic != topic_b or rqoff != here // UNIT_SIZE:
                if total != size or _claimed_elsewhere(cq, rtopic, rqid, rqoff, phys, here):
                    cq.broken(here, f"unit points at the record of {rtopic!r}/{rqid} offset {rqoff}")
                    return checked, repaired
                _limited.warning(
                    "cq-header",
                    "commitlog record at %d (consume queue %s offset %d) has a damaged header: it says %r/%d offset %d",
                    phys,
                    cq.name,
                    here // UNIT_SIZE,
                    rtopic,
                    rqid,
                    rqoff,
                )
            if total != size or want_tags != tags:
                UNIT.pack_into(f.mm, k * UNIT_SIZE, phys, total, want_tags)
                repaired += 1
                log.warning(
                    "consume queue %s: offset %d had a damaged size/tags code; rewritten from its record",
                    cq.name,
                    here // UNIT_SIZE,
                )
            prev_end = phys + total
    if repaired:
        cq.update_max_phys()
    return checked, repaired

def _claimed_elsewhere(cq: ConsumeQueue, topic_b: bytes, qid: int, qoff: int, phys: int, here: int) -> bool:
    """True when the queue unit a record's header names (other than ``here``) points at ``phys``."""
    try:
        topic = topic_b.decode()
    except UnicodeDecodeError:
        return False
    owner = cq.table.get(topic, qid) if cq.table is not None else None
    if owner is None or (owner is cq and qoff * UNIT_SIZE == here) or qoff < 0:
        return False
    unit = owner.unit(qoff)
    return unit is not None and unit[0] == phys
