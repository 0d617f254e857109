"""POP consumption (RocketMQ 5): POP_MESSAGE (200050), ACK_MESSAGE (200051), CHANGE_MESSAGE_INVISIBLETIME
(200053), with RocketMQ 5's header fields and receipt (``extraInfo``) format.

A pop hands out messages of a group's queues, each invisible to later pops for the requested time;
an ack retires one; a message not acked in time is handed out again with one more delivery attempt
(RECONSUMETIMES in the returned record), and after the group's ``retryMaxTimes`` + 1 deliveries it
goes to ``%DLQ%<group>``. With ``order=true`` a queue holding an unacked, still invisible batch is
skipped, and an expired batch comes back first, in order (FIFO).

Durable as RocketMQ's: every pop stores a checkpoint and every ack an ack record in the revive topic
``rmq_sys_REVIVE_LOG_<cluster>`` through the commitlog (``pop_store.py``), before it is answered, so
slaves hold them; the master's revive service (``pop_revive.py``) replays them at start and at
promotion, so invisible time, attempts and receipts survive a restart and a failover. The consumer
offset moves as RocketMQ's: past what a pop handed out once its checkpoint is stored (an ordered
queue's stays at its first unacked message), so ``consumerProgress`` counts what no pop has taken.
A new group starts as ``initMode`` says (PopMessageProcessor.getInitOffset): MIN (0) at the queue's
oldest message; MAX (1) at its last one, or at 0 while the queue's first message is still in memory
(``initPopOffsetByCheckMsgInMem``, true by default).

How it differs from RocketMQ, and why: RocketMQ copies an expired message into a per-group retry
topic; here it is handed out again from its own queue (its checkpoint carries the attempts). The
receipt is RocketMQ's ``startOffset popTime invisibleTime reviveQid topicType brokerName queueId
queueOffset``; ``popTime`` (changed by every redelivery and by a change of invisible time) tells a
current receipt from a stale one. An ack is answered as RocketMQ's: SUCCESS for any offset the
queue holds; only a current receipt retires the message, a stale one changes nothing.
"""

from __future__ import annotations

import json
import logging
import random
import time
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from rmq.kernel import (
    ConfigFile,
    FilterExpressionError,
    GetStatus,
    PutStatus,
    RateLimitedLog,
    dumps,
    record_of,
)
from rmq.plugins.broker.consumer import first_in_memory, physical_memory
from rmq.plugins.broker.pop_store import ACK_TAG, BATCH_ACK_TAG, CK_TAG, PopJournal
from rmq.protocol import access
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand, ext_i32, ext_int, ext_str
from rmq.protocol.common import Perm
from rmq.protocol.message import MessageDecodeError, decode_message
from rmq.protocol.names import dlq_topic, printable
from rmq.protocol.record import reconsume_times_pos

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rmq.kernel import Connection
    from rmq.plugins.broker.context import ProcessorContext
    from rmq.plugins.broker.topics import TopicConfig

log = logging.getLogger("rmq.broker.pop")
refusals = RateLimitedLog(log)

POP_MESSAGE = 200050
ACK_MESSAGE = 200051
CHANGE_MESSAGE_INVISIBLETIME = 200053
NOTIFICATION = 200054
POLLING_INFO = 200055
POP_ROLLBACK = 200056
BATCH_ACK_MESSAGE = 200151
ORDER_REVIVE_QID = 999  # RocketMQ's revive queue id that marks an ordered (FIFO) receipt
MAX_BATCH = 32
MAX_POLL_MS = 20_000
INIT_MIN, INIT_MAX = 0, 1  # RocketMQ's ConsumeInitMode
_DELIVERED = frozenset((PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
                        PutStatus.SLAVE_NOT_AVAILABLE))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@attrs.define(slots=True)
class InFlight:
    pop_time: int
    invisible_until: int
    invisible_time: int
    attempts: int  # deliveries so far
    ck: int = -1  # revive queue offset of its latest checkpoint (-1 while being stored)


@attrs.define(slots=True)
class QueueState:
    next_offset: int
    inflight: dict[int, InFlight] = attrs.field(factory=dict)
    committed: int = -1
    ordered: bool = False

    def commit_point(self) -> int:
        """RocketMQ's: past what was handed out; an ordered queue stays at its first unacked message."""
        return min(self.inflight) if self.ordered and self.inflight else self.next_offset

    def blocked(self, now: int) -> bool:
        return any(f.invisible_until > now for f in self.inflight.values())


class PopProcessor:
    def __init__(self, ctx: ProcessorContext) -> None:
        self.ctx = ctx
        self.queues: dict[tuple[str, str, int], QueueState] = {}
        self.dlq = 0
        self._mode_table: dict[str, dict[str, dict[str, Any]]] | None = None
        self.polling: dict[tuple[str, str, int], int] = {}  # (group, topic, queue or -1) -> pops waiting now
        self.journal: PopJournal | None = None  # set while master, by the revive service (pop_revive.py)
        self.loaded = False  # the revive records are replayed: pops may be served
        self._in_memory_bytes = int(physical_memory() * ctx.config.accessMessageInMemoryMaxRatio / 100)

    def register(self, registry: object, owner: str) -> None:
        consume = access.topic("topic", access.SUB, group="consumerGroup")
        for code, fn, acc in (
            (POP_MESSAGE, self.pop, consume), (ACK_MESSAGE, self.ack, consume),
            (CHANGE_MESSAGE_INVISIBLETIME, self.change_invisible_time, consume),
            (BATCH_ACK_MESSAGE, self.batch_ack, access.Access(resolve=access.batch_ack)),
            (NOTIFICATION, self.notification, consume), (POLLING_INFO, self.polling_info, consume),
            (POP_ROLLBACK, self.pop_rollback, access.SIGNED),  # nothing to move: touches nothing
            (RequestCode.QUERY_ASSIGNMENT, self.query_assignment, access.Access(resolve=access.body_topic_group)),
            # how a group consumes a topic, persisted: mqadmin setConsumeMode, an operator's write
            (RequestCode.SET_MESSAGE_REQUEST_MODE, self.set_request_mode, access.ADMIN),
        ):
            registry.register(code, fn, owner=owner, access=acc)  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ QUERY_ASSIGNMENT / SET_MESSAGE_REQUEST_MODE

    def _modes(self) -> dict[str, dict[str, dict[str, Any]]]:
        if self._mode_table is None:
            doc = self._mode_file().load()
            table = doc.get("messageRequestModeMap") if isinstance(doc, dict) else None
            self._mode_table = table if isinstance(table, dict) else {}
        return self._mode_table

    def _mode_file(self) -> ConfigFile:
        return ConfigFile(self.ctx.config_dir / "messageRequestMode.json")

    async def set_request_mode(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            body = json.loads(cmd.body or b"{}")
            topic, group, mode = str(body["topic"]), str(body["consumerGroup"]), str(body.get("mode", "PULL")).upper()
            share = int(body.get("popShareQueueNum", 0))
        except (ValueError, KeyError, TypeError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"SetMessageRequestModeRequestBody is malformed: {e!r}")
        if mode not in ("PULL", "POP"):
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"mode {mode!r} is not PULL or POP")
        if topic.startswith("%RETRY%"):
            return cmd.response(ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode")
        # each entry is persisted: only topics and groups the broker has (issue #26, bounded tables)
        if topic not in self.ctx.topics.table:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{printable(topic, 128)}] not exist")
        if self.ctx.groups.find(group) is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{printable(group, 128)}] does not exist")
        modes = self._modes()
        modes.setdefault(topic, {})[group] = {"topic": topic, "consumerGroup": group, "mode": mode,
                                             "popShareQueueNum": share}
        text = dumps({"messageRequestModeMap": modes}, pretty=True)
        await anyio.to_thread.run_sync(self._mode_file().write, text)  # persisted before the answer
        return cmd.response(ResponseCode.SUCCESS)

    async def query_assignment(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """This broker's queues of the topic for one client: all (BROADCASTING, or POP without sharing: one
        queue -1) or its share by AVG / AVG_BY_CIRCLE among the group's live clients (CLUSTERING PULL)."""
        b = self.ctx
        try:
            body = json.loads(cmd.body or b"{}")
            topic, group = str(body["topic"]), str(body["consumerGroup"])
            client, model = str(body.get("clientId") or ""), str(body.get("messageModel") or "CLUSTERING").upper()
            strategy = str(body.get("strategyName") or "AVG")
        except (ValueError, KeyError, TypeError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"QueryAssignmentRequestBody is malformed: {e!r}")
        setting = self._modes().get(topic, {}).get(group) or {
            "mode": "PULL" if topic.startswith("%RETRY%") else b.config.defaultMessageRequestMode.upper(),
            "popShareQueueNum": b.config.defaultPopShareQueueNum}
        mode = setting["mode"]
        tc = b.topics.table.get(topic)
        name = b.config.brokerName
        queues = list(range(tc.readQueueNums)) if tc is not None and tc.perm & Perm.READ else []
        if model == "BROADCASTING" or not b.config.serverLoadBalancerEnabled:
            chosen = queues
        elif mode == "POP" and int(setting.get("popShareQueueNum", 0)) <= 0:
            chosen = [-1] if queues else []
        else:
            info = b.consumers.get(group)
            cids = sorted(info.client_ids()) if info is not None else []
            if client not in cids or not queues:
                chosen = []
            elif strategy == "AVG_BY_CIRCLE":
                i = cids.index(client)
                chosen = queues[i::len(cids)]
            elif strategy == "AVG":
                i, n, q = cids.index(client), len(cids), len(queues)  # AllocateMessageQueueAveragely's arithmetic
                mod = q % n
                size = 1 if q <= n else (q // n + 1 if mod > 0 and i < mod else q // n)
                start = i * size if mod > 0 and i < mod else i * size + mod
                chosen = [queues[(start + k) % q] for k in range(max(0, min(size, q - start)))]
            else:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"unsupported allocation strategy {strategy!r}")
        out = [{"messageQueue": {"topic": topic, "brokerName": name, "queueId": q}, "mode": mode, "attachments": {}}
               for q in chosen]
        return cmd.response(ResponseCode.SUCCESS, None, None, json.dumps({"messageQueueAssignments": out}).encode())

    # ------------------------------------------------------------------ state

    def _state(self, group: str, topic: str, qid: int, init_mode: int = INIT_MIN) -> QueueState:
        key = (group, topic, qid)
        st = self.queues.get(key)
        if st is None:
            store = self.ctx.store
            committed = self.ctx.query_offset(group, topic, qid)
            lo = store.get_min_offset(topic, qid)
            if committed >= 0:
                start = committed
            else:  # a new group: initMode decides, and the start is committed (getPopOffset with init)
                start = committed = self._init_offset(topic, qid, init_mode)
                self.ctx.commit_offset(group, topic, qid, start)
            st = self.queues[key] = QueueState(max(start, lo), committed=committed)
        return st

    def _init_offset(self, topic: str, qid: int, init_mode: int) -> int:
        """PopMessageProcessor.getInitOffset: MIN (and retry topics) at the oldest message; MAX at the
        newest one, or 0 while the queue never lost a message and its first is still in memory."""
        store = self.ctx.store
        lo = store.get_min_offset(topic, qid)
        if init_mode == INIT_MIN or topic.startswith("%RETRY%"):
            return lo
        if self.ctx.config.initPopOffsetByCheckMsgInMem and lo <= 0 and first_in_memory(store, topic, qid,
                                                                                        self._in_memory_bytes):
            return 0
        return max(store.get_max_offset(topic, qid) - 1, 0)

    def apply_record(self, ck_offset: int, tag: str, body: dict[str, Any]) -> None:
        """Replay one revive record (in the order written): a checkpoint puts its messages in flight
        with its pop time, invisible time and attempts; an ack of the same pop time retires them."""
        try:
            group, topic, qid, pop_time = str(body["c"]), str(body["t"]), int(body["q"]), int(body["pt"])
            key = (group, topic, qid)
            if tag == CK_TAG:
                start, invisible = int(body["so"]), int(body["it"])
                offsets = [start + int(d) for d in body["d"]]
                attempts = [int(a) for a in body.get("a") or [1] * len(offsets)]
                st = self.queues.get(key)
                if st is None:
                    committed = self.ctx.query_offset(group, topic, qid)
                    st = self.queues[key] = QueueState(committed if committed >= 0 else start, committed=committed)
                for off, att in zip(offsets, attempts, strict=False):
                    st.inflight[off] = InFlight(pop_time, pop_time + invisible, invisible, att, ck_offset)
                st.next_offset = max(st.next_offset, offsets[-1] + 1)
            elif tag in (ACK_TAG, BATCH_ACK_TAG):
                st = self.queues.get(key)
                done = [int(body["ao"])] if tag == ACK_TAG else [int(o) for o in body["aol"]]
                for off in done if st is not None else ():
                    f = st.inflight.get(off)  # type: ignore[union-attr]
                    if f is not None and f.pop_time == pop_time:
                        del st.inflight[off]  # type: ignore[union-attr]
        except (KeyError, TypeError, ValueError, IndexError) as e:
            log.error("pop: revive record @%d (%s) malformed, skipped: %r", ck_offset, tag, e)

    async def _checkpoint(self, group: str, topic: str, qid: int, st: QueueState,
                          handed: Iterable[tuple[int, InFlight]]) -> None:
        """Store what one pop handed out of a queue, then move the consumer offset as RocketMQ's."""
        items = sorted(handed, key=lambda x: x[0])
        if self.journal is None:  # the role ended while this pop ran: the offset stays, the messages come again
            return
        if items:
            f0 = items[0][1]
            ck = await self.journal.checkpoint(group, topic, qid, [o for o, _ in items], [f.attempts for _, f in items],
                                               f0.pop_time, f0.invisible_time)
            for _, f in items:
                f.ck = ck
        self._commit(group, topic, qid, st)

    async def _done(self, group: str, topic: str, qid: int, offsets: list[int], pop_time: int) -> None:
        if offsets and self.journal is not None:
            await self.journal.ack(group, topic, qid, offsets, pop_time)

    def _commit(self, group: str, topic: str, qid: int, st: QueueState) -> None:
        point = st.commit_point()
        if point != st.committed:
            st.committed = point
            self.ctx.commit_offset(group, topic, qid, point)

    # ------------------------------------------------------------------ POP_MESSAGE

    def _check(self, cmd: RemotingCommand, group: str, topic: str, qid: int,
               bad_queue: int) -> TopicConfig | RemotingCommand:
        """The topic's config when this broker serves the group a pop (or a notification) there, else
        the refusal to answer with (``bad_queue``: the code for a queue id past the topic's read queues,
        which RocketMQ answers differently for the two)."""
        b = self.ctx
        if b.is_slave:
            return cmd.response(ResponseCode.SLAVE_NOT_AVAILABLE, "pop is served by masters")
        if not self.loaded:
            return cmd.response(ResponseCode.SYSTEM_BUSY, "pop state is being replayed from the revive topic, retry")
        if not b.config.brokerPermission & Perm.READ:
            return cmd.response(ResponseCode.NO_PERMISSION, f"the broker[{b.config.brokerName}] pulling message is forbidden")
        tc = b.topics.table.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{printable(topic, 128)}] not exist, apply first please!")
        if not tc.perm & Perm.READ:
            return cmd.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden")
        sg = b.groups.find(group)
        if sg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{printable(group, 128)}] does not exist")
        if not sg.consumeEnable:
            return cmd.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        if qid >= tc.readQueueNums:
            return cmd.response(bad_queue, f"queueId[{qid}] is illegal, topic:[{topic}] "
                                           f"topicConfig.readQueueNums:[{tc.readQueueNums}]")
        return tc

    async def pop(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = ext_str(cmd, "consumerGroup")
        topic = ext_str(cmd, "topic")
        qid = ext_i32(cmd, "queueId", -1)
        n = ext_i32(cmd, "maxMsgNums", 32)
        invisible = ext_int(cmd, "invisibleTime")
        poll = ext_int(cmd, "pollTime", 0)
        order = (cmd.ext.get("order") or "false").lower() == "true"
        init_mode = ext_i32(cmd, "initMode", INIT_MIN)
        if not 0 < n <= MAX_BATCH:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"maxMsgNums {n} out of range (1..{MAX_BATCH})")
        if invisible <= 0:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"invisibleTime {invisible} must be above 0")
        tc = self._check(cmd, group, topic, qid, ResponseCode.SYSTEM_ERROR)
        if isinstance(tc, RemotingCommand):
            return tc
        etype = cmd.ext.get("expType") or "TAG"
        expr = cmd.ext.get("exp") or "*"
        try:
            mfilter = self.ctx.get_filter(group, topic, etype, expr)
        except FilterExpressionError as e:
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"parse the consumer's subscription failed: {e}")
        except LookupError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        queues = [qid] if qid >= 0 else list(range(tc.readQueueNums))
        if len(queues) > 1:
            k = random.randrange(len(queues))
            queues = queues[k:] + queues[:k]
        deadline = time.monotonic() + min(max(poll, 0), MAX_POLL_MS) / 1000
        held = (group, topic, qid)
        waiting = False
        try:
            while True:
                got = await self._collect(group, topic, queues, n, invisible, order, mfilter, init_mode)
                if got or time.monotonic() >= deadline or conn.closed or not self.loaded:
                    break
                if not waiting:  # POLLING_INFO counts the pops held here
                    waiting = True
                    self.polling[held] = self.polling.get(held, 0) + 1
                await anyio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        finally:
            if waiting:
                left = self.polling.get(held, 1) - 1
                if left > 0:
                    self.polling[held] = left
                else:
                    self.polling.pop(held, None)
        if not got:
            return cmd.response(ResponseCode.PULL_NOT_FOUND, "no new message")
        if self.ctx.stats is not None:
            self.ctx.stats.got(topic, group, len(got), sum(len(g[2]) for g in got))
        return self._answer(cmd, topic, got, invisible, order)

    async def _collect(self, group: str, topic: str, queues: list[int], n: int, invisible: int, order: bool,
                       mfilter: object, init_mode: int = INIT_MIN) -> list[tuple[int, int, bytes, int, int]]:
        """(queue, offset, record, attempts, pop time) of up to n messages now handed out; none once the
        master role ended (a pop that waited across it): the revive records stopped with it, so the
        checkpoint would be kept nowhere while the consumer offset passed the message."""
        store = self.ctx.store
        out: list[tuple[int, int, bytes, int, int]] = []
        if not self.loaded:
            return out
        sg = self.ctx.groups.find(group)
        max_deliveries = (sg.retryMaxTimes if sg is not None else 16) + 1
        now = now_ms()  # one pop time for the whole batch: the answer's popTime must match every receipt
        for q in queues:
            if len(out) >= n or not self.loaded:
                break
            st = self._state(group, topic, q, init_mode)
            st.ordered = order
            if order and st.blocked(now):
                continue
            handed: list[tuple[int, InFlight]] = []
            for off in sorted(st.inflight):  # expired first: they come back before new messages
                f = st.inflight.get(off)  # a put below may let another pop retire it meanwhile
                if f is None or f.invisible_until > now or len(out) >= n:
                    continue
                res = store.get_messages(group, topic, q, off, 1)
                raw = res.messages[0] if res.status is GetStatus.FOUND and res.messages else None
                if raw is None or res.queue_offsets[0] != off:
                    del st.inflight[off]  # gone (retention): nothing left to deliver
                    await self._done(group, topic, q, [off], f.pop_time)
                    continue
                if f.attempts >= max_deliveries:
                    del st.inflight[off]
                    await self._to_dlq(group, bytes(raw))
                    await self._done(group, topic, q, [off], f.pop_time)
                    continue
                f.attempts += 1
                f.pop_time, f.invisible_until, f.invisible_time, f.ck = now, now + invisible, invisible, -1
                handed.append((off, f))
                out.append((q, off, bytes(raw), f.attempts, now))
            if order and handed:
                await self._checkpoint(group, topic, q, st, handed)
                continue  # an ordered queue redelivers its batch alone
            want = n - len(out)
            if want > 0:
                res = store.get_messages(group, topic, q, st.next_offset, want, mfilter)  # type: ignore[arg-type]
                if res.status is GetStatus.FOUND:
                    for raw, off in zip(res.messages, res.queue_offsets, strict=False):
                        if off in st.inflight:
                            continue  # handed out already: never under a second receipt
                        f = st.inflight[off] = InFlight(now, now + invisible, invisible, 1)
                        handed.append((off, f))
                        out.append((q, off, bytes(raw), 1, now))
                    st.next_offset = max(st.next_offset, res.next_begin_offset)
                elif res.status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.NO_MATCHED_MESSAGE,
                                    GetStatus.OFFSET_FOUND_NULL):
                    st.next_offset = max(st.next_offset, res.next_begin_offset, store.get_min_offset(topic, q))
                elif res.status is GetStatus.OFFSET_OVERFLOW_BADLY:  # the queue was cut back: restart at its end
                    st.next_offset = store.get_max_offset(topic, q)
            await self._checkpoint(group, topic, q, st, handed)
        return out

    async def _to_dlq(self, group: str, raw: bytes) -> None:
        try:
            msg = decode_message(raw, decompress=False)
        except MessageDecodeError as e:
            log.error("pop: an undecodable record could not go to the DLQ of %s: %s", group, e)
            return
        dlq = dlq_topic(group)
        self.ctx.ensure_topic(dlq, 1, Perm.READ_WRITE)
        result = await self.ctx.put(record_of(msg, dlq, 0, {"ORIGIN_MESSAGE_ID": msg.msg_id or "",
                                                            "RETRY_TOPIC": msg.topic}))
        if result.status in _DELIVERED:
            self.dlq += 1
        else:
            log.error("pop: moving a message of %s to %s failed: %s", group, dlq, result.status.name)

    def _answer(self, cmd: RemotingCommand, topic: str, got: list[tuple[int, int, bytes, int, int]],
                invisible: int, order: bool) -> RemotingCommand:
        by_queue: dict[int, list[int]] = {}
        body = bytearray()
        order_counts = []
        for q, off, raw, attempts, _pop_time in got:
            by_queue.setdefault(q, []).append(off)
            rec = bytearray(raw)
            pos = reconsume_times_pos(rec, 0)
            rec[pos:pos + 4] = (attempts - 1).to_bytes(4, "big", signed=True)  # delivery attempt = this + 1
            body += rec
            if order:
                order_counts.append(f"0 qo{q}%{off} {attempts - 1}")
        pop_time = got[0][4]
        start = ";".join(f"0 {q} {offs[0]}" for q, offs in by_queue.items())
        offsets = ";".join(f"0 {q} {','.join(map(str, offs))}" for q, offs in by_queue.items())
        rest = 0
        for q in by_queue:
            rest += max(0, self.ctx.store.get_max_offset(topic, q) - self.queues[(cmd.ext["consumerGroup"], topic, q)]
                        .next_offset)
        ext = {"popTime": str(pop_time), "invisibleTime": str(invisible),
               "reviveQid": str(ORDER_REVIVE_QID if order else 0), "restNum": str(rest),
               "startOffsetInfo": start, "msgOffsetInfo": offsets}
        if order:
            ext["orderCountInfo"] = ";".join(order_counts)
        return cmd.response(ResponseCode.SUCCESS, None, ext, bytes(body))

    # ------------------------------------------------------------------ ACK / CHANGE_INVISIBLETIME

    def _receipt(self, cmd: RemotingCommand) -> tuple[str, str, int, int, int, QueueState | None] | RemotingCommand:
        """(group, topic, queue, offset, pop time, queue state) of an ack or change of invisible time, after
        RocketMQ's checks: the topic exists, the queue is one of its read queues, the offset is within the
        queue. The queue state only while the receipt is current: the message is in flight and this pop
        handed it out (not acked since, nor handed out again after its invisible time)."""
        if not self.loaded:
            return cmd.response(ResponseCode.SYSTEM_BUSY, "pop state is being replayed from the revive topic, retry")
        group = ext_str(cmd, "consumerGroup")
        topic = ext_str(cmd, "topic")
        qid = ext_i32(cmd, "queueId")
        offset = ext_int(cmd, "offset")
        parts = (cmd.ext.get("extraInfo") or "").split(" ")
        try:
            pop_time = int(parts[1])
        except (ValueError, IndexError):
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "extraInfo is not a pop receipt")
        if len(parts) < 7:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "extraInfo is not a pop receipt")
        tc = self.ctx.topics.table.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{printable(topic, 128)}] not exist, apply first please!")
        if not 0 <= qid < tc.readQueueNums:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"queueId[{qid}] is illegal, topic:[{topic}] "
                                                              f"topicConfig.readQueueNums:[{tc.readQueueNums}]")
        lo, hi = self.ctx.store.get_min_offset(topic, qid), self.ctx.store.get_max_offset(topic, qid)
        if not lo <= offset <= hi:
            return cmd.response(ResponseCode.NO_MESSAGE, f"offset is illegal, key:{topic}@{qid}, commit:{offset}, "
                                                         f"store:{lo}~{hi}")
        st = self.queues.get((group, topic, qid))
        f = st.inflight.get(offset) if st is not None else None
        return group, topic, qid, offset, pop_time, st if f is not None and f.pop_time == pop_time else None

    async def ack(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """ACK_MESSAGE: SUCCESS for any receipt of an offset the queue holds, as RocketMQ's; a current
        receipt retires the message (its ack record stored first), a stale one changes nothing."""
        found = self._receipt(cmd)
        if isinstance(found, RemotingCommand):
            return found
        group, topic, qid, offset, pop_time, st = found
        if st is not None:
            del st.inflight[offset]
            await self._done(group, topic, qid, [offset], pop_time)
            self._commit(group, topic, qid, st)
        return cmd.response(ResponseCode.SUCCESS)

    async def batch_ack(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """BATCH_ACK_MESSAGE (200151): BatchAckMessageRequestBody, each entry's acked offsets a bit set
        (Base64 of Java's BitSet.toByteArray) relative to its start offset. Stale receipts are skipped,
        as RocketMQ answers SUCCESS for the batch."""
        try:
            body = json.loads(cmd.body or b"{}")
            acks = body.get("acks") if isinstance(body, dict) else None
        except ValueError as e:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"BatchAckMessageRequestBody is not JSON: {e}")
        if not isinstance(acks, list) or not acks:
            return cmd.response(ResponseCode.NO_MESSAGE, "no ack in the batch")
        if not self.loaded:
            return cmd.response(ResponseCode.SYSTEM_BUSY, "pop state is being replayed from the revive topic, retry")
        for a in acks[:1024]:
            try:
                f = _batch_entry(a)
            except (ValueError, TypeError, KeyError, OverflowError) as e:
                refusals.info("batch-ack", "batch ack entry refused: %s", printable(str(e), 200))
                continue
            group, topic, qid, start, pop_time, bits = f
            st = self.queues.get((group, topic, qid))
            if st is None:
                continue
            done = []
            for i, byte in enumerate(bits[:4096]):
                for k in range(8):
                    if byte >> k & 1:
                        off = start + i * 8 + k
                        fl = st.inflight.get(off)
                        if fl is not None and fl.pop_time == pop_time:
                            del st.inflight[off]
                            done.append(off)
            await self._done(group, topic, qid, done, pop_time)
            self._commit(group, topic, qid, st)
        return cmd.response(ResponseCode.SUCCESS)

    async def notification(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """NOTIFICATION (200054): ``hasMsg`` once a pop of the group would find a message (new or with
        its invisible time over), waiting up to ``pollTime`` for one, as RocketMQ's long polling."""
        group, topic = ext_str(cmd, "consumerGroup"), ext_str(cmd, "topic")
        qid = ext_i32(cmd, "queueId", -1)
        poll = ext_int(cmd, "pollTime", 0)
        tc = self._check(cmd, group, topic, qid, ResponseCode.MESSAGE_ILLEGAL)
        if isinstance(tc, RemotingCommand):
            return tc
        queues = [qid] if qid >= 0 else list(range(tc.readQueueNums))
        deadline = time.monotonic() + min(max(poll, 0), MAX_POLL_MS) / 1000
        while True:
            has = self._has_message(group, topic, queues)
            if has or time.monotonic() >= deadline or conn.closed:
                break
            await anyio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        return cmd.response(ResponseCode.SUCCESS, None, {"hasMsg": "true" if has else "false"})

    def _has_message(self, group: str, topic: str, queues: list[int]) -> bool:
        store, now = self.ctx.store, now_ms()
        for q in queues:
            st = self._state(group, topic, q)
            if st.next_offset < store.get_max_offset(topic, q):
                return True
            if any(f.invisible_until <= now for f in st.inflight.values()):
                return True
        return False

    async def polling_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """POLLING_INFO (200055): how many pops of the group on the topic (and queue) are held now."""
        group, topic = ext_str(cmd, "consumerGroup"), ext_str(cmd, "topic")
        qid = ext_i32(cmd, "queueId", -1)
        tc = self.ctx.topics.table.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{printable(topic, 128)}] not exist, apply first please!")
        if qid >= tc.readQueueNums or qid < -1:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"queueId[{qid}] is illegal, topic:[{topic}] "
                                                              f"topicConfig.readQueueNums:[{tc.readQueueNums}]")
        sg = self.ctx.groups.table.get(group)
        if sg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                f"subscription group [{printable(group, 128)}] does not exist")
        if not sg.consumeEnable:
            return cmd.response(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        n = self.polling.get((group, topic, qid), 0)
        return cmd.response(ResponseCode.SUCCESS, None, {"pollingNum": str(n)})

    async def pop_rollback(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """POP_ROLLBACK (200056): RocketMQ moves its pop state from the RocksDB store back to files;
        the pop state here never leaves the file store, so there is nothing to move."""
        return cmd.response(ResponseCode.SUCCESS)

    async def change_invisible_time(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        invisible = ext_int(cmd, "invisibleTime")
        if not 0 <= invisible <= 12 * 3600 * 1000:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"invisibleTime {invisible} out of range (0..12 h)")
        found = self._receipt(cmd)
        if isinstance(found, RemotingCommand):
            return found
        group, topic, qid, offset, _, st = found
        if st is None:
            return cmd.response(ResponseCode.NO_MESSAGE, (
                f"receipt of {topic}/{qid}/{offset} is no longer valid: the message was acked or handed out "
                "again after its invisible time"))
        f = st.inflight[offset]
        now = now_ms()
        f.pop_time, f.invisible_until, f.invisible_time, f.ck = now, now + invisible, invisible, -1
        await self._checkpoint(group, topic, qid, st, [(offset, f)])  # the new receipt survives a restart
        revive = (cmd.ext.get("extraInfo") or "").split(" ")[3]
        return cmd.response(ResponseCode.SUCCESS, None, {
            "popTime": str(now), "invisibleTime": str(invisible), "reviveQid": revive})


def _batch_entry(a: Any) -> tuple[str, str, int, int, int, bytes]:
    """(group, topic, queue, start offset, pop time, bit set bytes) of one BatchAck (short or long keys)."""
    import base64

    def get(short: str, long: str) -> Any:
        v = a.get(short, a.get(long))
        if v is None:
            raise KeyError(long)
        return v

    if not isinstance(a, dict):
        raise TypeError("a batch ack entry is not an object")
    bits = get("b", "bitSet")
    raw = base64.b64decode(bits, validate=True) if isinstance(bits, str) else bytes(int(x) & 0xFF for x in bits)
    return (str(get("c", "consumerGroup")), str(get("t", "topic")), int(get("q", "queueId")),
            int(get("so", "startOffset")), int(get("pt", "popTime")), raw)
