"""POP's durable state: checkpoint and ack records in the cluster's revive topic, through the commitlog.

RocketMQ 5 keeps what a pop handed out as a checkpoint (``PopCheckPoint``, tag ``ck``) and each ack
as an ``AckMsg`` (tag ``ack``; ``bAck`` for a batch) in ``rmq_sys_REVIVE_LOG_<cluster>``, with
``reviveQueueNum`` queues, as JSON with its short field names. The records are ordinary messages, so
they are flushed as the store flushes and the HA copy carries them to slaves (a pop or ack is not held
until a slave has them); a broker that starts or is promoted replays them to learn, per message in flight, its pop time, invisible time and delivery
attempts. Each (group, topic, queue) writes to one revive queue, so its records replay in order.

One addition to RocketMQ's checkpoint: ``a``, the delivery attempts of each message. RocketMQ copies
an expired message to a retry topic and counts attempts there; here a message is handed out again
from its own queue, so its checkpoint carries the count (a restart cannot reset it).

Replay starts, for each revive queue, at the offset the revive group ``CID_RMQ_SYS_REVIVE_GROUP``
committed there: the oldest checkpoint any message still in flight depends on (the revive service
advances it), persisted with the consumer offsets. A stale (lower) start only replays more.
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rmq.kernel import GetStatus, MessageRecord, PutStatus
from rmq.protocol.common import Perm, Prop
from rmq.protocol.message import MessageDecodeError, decode_message
from rmq.protocol.names import SYSTEM_TOPIC_PREFIX

if TYPE_CHECKING:
    from rmq.kernel import BrokerContext

log = logging.getLogger("rmq.broker.pop")

REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
CK_TAG, ACK_TAG, BATCH_ACK_TAG = "ck", "ack", "bAck"
STORED = frozenset((PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
                    PutStatus.SLAVE_NOT_AVAILABLE))  # as appendCheckPoint: stored here, whatever the slave


def revive_topic(cluster: str) -> str:
    """RocketMQ's ``PopAckConstants.buildClusterReviveTopic``."""
    return f"{SYSTEM_TOPIC_PREFIX}REVIVE_LOG_{cluster}"


class PopJournal:
    """Appends checkpoint and ack records and reads them back for a replay."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.topic = revive_topic(ctx.config.brokerClusterName)
        self.queues = max(1, ctx.config.reviveQueueNum)

    def ensure_topic(self) -> None:
        self.ctx.ensure_topic(self.topic, self.queues, Perm.READ_WRITE)

    def revive_qid(self, group: str, topic: str, qid: int) -> int:
        """One revive queue per (group, topic, queue): its records replay in the order they were written."""
        return zlib.crc32(f"{topic}@{group}@{qid}".encode()) % self.queues

    async def checkpoint(self, group: str, topic: str, qid: int, offsets: list[int], attempts: list[int],
                         pop_time: int, invisible: int) -> int:
        """Store one checkpoint (offsets handed out at ``pop_time``); its revive queue offset, -1 if not stored."""
        start = offsets[0]
        body = {"so": start, "pt": pop_time, "it": invisible, "bm": 0, "n": len(offsets), "q": qid, "t": topic,
                "c": group, "ro": -1, "d": [o - start for o in offsets], "bn": self.ctx.config.brokerName,
                "a": attempts}
        return await self._append(CK_TAG, group, topic, qid, body)

    async def ack(self, group: str, topic: str, qid: int, offsets: list[int], pop_time: int) -> bool:
        """Store that ``offsets`` (handed out at ``pop_time``) are done: acked, or moved to the DLQ."""
        bn = self.ctx.config.brokerName
        if len(offsets) == 1:
            body: dict[str, Any] = {"ao": offsets[0], "so": offsets[0], "c": group, "t": topic, "q": qid,
                                    "pt": pop_time, "bn": bn}
            return await self._append(ACK_TAG, group, topic, qid, body) >= 0
        body = {"aol": offsets, "so": min(offsets), "c": group, "t": topic, "q": qid, "pt": pop_time, "bn": bn}
        return await self._append(BATCH_ACK_TAG, group, topic, qid, body) >= 0

    async def _append(self, tag: str, group: str, topic: str, qid: int, body: dict[str, Any]) -> int:
        rq = self.revive_qid(group, topic, qid)
        rec = MessageRecord(self.topic, rq, json.dumps(body, separators=(",", ":")).encode(), 0,
                            f"{Prop.TAGS}\x01{tag}\x02", 0, time.time_ns() // 1_000_000)
        # the store's put, not the broker's: flushed as the store flushes, replicated as the HA copy runs,
        # but not held until a slave has it (RocketMQ 5.3's checkpoint put does not wait for one with its
        # default inSyncReplicas 1): a SYNC_MASTER with a silent slave would answer the pop up to
        # slaveTimeout late, with the invisible time already running from the pop
        result = await self.ctx.store.put_message(rec)
        if result.status not in STORED:
            log.error("pop: a %s record of %s/%s/%d was not stored (%s): it is lost at a restart",
                      tag, group, topic, qid, result.status.name)
            return -1
        return result.queue_offset

    def replay(self, rq: int, start: int) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """(revive queue offset, tag, body) of the records of revive queue ``rq`` from ``start`` on."""
        store = self.ctx.store
        offset = max(start, store.get_min_offset(self.topic, rq))
        while True:
            res = store.get_messages(REVIVE_GROUP, self.topic, rq, offset, 256)
            if res.status is not GetStatus.FOUND or not res.messages:
                if res.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_FOUND_NULL) and \
                        res.next_begin_offset > offset:
                    offset = res.next_begin_offset
                    continue
                return
            for raw, off in zip(res.messages, res.queue_offsets, strict=False):
                try:
                    msg = decode_message(raw, decompress=False)
                    body = json.loads(msg.body)
                except (MessageDecodeError, ValueError) as e:
                    log.error("pop: revive record %s/%d@%d unreadable, skipped: %s", self.topic, rq, off, e)
                    continue
                if isinstance(body, dict):
                    yield off, msg.properties.get(Prop.TAGS, ""), body
            offset = res.next_begin_offset
