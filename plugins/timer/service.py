"""The timer service: staging queue → timer log + in-memory wheel → real topics, on time.

Three loops on the master (reference §1.4-§1.6, our own structure):

* enqueue: reads ``rmq_sys_wheel_timer`` queue 0 from its offset; each parked message is
  appended to the timer log and to its slot in memory, or re-put at once when its slot has
  already fired (late staging after a restart, a slow enqueue).
* dequeue: at every precision boundary, fires the slots now due (slot S is due when
  now >= S + precision, so never early): delete markers first, then each message is loaded
  from the commitlog and re-put to REAL_TOPIC/REAL_QID unless a marker recalled it.
* checkpoint: every ``timerFlushIntervalMs`` the log is fsynced, then ``timercheck`` records
  the staging offset whose messages are all logged or delivered, and the read time below
  which every slot was delivered.

Recovery keeps the logged units below the checkpoint's staging offset whose slot has not
been delivered, cuts the log there, and replays the staging queue from that offset. A crash
can therefore deliver a message twice, never lose one (at-least-once, as RocketMQ).
"""

from __future__ import annotations

import heapq
import logging
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import anyio

from rmq.kernel import ConfigFile, GetStatus, PutStatus, clock, dumps, record_of
from rmq.plugins.timer.log import (
    MAGIC_DELETE,
    MAGIC_NORMAL,
    UNIT,
    TimerCheckpoint,
    TimerLog,
)
from rmq.plugins.timer.stage import (
    TIMER_DEL_UNIQKEY,
    TIMER_DEQUEUE_MS,
    TIMER_ENQUEUE_MS,
    TIMER_OUT_MS,
)
from rmq.protocol.common import Prop, real_destination
from rmq.protocol.message import MessageDecodeError, decode_message
from rmq.protocol.names import TIMER_TOPIC, TRANS_HALF_TOPIC
from rmq.protocol.record import physical_offset_at

if TYPE_CHECKING:
    from rmq.kernel import BrokerContext

log = logging.getLogger("rmq.broker.timer")

BATCH = 64
PUT_CONCURRENCY = 16
_RETRYABLE = frozenset((PutStatus.SERVICE_NOT_AVAILABLE, PutStatus.CREATE_MAPPED_FILE_FAILED,
                        PutStatus.OS_PAGECACHE_BUSY, PutStatus.UNKNOWN_ERROR))
_DELIVERED = frozenset((PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
                        PutStatus.SLAVE_NOT_AVAILABLE))
NEVER_ENQUEUED = str(2**63 - 1)  # TIMER_ENQUEUE_MS of a message that was due when it was staged


def now_ms() -> int:
    return clock.now_ms()  # the nemesis's clock jumps reach the timer through this seam


class TimerService:
    def __init__(self, broker: BrokerContext, precision: int, flush_interval_ms: int, log_file_size: int,
                 retry_until_success: bool) -> None:
        self.broker = broker
        self.store = broker.store
        self.p = precision
        self.flush_interval = max(flush_interval_ms, 10) / 1000
        self.retry_until_success = retry_until_success
        root = broker.config.store_root()
        self.log = TimerLog(root / "timerlog", log_file_size)
        self.ckpt = TimerCheckpoint(broker.config_dir / "timercheck")
        self.metrics_file = ConfigFile(broker.config_dir / "timermetrics")
        self.wheel: dict[int, list[tuple[int, int, int]]] = {}
        self._heap: list[int] = []
        self.read_time = 0  # slots below it have been taken for delivery
        self.committed_read_time = 0  # slots below it are delivered
        self.queue_offset = 0  # staging messages below it are logged or delivered
        self.timing: dict[str, int] = defaultdict(int)  # waiting messages per real topic
        self.timing_ts: dict[str, int] = {}
        self.file_max_slot: dict[int, int] = {}
        self.delivered = 0
        self.dropped = 0
        self.recalled = 0
        self._limiter = anyio.Semaphore(PUT_CONCURRENCY)

    # ------------------------------------------------------------------ state

    def slot_count(self, slot: int) -> int:
        entries = self.wheel.get(slot)
        return len(entries) if entries else 0

    def pending(self) -> int:
        return sum(len(v) for v in self.wheel.values())

    def _add(self, slot: int, phys: int, size: int, magic: int, pos: int) -> None:
        entries = self.wheel.get(slot)
        if entries is None:
            entries = self.wheel[slot] = []
            heapq.heappush(self._heap, slot)
        entries.append((phys, size, magic))
        start = pos - pos % self.log.file_size
        if self.file_max_slot.get(start, -1) < slot:
            self.file_max_slot[start] = slot

    # ------------------------------------------------------------------ recovery

    def recover(self) -> None:
        has = self.ckpt.load()
        doc = self.metrics_file.load()
        if isinstance(doc, dict):
            for topic, v in (doc.get("timingCount") or {}).items():
                if isinstance(v, dict) and isinstance(v.get("count"), int) and v["count"] > 0:
                    self.timing[str(topic)] = v["count"]
                    self.timing_ts[str(topic)] = int(v.get("timeStamp") or 0)
        floor = now_ms() // self.p * self.p - 604_800 * self.p + 60 * self.p  # RocketMQ's bound on overdue
        self.read_time = self.committed_read_time = max(self.ckpt.read_time, floor) if has else now_ms() // self.p * self.p
        q = self.ckpt.queue_offset
        kept = cut = 0
        fs = self.log.file_size
        trusted = self.ckpt.flush_pos if has else 0  # units past it were never covered by a checkpoint
        for pos, (slot, phys, size, magic, qoff) in self.log.scan():
            if qoff >= q or pos >= trusted:
                cut = pos
                break
            if slot >= self.read_time:
                self._add(slot, phys, size, magic, pos)
                kept += 1
            elif self.file_max_slot.get(pos - pos % fs, -1) < slot:
                self.file_max_slot[pos - pos % fs] = slot
        else:
            cut = self.log.end
        if cut != self.log.end or self.log.end != self.ckpt.flush_pos:
            log.info("timer log cut at %d (end %d, checkpoint %d): staging replays from offset %d",
                     cut, self.log.end, self.ckpt.flush_pos, q)
        self.log.truncate(cut)
        lo = self.store.get_min_offset(TIMER_TOPIC, 0)
        hi = self.store.get_max_offset(TIMER_TOPIC, 0)
        self.queue_offset = min(max(q, lo), hi)
        log.info("timer: %d messages waiting, read time %d, staging offset %d (queue [%d, %d]), precision %d ms",
                 kept, self.read_time, self.queue_offset, lo, hi, self.p)

    # ------------------------------------------------------------------ loops

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._enqueue_loop)
            tg.start_soon(self._dequeue_loop)
            tg.start_soon(self._checkpoint_loop)

    async def _enqueue_loop(self) -> None:
        while True:
            try:
                more = await self.enqueue_batch()
            except Exception:
                log.exception("timer enqueue failed; retrying in 1 s")
                await anyio.sleep(1)
                continue
            if not more:
                await anyio.sleep(self.p / 10_000)  # RocketMQ's idle wait: 100 ms at 1 s precision

    async def enqueue_batch(self) -> bool:
        q = self.queue_offset
        res = self.store.get_messages("", TIMER_TOPIC, 0, q, BATCH)
        if res.status is GetStatus.OFFSET_TOO_SMALL:
            log.warning("timer staging offset %d below the queue's minimum %d: moved", q, res.min_offset)
            self.queue_offset = res.min_offset
            return True
        if res.status is GetStatus.OFFSET_FOUND_NULL and res.next_begin_offset > q:
            self.queue_offset = res.next_begin_offset
            return True
        if res.status is not GetStatus.FOUND:
            return False
        units = []
        pos = self.log.end
        for raw, qoff in zip(res.messages, res.queue_offsets, strict=False):
            try:
                msg = decode_message(bytes(raw), decompress=False)
                slot = int(msg.properties[TIMER_OUT_MS])
                real = msg.properties[Prop.REAL_TOPIC]
            except (MessageDecodeError, KeyError, ValueError) as e:
                log.error("timer: skipping unreadable staged message at queue offset %d: %s", qoff, e)
                continue
            magic = MAGIC_DELETE if TIMER_DEL_UNIQKEY in msg.properties else MAGIC_NORMAL
            phys = physical_offset_at(raw, 0)
            if slot < self.read_time:  # its slot already fired: due now
                if magic == MAGIC_NORMAL:
                    await self._deliver(msg, NEVER_ENQUEUED)
                continue
            units.append(UNIT.pack(slot, phys, len(raw), magic, qoff))
            self._add(slot, phys, len(raw), magic, pos)
            pos += UNIT.size
            if magic == MAGIC_NORMAL:
                self.timing[real] += 1
                self.timing_ts[real] = now_ms()
        if units:
            self.log.append(b"".join(units))
        if res.queue_offsets:
            self.queue_offset = res.queue_offsets[-1] + 1
        return len(res.messages) >= BATCH

    async def _dequeue_loop(self) -> None:
        while True:
            now = now_ms()
            target = now // self.p * self.p  # every slot below it is due
            if target > self.read_time:
                due = []
                while self._heap and self._heap[0] < target:
                    due.append(heapq.heappop(self._heap))
                self.read_time = target
                for slot in due:
                    entries = self.wheel.pop(slot, None)
                    if entries:
                        try:
                            await self.fire(slot, entries)
                        except Exception:
                            log.exception("timer: slot %d failed", slot)
                self.committed_read_time = target
            await anyio.sleep(max(0.001, (self.read_time + self.p - now_ms()) / 1000))

    async def fire(self, slot: int, entries: list[tuple[int, int, int]]) -> None:
        deleted: set[str] = set()
        normal = []
        for phys, size, magic in entries:
            if magic == MAGIC_DELETE:
                msg = self._load(phys, size)
                if msg is not None and msg.properties.get(TIMER_DEL_UNIQKEY):
                    deleted.add(msg.properties[TIMER_DEL_UNIQKEY])
            else:
                normal.append((phys, size))
        enqueued = str(slot)
        async with anyio.create_task_group() as tg:
            for phys, size in normal:
                msg = self._load(phys, size)
                if msg is None:
                    self.dropped += 1
                    continue
                real = msg.properties.get(Prop.REAL_TOPIC, "")
                self._count_out(real)
                if deleted and f"{real}+{msg.properties.get(Prop.UNIQ_KEY, '')}" in deleted:
                    self.recalled += 1
                    continue
                await self._limiter.acquire()
                tg.start_soon(self._deliver_released, msg, enqueued)

    async def _deliver_released(self, msg: Any, enqueued: str) -> None:
        try:
            await self._deliver(msg, enqueued)
        finally:
            self._limiter.release()

    def _count_out(self, topic: str) -> None:
        n = self.timing.get(topic, 0) - 1
        if n > 0:
            self.timing[topic] = n
        else:
            self.timing.pop(topic, None)
            self.timing_ts.pop(topic, None)

    def _load(self, phys: int, size: int) -> Any:
        raw = self.store.look_message_by_offset(phys)
        if raw is None or len(raw) != size:
            log.error("timer: parked message at commitlog offset %d is gone (retention or a cut log); dropped", phys)
            return None
        try:
            msg = decode_message(bytes(raw), decompress=False)
        except MessageDecodeError as e:
            log.error("timer: parked message at commitlog offset %d unreadable (%s); dropped", phys, e)
            return None
        if msg.topic != TIMER_TOPIC:
            log.error("timer: commitlog offset %d holds a %s message, not a parked one; dropped", phys, msg.topic)
            return None
        return msg

    async def _deliver(self, msg: Any, enqueued: str) -> None:
        """Re-put one parked message to its real topic (RocketMQ keeps REAL_* and TIMER_OUT_MS on it)."""
        real = real_destination(msg.properties, (TIMER_TOPIC, TRANS_HALF_TOPIC))
        if real is None:
            log.warning("timer: dropping a parked message without a real destination (%s, %s)",
                        msg.properties.get(Prop.REAL_TOPIC), msg.properties.get(Prop.REAL_QID))
            self.dropped += 1
            return
        real_topic, real_qid = real
        self.broker.adopt_due_topic(real_topic, real_qid, "timer")  # a promoted slave may not have synced it
        tries = 0
        while True:
            # WAIT=false as 5.3.3's convertMessage: a due timer never waits for a slave (or fails without one)
            rec = record_of(msg, real_topic, real_qid, {TIMER_ENQUEUE_MS: enqueued, TIMER_DEQUEUE_MS: str(now_ms()),
                                                        Prop.WAIT: "false"})
            result = await self.broker.put(rec)
            if result.status in _DELIVERED:
                self.delivered += 1
                return
            tries += 1
            if result.status not in _RETRYABLE or (tries >= 3 and not self.retry_until_success):
                log.error("timer: delivery to %s refused (%s %s) after %d tries; dropped", real_topic,
                          result.status.name, result.remark, tries)
                self.dropped += 1
                return
            await anyio.sleep(0.5 * self.p / 1000)

    async def _checkpoint_loop(self) -> None:
        while True:
            await anyio.sleep(self.flush_interval)
            try:
                await self.checkpoint()
            except OSError as e:
                log.error("timer checkpoint failed: %s", e)

    async def checkpoint(self) -> None:
        q = self.queue_offset
        read_time = self.committed_read_time
        pos = await anyio.to_thread.run_sync(self.log.sync)
        c = self.ckpt
        if (c.read_time, c.queue_offset, c.flush_pos) != (read_time, q, pos):
            c.read_time, c.flush_pos, c.queue_offset, c.master_queue_offset = read_time, pos, q, q
            c.counter += 1
            c.timestamp = now_ms()
            await anyio.to_thread.run_sync(c.save)
            dead = [s for s, m in self.file_max_slot.items() if m < read_time and s + self.log.file_size <= pos]
            if dead:
                self.log.delete_files(dead)
                for s in dead:
                    self.file_max_slot.pop(s, None)
            text = self.metrics_json()
            await anyio.to_thread.run_sync(self.metrics_file.write, text)

    def close(self) -> None:
        c = self.ckpt
        self.log.close()
        c.read_time, c.flush_pos = self.committed_read_time, self.log.synced
        c.queue_offset = c.master_queue_offset = self.queue_offset
        c.counter += 1
        c.timestamp = now_ms()
        c.save()
        self.metrics_file.write(self.metrics_json())

    def metrics_json(self) -> str:
        c = self.ckpt
        return dumps({
            "dataVersion": {"counter": c.counter, "stateVersion": c.state_version, "timestamp": c.timestamp},
            "timingCount": {t: {"count": n, "timeStamp": self.timing_ts.get(t, 0)} for t, n in self.timing.items()},
        }, pretty=True)
