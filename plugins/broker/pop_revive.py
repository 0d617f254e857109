"""The POP revive service: a MASTER role service (``rmq_role_lifespan``), as RocketMQ's PopReviveService.

On promotion (or start as master) it replays the revive topic into the pop processor, so messages
in flight keep their invisible time, attempts and receipts across a restart or a failover; pops
wait (SYSTEM_BUSY) until it is done. While master it advances, every ``REVIVE_COMMIT_S``, each
revive queue's start point (the revive group's offset) to the oldest checkpoint still needed, so a
replay stays as short as the state in flight. On demotion it persists that point and drops the
state: a slave serves no pops, and the next promotion replays what the new master wrote meanwhile.

Where RocketMQ's service copies an expired message into ``%RETRY%<group>_<topic>``, here an expired
message is handed out again from its own queue by the next pop (``pop.py``): the same guarantees
(redelivered once its invisible time is over, never before, DLQ after ``retryMaxTimes``) with no copy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio

from rmq.plugins.broker.pop_store import REVIVE_GROUP, PopJournal

if TYPE_CHECKING:
    from rmq.kernel import Kernel
    from rmq.plugins.broker.pop import PopProcessor

log = logging.getLogger("rmq.broker.pop")

REVIVE_COMMIT_S = 1.0


class PopReviveService:
    def __init__(self, pop: PopProcessor) -> None:
        self.pop = pop

    def load(self) -> int:
        """Replay every revive queue from its committed point into the pop state; records replayed."""
        pop = self.pop
        journal = pop.journal = PopJournal(pop.ctx)
        journal.ensure_topic()
        pop.queues.clear()
        n = 0
        for rq in range(journal.queues):
            start = max(pop.ctx.query_offset(REVIVE_GROUP, journal.topic, rq), 0)
            for off, tag, body in journal.replay(rq, start):
                pop.apply_record(off, tag, body)
                n += 1
        return n

    def commit_points(self) -> None:
        """Each revive queue's point: the oldest checkpoint a message in flight depends on, else its end."""
        pop, journal = self.pop, self.pop.journal
        if journal is None:
            return
        store = pop.ctx.store
        points = [store.get_max_offset(journal.topic, rq) for rq in range(journal.queues)]
        ends = list(points)
        for (group, topic, qid), st in pop.queues.items():
            if not st.inflight:
                continue
            rq = journal.revive_qid(group, topic, qid)
            for f in st.inflight.values():
                points[rq] = min(points[rq], f.ck if f.ck >= 0 else ends[rq])  # -1: its checkpoint is being stored
        for rq, point in enumerate(points):
            if point != pop.ctx.query_offset(REVIVE_GROUP, journal.topic, rq):
                pop.ctx.commit_offset(REVIVE_GROUP, journal.topic, rq, point)

    async def run(self) -> None:
        while True:
            await anyio.sleep(REVIVE_COMMIT_S)
            self.commit_points()


@asynccontextmanager
async def pop_revive(kernel: Kernel, pop: PopProcessor) -> AsyncIterator[None]:
    """The master's revive service: replay, then keep the replay points current; stop and persist them."""
    svc = PopReviveService(pop)
    t0 = time.monotonic()
    n = svc.load()
    pop.loaded = True
    log.info("pop: %d revive records replayed in %.0f ms: %d messages in flight", n,
             (time.monotonic() - t0) * 1000, sum(len(s.inflight) for s in pop.queues.values()))
    try:
        async with kernel.background(svc.run):
            yield
    finally:
        svc.commit_points()
        pop.loaded = False
        pop.queues.clear()
        pop.journal = None
