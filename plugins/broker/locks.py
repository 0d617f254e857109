"""Queue locks of orderly consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ, reference §3.13, §9.7).

Per group: queue -> (client id, last renewal). A lock is granted when the queue
is free, its holder let it lapse (60 s without renewal) or the requester already
holds it (renewal).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

log = logging.getLogger("rmq.broker")

LOCK_MAX_LIVE_SECONDS = 60.0

Queue = tuple[str, str, int]  # topic, brokerName, queueId


class RebalanceLockManager:
    def __init__(self, max_live: float = LOCK_MAX_LIVE_SECONDS) -> None:
        self.max_live = max_live
        self.table: dict[str, dict[Queue, tuple[str, float]]] = {}

    def try_lock_batch(self, group: str, queues: Iterable[Queue], client_id: str, now: float | None = None) -> list[Queue]:
        """Lock what can be locked; returns every queue of ``queues`` now held by ``client_id``."""
        now = time.monotonic() if now is None else now
        locks = self.table.setdefault(group, {})
        out = []
        for q in queues:
            held = locks.get(q)
            if held is None or held[0] == client_id or held[1] + self.max_live < now:
                if held is not None and held[0] != client_id:
                    log.info("lock of %s in group %s expired for %s, now held by %s", q, group, held[0], client_id)
                locks[q] = (client_id, now)
                out.append(q)
        return out

    def unlock_batch(self, group: str, queues: Iterable[Queue], client_id: str) -> None:
        locks = self.table.get(group)
        if not locks:
            return
        for q in queues:
            held = locks.get(q)
            if held is not None and held[0] == client_id:
                del locks[q]
        if not locks:
            del self.table[group]

    def holder(self, group: str, q: Queue, now: float | None = None) -> str | None:
        now = time.monotonic() if now is None else now
        held = self.table.get(group, {}).get(q)
        if held is None or held[1] + self.max_live < now:
            return None
        return held[0]
