"""Per-level delivery of parked messages from ``SCHEDULE_TOPIC_XXXX`` (reference §7.3).

One task walks all levels every poll interval (RocketMQ 4.9 polls each level every
100 ms): read the level's queue from its offset, deliver every message whose time
has come, stop at the first that is not due. Offsets (next queue offset per level)
are persisted in ``config/delayOffset.json`` every flushDelayOffsetInterval and at
shutdown, and clamped into the queue's [min, max] at load.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import anyio

from rmq.kernel import ConfigFile, GetStatus, MessageRecord, PutResult, PutStatus, dumps, record_of
from rmq.protocol.common import Prop, SysFlag, prop_value, real_destination, set_props
from rmq.protocol.message import MessageDecodeError, decode_message
from rmq.protocol.names import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from rmq.protocol.record import queue_offset_at, store_timestamp_at

if TYPE_CHECKING:
    from rmq.kernel import BrokerContext

log = logging.getLogger("rmq.broker.schedule")

BATCH = 32
_TIMER_PROPS = ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")


def record_store_timestamp(rec: bytes | memoryview) -> int:
    return store_timestamp_at(rec, 0)


class DelayLevelStage:
    """Put stage for ``DELAY``: park the message in SCHEDULE_TOPIC_XXXX queue level-1 (§7.2).

    Levels above the configured count are clamped to the last; 0, negative or unparsable
    levels store the message as sent (RocketMQ's behaviour). A prepared transaction half
    is not delayed here: its delay applies when it commits.
    """

    trigger = Prop.DELAY
    priority = 300  # before timer stages: a delay level wins

    def __init__(self, delay_levels: list[int]) -> None:
        self.levels = len(delay_levels)

    def route(self, rec: MessageRecord) -> PutResult | None:
        if rec.sys_flag & SysFlag.TX_PREPARED or rec.topic == SCHEDULE_TOPIC or not self.levels:
            return None
        try:
            level = int(prop_value(rec.properties, Prop.DELAY) or 0)
        except ValueError:
            return None
        if level <= 0:
            return None
        level = min(level, self.levels)
        changes = {Prop.DELAY: str(level), Prop.REAL_TOPIC: rec.topic, Prop.REAL_QID: str(rec.queue_id)}
        if "TIMER_" in rec.properties:  # a delay level wins over timer properties (RocketMQ 5 drops them)
            changes.update(dict.fromkeys(_TIMER_PROPS))
        rec.properties = set_props(rec.properties, changes)
        rec.topic = SCHEDULE_TOPIC
        rec.queue_id = level - 1
        return None


class ScheduleService:
    def __init__(self, broker: BrokerContext, poll_interval: float) -> None:
        self.broker = broker
        self.store = broker.store
        self.delays = list(broker.delay_levels)
        self.poll_interval = poll_interval
        self.offsets: dict[int, int] = {level: 0 for level in range(1, len(self.delays) + 1)}
        self.loaded: set[int] = set()  # levels the file named: they stay in it, as RocketMQ's offset table keeps them
        self.file = ConfigFile(broker.config_dir / "delayOffset.json")
        self.dirty = False
        self.delivered = 0

    # ------------------------------------------------------------------ persistence

    def load(self) -> None:
        doc = self.file.load()
        if isinstance(doc, dict):
            for k, v in (doc.get("offsetTable") or {}).items():
                level = int(k)
                if level in self.offsets:
                    self.offsets[level] = int(v)
                    self.loaded.add(level)
        for level in self.offsets:
            qid = level - 1
            lo = self.store.get_min_offset(SCHEDULE_TOPIC, qid)
            hi = self.store.get_max_offset(SCHEDULE_TOPIC, qid)
            clamped = min(max(self.offsets[level], lo), hi)
            if clamped != self.offsets[level]:
                log.warning("delay level %d offset %d clamped to %d (queue [%d, %d])", level,
                            self.offsets[level], clamped, lo, hi)
                self.offsets[level] = clamped
        pending = sum(self.store.get_max_offset(SCHEDULE_TOPIC, lv - 1) - o for lv, o in self.offsets.items())
        log.info("schedule service: %d delay levels, %d messages pending", len(self.delays), pending)

    def encode(self) -> str:
        """``delayOffset.json``: as RocketMQ writes it, only the levels that ever moved (or were in the file);
        a level it never delivered from has no entry (a 4.9.8 broker reading the file takes none as 0)."""
        table = {str(k): v for k, v in self.offsets.items() if v or k in self.loaded}
        return dumps({"offsetTable": table}, pretty=True, int_keys=True)

    def persist(self) -> None:
        try:
            self.file.write(self.encode())
            self.dirty = False
        except OSError as e:
            log.error("cannot persist %s: %s", self.file.path, e)

    # ------------------------------------------------------------------ delivery

    async def run(self) -> None:
        flush_every = max(self.broker.config.flushDelayOffsetInterval, 100) / 1000
        next_flush = time.monotonic() + flush_every
        while True:
            more = False
            for level in self.offsets:
                try:
                    more |= await self.deliver_level(level)
                except Exception:
                    log.exception("delay level %d: delivery failed; retrying in 10 s", level)
                    await anyio.sleep(10)
            if self.dirty and time.monotonic() >= next_flush:
                text = self.encode()
                self.dirty = False
                try:
                    await anyio.to_thread.run_sync(self.file.write, text)
                except OSError as e:
                    log.error("cannot persist %s: %s", self.file.path, e)
                    self.dirty = True
                next_flush = time.monotonic() + flush_every
            await anyio.sleep(0 if more else self.poll_interval)

    async def deliver_level(self, level: int) -> bool:
        """Deliver due messages of one level; True when a full batch went out (more may be due)."""
        qid = level - 1
        offset = self.offsets[level]
        res = self.store.get_messages("", SCHEDULE_TOPIC, qid, offset, BATCH)
        if res.status is GetStatus.OFFSET_TOO_SMALL:
            self._move(level, res.min_offset)
            return True
        if res.status is GetStatus.OFFSET_OVERFLOW_BADLY:
            self._move(level, res.max_offset)
            return False
        if res.status is GetStatus.OFFSET_FOUND_NULL and res.next_begin_offset > offset:
            self._move(level, res.next_begin_offset)
            return True
        if res.status is not GetStatus.FOUND:
            return False
        delay = self.delays[level - 1]
        now = time.time_ns() // 1_000_000
        for rec in res.messages:
            deliver = record_store_timestamp(rec) + delay
            if deliver > now + delay:  # stored "in the future" (clock moved back): deliver now
                deliver = now
            if deliver > now:
                return False
            qoff = queue_offset_at(rec, 0)
            if not await self._deliver(level, rec):
                return False
            self.offsets[level] = qoff + 1
            self.dirty = True
        return len(res.messages) >= BATCH

    def _move(self, level: int, offset: int) -> None:
        log.warning("delay level %d offset %d moved to %d", level, self.offsets[level], offset)
        self.offsets[level] = offset
        self.dirty = True

    async def _deliver(self, level: int, rec: bytes | memoryview) -> bool:
        """Re-put one parked message to its real topic; False means retry later (offset not advanced)."""
        try:
            msg = decode_message(bytes(rec), decompress=False)
        except MessageDecodeError as e:
            log.error("delay level %d: skipping unreadable record: %s", level, e)
            return True
        real = real_destination(msg.properties, (TRANS_HALF_TOPIC,))
        if real is None:
            log.warning("delay level %d: dropping parked message without a real destination (%s, %s)",
                        level, msg.properties.get(Prop.REAL_TOPIC), msg.properties.get(Prop.REAL_QID))
            return True
        real_topic, real_qid = real
        # as 4.9: the delivered copy keeps the parked properties, DELAY and REAL_* included (RocketMQ
        # serialises them before it clears DELAY in memory); put to the store directly, past the
        # pipeline, so DELAY does not park it again
        self.broker.adopt_due_topic(real_topic, real_qid, f"delay level {level}")  # not synced before a promotion
        record = record_of(msg, real_topic, real_qid, {})
        result = await self.store.put_message(record)
        if result.status is PutStatus.PUT_OK or result.status is PutStatus.FLUSH_DISK_TIMEOUT:
            self.delivered += 1
            return True
        if result.status is PutStatus.MESSAGE_ILLEGAL or result.status is PutStatus.PROPERTIES_SIZE_EXCEEDED:
            log.error("delay level %d: parked message for %s refused as illegal (%s); dropped", level,
                      real_topic, result.remark)
            return True
        log.warning("delay level %d: re-put to %s failed: %s %s; retrying", level, real_topic,
                    result.status.name, result.remark)
        return False
