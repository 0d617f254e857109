"""Start-up recovery of an mmap store: load, validate, repair, and decide where dispatch replays from.

Reference §4.3-4.5, with three additions:

* the commitlog scan resynchronises past a corrupt record instead of cutting there
  (``commitlog``), so a damaged record costs only itself;
* every consume-queue unit is checked (``ConsumeQueue.verify``); damaged queues and
  index files are cut at their first bad entry, never block the start, and are rebuilt
  by replaying dispatch from the end of their last good entry;
* queues missing or behind their records in the scanned commitlog range are found by
  the scan itself (``seen``) and rebuilt the same way: a consume queue is derived data.

``scan_all`` (option ``verify``: "all", or "auto" for a commitlog up to
``verify_all_max_gib``) makes the scans cover the whole store instead of RocketMQ's
windows (the last three segments, or from the checkpoint after a crash); it costs a read
of every commitlog page at start-up. In a window, units pointing below it are checked
for range and order only, and queues missing or behind are found from the window's
records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rmq.plugins.storage_mmap.checkpoint import Checkpoint
from rmq.plugins.storage_mmap.cq_verify import verify_queue
from rmq.plugins.storage_mmap.scan import indexed_keys_at
from rmq.protocol.names import validate_topic

if TYPE_CHECKING:
    from rmq.plugins.storage_mmap.commitlog import CommitLog
    from rmq.plugins.storage_mmap.index import IndexService
    from rmq.plugins.storage_mmap.options import MmapOptions
    from rmq.plugins.storage_mmap.queue_table import ConsumeQueueTable
    from rmq.plugins.storage_mmap.store import MmapMessageStore
    from rmq.roles import BrokerConfig

log = logging.getLogger("rmq.store")

REPAIRS_LOGGED = 20  # rebuilt queues named one line each; the rest are counted in the summary
KEY_WALK = 100_000  # records walked looking for one the index should hold (a missing index file)


def load_and_recover(store: MmapMessageStore) -> bool:
    """Blocking part of a store's start-up (worker thread): §4.3 steps 1-4. True after a crash."""
    abnormal = (store.root / "abort").exists()
    store.checkpoint = Checkpoint(store.root / "checkpoint")
    store.reput.offset, store.recovery = recover_store(
        store.config,
        store.commitlog,
        store.cqs,
        store.index,
        store.checkpoint,
        abnormal,
        verify_all(store.options, store.commitlog),
        store.config.delay_levels_ms(),
        store._stale_span,
        store.checkpoint.confirm_phy if store.config.enableControllerMode else -1,
    )
    if store.config.enableControllerMode:  # RocketMQ 5: the stored confirm offset, clamped into the log
        cl, cp = store.commitlog, store.checkpoint
        store.reput.bound = cp.confirm_phy = min(max(cp.confirm_phy, cl.min_offset), cl.max_offset)
        if store.reput.bound < cl.max_offset:
            log.info("store %s: confirm offset %d; records from there to %d wait for the SyncStateSet",
                     store.root, store.reput.bound, cl.max_offset)
    store.appender.rebuild_queue_table()
    return abnormal


def recover_store(
    cfg: BrokerConfig,
    commitlog: CommitLog,
    cqs: ConsumeQueueTable,
    index: IndexService | None,
    checkpoint: Checkpoint,
    abnormal: bool,
    scan_all: bool,
    delay_levels: Sequence[int],
    stale_span: int,
    held_from: int = -1,
) -> tuple[int, dict[str, Any]]:
    """Blocking (worker thread). Returns (where dispatch replays from, a summary for ``stats()``).
    ``held_from``: controller mode's stored confirm offset; queues that end at or past it are not
    behind, their records wait for it (no repair is reported)."""
    t0 = time.monotonic()
    commitlog.load()
    cqs.load()  # found, not mapped: each queue is mapped below, one at a time, and parked again
    index_missing = index is not None and not index.dir.exists() and bool(commitlog.files)
    if index is not None:
        index.load(check_all=scan_all)
    for cq in cqs:
        cq.recover(scan_all)
        cqs.trim()
    if cfg.messageIndexEnable and cfg.messageIndexSafe:
        min_ts = checkpoint.min_timestamp_index()
    else:
        min_ts = checkpoint.min_timestamp()
    scan = commitlog.recover(
        normal=not abnormal,
        check_crc=cfg.checkCRCOnRecover,
        min_timestamp=min_ts,
        stale_span=stale_span,
        scan_all=scan_all,
        on_cut=log.warning,
    )
    end = scan.end
    cqs.holes = commitlog.holes
    checked = repaired = 0
    cl_min = commitlog.min_offset
    firsts: dict[tuple[str, int], tuple[int, int]] = {}
    if not commitlog.files:
        for topic in list(cqs.queues):
            cqs.delete_topic(topic)
    else:
        t1 = time.monotonic()
        for cq in cqs:  # one mapping per queue for the rest of what start-up needs of it
            c, r = verify_queue(cq, commitlog, scan.scan_start, delay_levels, commitlog.holes)
            checked += c
            repaired += r
            cq.correct_min_offset(cl_min)
            firsts[(cq.topic, cq.queue_id)] = cq.first_unit()
            cqs.trim()
        if checked > 100_000:
            log.info(
                "consume queues: %d units checked against the commitlog in %.2fs",
                checked,
                time.monotonic() - t1,
            )
    if index is not None:
        index.truncate(end)
    cqs.prune_tombstones(cl_min)

    reput = max(cqs.max_phys(), cl_min)
    if abnormal:
        reput = min(reput, max(scan.replay_from, cl_min))
    rebuilt: list[str] = []

    def need(offset: int, what: str) -> None:
        nonlocal reput
        offset = min(max(offset, cl_min), end)
        if offset < end:
            reput = min(reput, offset)
            if len(rebuilt) < REPAIRS_LOGGED:
                log.warning("%s; rebuilding it from commitlog offset %d", what, offset)
            rebuilt.append(what)

    for cq in cqs:
        if cq.damage:
            need(cq.max_phys or cl_min, f"consume queue {cq.name}: {cq.damage}")
    for (topic_b, qid), (first_phys, first_qoff, _last_phys, last_end) in scan.seen.items():
        try:
            topic = topic_b.decode()
        except UnicodeDecodeError:
            continue
        gone = cqs.deleted.get(topic, -1)  # records below a deletion never come back
        if validate_topic(topic) is not None or last_end <= gone:
            continue
        cq = cqs.get(topic, qid)
        if cq is None:
            start = first_phys if scan_all or first_qoff == 0 else cl_min
            need(max(start, gone), f"consume queue {topic}/{qid}: missing")
        elif cq.damage:
            continue
        elif firsts.get((topic, qid), (-1, -1))[0] > first_qoff >= 0 and first_phys < firsts[(topic, qid)][1]:
            cq.drop_all(f"lost its first units (the commitlog has offset {first_qoff} at {first_phys})")
            need(first_phys, f"consume queue {cq.name}: {cq.damage}")
        elif cq.max_phys < last_end and 0 <= held_from <= cq.max_phys:
            reput = min(reput, max(cq.max_phys, cl_min))  # the rest waits for the confirm offset
        elif cq.max_phys < last_end:
            need(cq.max_phys, f"consume queue {cq.name}: behind its records (ends at {cq.max_phys})")
    if index is not None:
        if index_missing:
            index.damage = "missing"
        else:
            _index_gaps(commitlog, index, cl_min, reput)
        if index.damage:
            need(index.guard if index.guard >= 0 else cl_min, f"index: {index.damage}")
    reput = min(max(reput, cl_min), end)
    if rebuilt:
        log.warning(
            "start-up repair: %d structure(s) rebuilt from the commitlog, replaying %d MiB from offset %d",
            len(rebuilt),
            (end - reput) >> 20,
            reput,
        )
    summary = {
        "abnormal": abnormal,
        "commitlog_end": end,
        "replay_from": reput,
        "replay_bytes": end - reput,
        "holes": len(commitlog.holes),
        "hole_bytes": commitlog.holes.total,
        "units_checked": checked,
        "units_repaired": repaired,
        "rebuilt": len(rebuilt),
        "scan_seconds": round(time.monotonic() - t0, 3),
    }
    return reput, summary


def _index_gaps(cl: CommitLog, index: IndexService, cl_min: int, reput: int) -> None:
    """Find index files that went missing: a record the index should hold before the first file,
    between two files, or between the last file and where dispatch resumes. Files from the gap on
    are dropped (``index.damage`` says why; ``index.guard`` is where the rebuild starts)."""
    files = index.files
    if not files or files[0].count <= 1:
        if _keyed_between(cl, cl_min, -1, reput):
            index.drop_from(0, "files missing")
        return
    if files[0].begin_phy > cl_min and _keyed_between(cl, cl_min, -1, files[0].begin_phy):
        index.drop_from(0, f"entries before {files[0].name} are missing")
        return
    for i in range(1, len(files)):
        if files[i].count > 1 and _keyed_between(
            cl, files[i - 1].end_phy, files[i - 1].end_phy, files[i].begin_phy
        ):
            index.drop_from(i, f"a file is missing before {files[i].name}")
            return
    end = index.end_phy
    if end >= 0 and _keyed_between(cl, end, end, reput):
        index.damage = f"behind the commitlog (ends at {end})"


def _keyed_between(cl: CommitLog, start: int, skip: int, stop: int) -> bool:
    """True when a record in ``[start, stop)`` other than the one at ``skip`` has keys to index."""
    pos = start
    holes = cl.holes
    for _ in range(KEY_WALK):
        if pos >= stop or pos >= cl.max_offset:
            return False
        end = holes.find(pos) if holes else -1
        if end >= 0:
            pos = end
            continue
        f = cl.file_for(pos)
        if f is None:
            return False
        rec = indexed_keys_at(f.mm, pos - f.start, f.wrote)
        if rec is None:
            return False
        size, keyed = rec
        if size == 0:
            pos = f.end
            continue
        if keyed and pos != skip:
            return True
        pos += size
    return False


def verify_all(options: MmapOptions, commitlog: CommitLog) -> bool:
    """Whether start-up checks the whole store (``verify``): "auto" decides by the commitlog's size."""
    mode = options.verify
    if mode != "auto":
        return mode == "all"
    d = commitlog.dir
    size = sum(p.stat().st_size for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else 0
    if size <= options.verify_all_max_gib * (1 << 30):
        return True
    log.info(
        "start-up checks cover the recent segments only: the commitlog is %.1f GiB > verify_all_max_gib %g"
        ' (set verify = "all" to check everything)',
        size / (1 << 30),
        options.verify_all_max_gib,
    )
    return False
