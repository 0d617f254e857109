"""Cutting the store back to an earlier commitlog offset: the log, and everything built from it.

A replica whose new master never had its last records (they were not yet replicated when
the old master went away) must drop them before it follows the new master, or the two
logs would disagree at the same offsets. The cut falls on a record boundary, and the
consume queues, the index, the dispatch position, the confirm offset and the queue-offset
table all go back with it, so no reader is ever pointed past the end of the log.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rmq.kernel import ReplicaError
from rmq.protocol.common import MAGIC_BLANK, MAGIC_MESSAGE
from rmq.protocol.record import HEAD2

if TYPE_CHECKING:
    from rmq.plugins.storage_mmap.store import MmapMessageStore

log = logging.getLogger("rmq.store")


async def truncate_log(store: MmapMessageStore, offset: int) -> int:
    """``ReplicaLog.truncate_log``: cut the commitlog (and the queues and index built from it) back
    to ``offset``; returns how many bytes went. ``ReplicaError`` when ``offset`` is below the log's
    start or no record starts there."""
    cl = store.commitlog
    if offset >= cl.max_offset:
        return 0
    if offset < cl.min_offset:
        raise ReplicaError(f"cannot truncate to {offset}: the log starts at {cl.min_offset}")
    f = cl.file_for(offset)
    if f is not None and offset != f.start:  # the cut must fall on a record boundary
        pos = offset - f.start
        total, magic = HEAD2.unpack_from(f.mm, pos) if pos + 8 <= f.wrote else (0, 0)
        if magic not in (MAGIC_MESSAGE, MAGIC_BLANK):
            raise ReplicaError(f"cannot truncate to {offset}: no record starts there")
    await store.reput.wait_dispatched()
    removed = cl.max_offset - offset
    cl._truncate(offset, False, store._stale_span, None)
    cl._prealloc.discard_after(cl.files[-1].end if cl.files else offset - offset % cl.file_size)
    cl.tail = (offset, cl.tail[1])
    cl.flushed_where = min(cl.flushed_where, offset)
    cl.holes.drop_above(offset)
    for cq in store.cqs:
        cq.truncate_phys(offset)
    if store.index is not None:
        store.index.truncate(offset)
    reput = store.reput
    reput.offset = min(reput.offset, offset)
    if reput.bound is not None and reput.bound > offset:
        store.set_confirm_offset(offset)
    reput.handoff.clear()
    store.appender.rebuild_queue_table()
    store.replica.reset()
    log.warning("store %s: commitlog truncated to offset %d (%d bytes removed)", store.root, offset, removed)
    return removed
