"""What the broker's admin codes ask of the mmap store beyond reads and writes.

``delete_topics`` is part of ``MessageStore``; the others are optional capabilities the admin
codes QUERY_CONSUME_QUEUE, CLEAN_EXPIRED_CONSUMEQUEUE and DELETE_EXPIRED_COMMITLOG look for (a
store without them answers those codes with an error).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rmq.kernel import RateLimitedLog
from rmq.plugins.storage_mmap import retention
from rmq.protocol.names import is_system_topic, validate_topic

if TYPE_CHECKING:
    from rmq.plugins.storage_mmap.append import Appender
    from rmq.plugins.storage_mmap.commitlog import CommitLog
    from rmq.plugins.storage_mmap.queue_table import ConsumeQueueTable

log = logging.getLogger("rmq.store")
_limited = RateLimitedLog(log, interval=30.0)


class StoreAdminMixin:
    """The admin face of ``MmapMessageStore``."""

    commitlog: CommitLog
    cqs: ConsumeQueueTable
    appender: Appender

    def delete_topics(self, topics: Sequence[str]) -> None:
        """Forget the topics' queues and remove their directories, confined to the store: a name
        that is not a valid topic is ignored (logged), whatever it contains. Records already in
        the commitlog never bring a deleted topic's queues back (see ``ConsumeQueueTable``)."""
        at = self.commitlog.max_offset
        for t in topics:
            if self.cqs.delete_topic(t, at):
                self.appender.tq.pop(t, None)
            else:
                _limited.warning("delete-topic", "delete_topics: ignored, %s", validate_topic(t))

    def consume_queue_units(self, topic: str, queue_id: int, index: int,
                            count: int) -> tuple[int, int, list[tuple[int, int, int]]] | None:
        """(min offset, max offset, up to ``count`` units (phys, size, tag hash) from ``index``)."""
        cq = self.cqs.get(topic, queue_id)
        if cq is None:
            return None
        lo, hi = cq.min_offset, cq.max_offset
        units = []
        for off in range(max(index, lo), min(index + max(count, 0), hi)):
            u = cq.unit(off)
            if u is not None:
                units.append(u)
        self.cqs.trim()
        return lo, hi, units

    def clean_expired_consume_queues(self, keep: Iterable[str] = ()) -> int:
        """Remove topics (other than ``keep`` and system ones) whose queues hold no live entry: each
        queue's last unit points below the commitlog's first byte. Returns topics removed."""
        cl_min = self.commitlog.min_offset
        spared = set(keep)
        by_topic: dict[str, bool] = {}
        for cq in self.cqs:
            if cq.topic in spared or is_system_topic(cq.topic):
                continue
            last = cq.unit(cq.max_offset - 1) if cq.max_offset > cq.min_offset else None
            expired = cq.max_offset > 0 and (last is None or last[0] < cl_min)
            by_topic[cq.topic] = by_topic.get(cq.topic, True) and expired
            self.cqs.trim()
        gone = [t for t, expired in by_topic.items() if expired]
        if gone:
            log.info("clean expired consume queues: %s", ", ".join(gone[:20]))
            self.delete_topics(gone)
        return len(gone)

    async def delete_expired_now(self) -> int:
        """One retention pass now whatever ``deleteWhen`` says; files younger than fileReservedTime stay."""
        return await retention.clean_expired_files(self, manual=True)  # type: ignore[arg-type]
