"""Disk guards and expired-file deletion of the mmap store (reference §6), RocketMQ's thresholds.

* ``diskMaxUsedSpaceRatio`` (75 %): above it a pass deletes expired files at any hour.
* ``diskSpaceCleanForciblyRatio`` (85 %): above it a pass deletes the oldest files even
  if they have not expired (a *forced clean*). What that destroys is reported: per
  (topic, queue) the minimum offset before and after, in one log line and to the
  store's optional ``on_forced_clean`` callback (the broker turns it into consumer
  groups and unconsumed message counts).
* ``diskSpaceWarningLevelRatio`` (90 %): the store refuses puts until usage drops.

Also the retry task of a store whose next commitlog segment could not be created.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING

import anyio

from rmq.plugins.storage_mmap.mapped_file import full_remark

if TYPE_CHECKING:
    from rmq.plugins.storage_mmap.store import MmapMessageStore

log = logging.getLogger("rmq.store")

REPORT_QUEUES = 10  # queues named in the forced-clean line; the rest are counted


def default_disk_probe(store: MmapMessageStore) -> float:
    """Used fraction of the fullest partition holding the commitlog or the consume queues, as
    RocketMQ computes it: used / (used + usable), so root-reserved blocks count as neither."""
    ratios = []
    for d in {store.commitlog.dir, store.cqs.root}:
        try:
            st = os.statvfs(d)
        except OSError:
            return 1.0  # unreadable counts as full: clean up rather than run out
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        usable = st.f_bavail * st.f_frsize
        if used + usable > 0:
            ratios.append(used / (used + usable))
    return max(ratios, default=0.0)


async def retention_loop(store: MmapMessageStore) -> None:
    """A retention pass every cleanResourceInterval ms, for as long as the store runs."""
    interval = max(store.config.cleanResourceInterval, 100) / 1000
    while True:
        await anyio.sleep(interval)
        try:
            await clean_expired_files(store)
        except Exception:
            log.exception("retention pass failed")


async def disk_retry_loop(store: MmapMessageStore) -> None:
    """While a segment cannot be reserved, try again every ``disk_retry_ms``; clear the error once
    it exists (the next put takes it), which resumes writes."""
    interval = store.options.disk_retry_ms / 1000
    while True:
        if not store._alloc_error:
            store._retry = anyio.Event()
            await store._retry.wait()
            continue
        await anyio.sleep(interval)
        try:
            await anyio.to_thread.run_sync(store.commitlog.prepare_writable)
        except OSError as e:
            store._alloc_error = full_remark(e, "create the next commitlog segment")
            continue
        store._alloc_error = ""
        store._update_writable()


def check_disk(store: MmapMessageStore) -> float:
    """Probe disk usage; at diskSpaceWarningLevelRatio the store refuses puts until it drops."""
    ratio = float(store.disk_usage_probe())
    store._disk_ratio = ratio
    level = store.config.diskSpaceWarningLevelRatio
    if ratio >= level:
        store._disk_full = (
            f"disk full: {ratio * 100:.1f}% used under {store.commitlog.dir}"
            f" (diskSpaceWarningLevelRatio {level * 100:.0f}%); writes refused until space is freed"
        )
    else:
        store._disk_full = ""
    store._update_writable()
    return ratio


async def clean_expired_files(store: MmapMessageStore, force: bool = False, manual: bool = False) -> int:
    """One retention pass (§6). Returns commitlog segments deleted; consume-queue and index files
    behind the new minimum are deleted too (counted in ``stats()``)."""
    if store.checkpoint is None:
        return 0
    cfg = store.config
    ratio = check_disk(store)
    max_used = min(max(cfg.diskMaxUsedSpaceRatio, 10), 95) / 100
    hours = {h.strip() for h in cfg.deleteWhen.split(";") if h.strip()}
    now_hour = time.strftime("%H")
    time_up = now_hour in hours or str(int(now_hour)) in hours
    space_full = ratio > max_used
    if not (force or manual or time_up or space_full):
        return 0
    forcibly = cfg.cleanFileForciblyEnable and ratio > cfg.diskSpaceCleanForciblyRatio
    clean_now = force or forcibly
    cl = store.commitlog
    if len(cl.files) > 1 and cl.flushed_where < cl.files[-1].start:
        store.durable.advance(await anyio.to_thread.run_sync(cl.flush, 0))
    before = {(cq.topic, cq.queue_id): cq.min_offset for cq in store.cqs} if clean_now else {}
    first = cl.min_offset
    reserved = cfg.fileReservedTime * 3600
    now = time.time()
    deleted = 0
    limit = len(cl.files) if force else 10
    while len(cl.files) > 1 and deleted < limit:
        f = cl.files[0]
        if f.end > cl.flushed_where or f.end > store.reput.offset:
            break
        if not clean_now:
            try:
                mtime = f.path.stat().st_mtime
            except OSError:
                mtime = 0.0
            if now < mtime + reserved:
                break
        log.info("retention: deleting commitlog segment %s", f.path)
        cl.delete_first()
        deleted += 1
        if not force and cfg.deleteCommitLogFilesInterval > 0:
            await anyio.sleep(cfg.deleteCommitLogFilesInterval / 1000)
    if deleted:
        store._n_deleted["commitlog"] += deleted
        cl_min = cl.min_offset
        pause = 0 if force else cfg.deleteConsumeQueueFilesInterval / 1000
        for cq in list(store.cqs):
            n = cq.delete_expired(cl_min)
            store._n_deleted["consumequeue"] += n
            cq.correct_min_offset(cl_min)
            store.cqs.trim()  # each queue is mapped to be checked: keep the descriptors bounded
            if n and pause > 0:  # RocketMQ's deleteConsumeQueueFilesInterval: spread the unlinks out
                await anyio.sleep(pause)
        if store.index is not None:
            store._n_deleted["index"] += store.index.delete_expired(cl_min)
        store.cqs.prune_tombstones(cl_min)
        if clean_now:
            _report(store, before, first, cl_min, ratio if forcibly else -1.0)
        check_disk(store)
    return deleted


def _report(
    store: MmapMessageStore, before: dict[tuple[str, int], int], first: int, cl_min: int, ratio: float
) -> None:
    """One line naming what a clean that ignored age destroyed, then ``store.on_forced_clean``."""
    lost: dict[tuple[str, int], tuple[int, int]] = {}
    for cq in store.cqs:
        key = (cq.topic, cq.queue_id)
        old = before.get(key)
        if old is not None and cq.min_offset > old:
            lost[key] = (old, cq.min_offset)
    why = (
        f"disk {ratio * 100:.1f}% used > diskSpaceCleanForciblyRatio {store.config.diskSpaceCleanForciblyRatio * 100:.0f}%"
        if ratio >= 0
        else "forced by request"
    )
    named = ", ".join(f"{t}/{q} {a}->{b}" for (t, q), (a, b) in sorted(lost.items())[:REPORT_QUEUES])
    more = f" (+{len(lost) - REPORT_QUEUES} more)" if len(lost) > REPORT_QUEUES else ""
    log.warning(
        "forced clean (%s): deleted commitlog [%d, %d) before expiry; queue minimum offsets moved: %s%s",
        why,
        first,
        cl_min,
        named or "none",
        more,
    )
    callback = store.on_forced_clean
    if callback is not None and lost:
        try:
            callback(lost)
        except Exception:
            log.exception("on_forced_clean callback failed")
