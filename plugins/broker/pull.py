"""PULL_MESSAGE (11): subscription → filter → store read → status table of reference §3.4, long polling.

The response statuses and ``nextBeginOffset`` follow §3.4 exactly because the C++
pull loop depends on them: 19 at ``offset == maxOffset``, 21 with a different
``nextBeginOffset`` for any bad offset (or the Python wrapper loops forever).
"""

from __future__ import annotations

import json
import logging
import os
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rmq.kernel import FilterExpressionError, GetStatus, MessageRecord, RateLimitedLog
from rmq.plugins.broker.consumer import physical_memory
from rmq.plugins.broker.fastpull import FastPull, Handed, take
from rmq.protocol.access import SUB, topic
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand, ext_i32, ext_int, ext_str
from rmq.protocol.common import Perm, PullFlag, encode_properties
from rmq.protocol.names import OFFSET_MOVED_EVENT, printable
from rmq.protocol.record import PHYSICAL_OFFSET

if TYPE_CHECKING:
    from rmq.kernel import Connection, GetResult, MessageFilter
    from rmq.plugins.broker.context import ProcessorContext

log = logging.getLogger("rmq.broker")
refusals = RateLimitedLog(log)  # lines a peer can trigger at will

COMMIT_OFFSET, SUSPEND, SUBSCRIPTION = PullFlag.COMMIT_OFFSET, PullFlag.SUSPEND, PullFlag.SUBSCRIPTION

FOUND = GetStatus.FOUND
_NOT_FOUND = ResponseCode.PULL_NOT_FOUND
_MOVED = ResponseCode.PULL_OFFSET_MOVED
_RETRY = ResponseCode.PULL_RETRY_IMMEDIATELY
_Q = struct.Struct(">q")


LITE_PULL_MESSAGE = 361
# the remark of a pull answer; a queue of an existing topic that never held a message is an empty queue to
# RocketMQ (it creates consume queues on first lookup), so it says NO_MESSAGE_IN_QUEUE there too
_STATUS_NAMES = {s: s.name for s in GetStatus} | {GetStatus.NO_MATCHED_LOGIC_QUEUE: "NO_MESSAGE_IN_QUEUE"}


_NOT_TAGS = frozenset({-1})  # a filter the compiled walk cannot match by hash codes alone


def _tag_codes(f: MessageFilter | None) -> frozenset[int] | None:
    """The hash codes a filter matches by (None: everything), or _NOT_TAGS: only its own code decides (a
    filter plugin declares a compiled counterpart with ``compiled_codes``, as the TAG filter does)."""
    return None if f is None else getattr(f, "compiled_codes", _NOT_TAGS)


class PullProcessor:
    def _lagging(self, last: int) -> bool:
        """RocketMQ's suggestPullingFromSlave: the consumer reads further back than memory holds (``last``:
        the last record's PHYSICAL_OFFSET)."""
        return self.ctx.store.max_phy_offset - last > self.in_memory_bytes

    def __init__(self, ctx: ProcessorContext) -> None:
        self.in_memory_bytes = int(physical_memory() * ctx.config.accessMessageInMemoryMaxRatio / 100)
        self.ctx = ctx
        self.compiled = False  # the store's get_joined serves TAG / unfiltered pulls (decide)
        self.fast = FastPull(ctx, self)  # per-request compiled pulls: given to a connection after its first pull

    def decide(self, registry: object) -> str:
        """What serves pulls, for the broker's start line: the store's compiled walk (TAG hash codes or no filter:
        the records copied into one body, no Python object per message) or get_messages; and whether a pull's
        request is decoded and answered per read (``fastpull``) or by this processor's task per request."""
        store = self.ctx.store
        self.compiled = False
        self.fast.why = "the store walk is pure"
        if os.environ.get("RMQ_PURE_PULL"):
            return "pure: RMQ_PURE_PULL set"
        if getattr(store, "get_joined", None) is None or getattr(store, "fast_join", None) is None:
            return f"pure: store {type(store).__name__} has no compiled pull walk"
        self.compiled = True
        why = self.fast.decide(registry)
        per_request = "requests decoded and answered per read (PULL_MESSAGE / LITE_PULL_MESSAGE common case; " \
            "long polls, moved offsets: read per read, awaited per request)" if not why else f"requests per task: {why}"
        return f"compiled (TAG / no filter: one body from the mapped records; {per_request})"

    def register(self, registry: object, owner: str) -> None:
        access = topic("topic", SUB, group="consumerGroup")
        registry.register(RequestCode.PULL_MESSAGE, self.pull, owner=owner, access=access)  # type: ignore[attr-defined]
        # RocketMQ 5's DefaultLitePullConsumer pulls with LITE_PULL_MESSAGE (361), served alike
        registry.register(LITE_PULL_MESSAGE, self.pull, owner=owner, access=access)  # type: ignore[attr-defined]

    async def _offset_moved(self, group: str, topic: str, queue_id: int, requested: int, new: int) -> None:
        """RocketMQ's OffsetMovedEvent: a corrected pull offset is published to OFFSET_MOVED_EVENT (tag = group)."""
        b = self.ctx
        event = {"consumerGroup": group, "messageQueue": {"topic": topic, "brokerName": b.config.brokerName,
                                                          "queueId": queue_id},
                 "offsetRequest": requested, "offsetNew": new}
        rec = MessageRecord(OFFSET_MOVED_EVENT, 0, json.dumps(event).encode(), 0,
                            encode_properties({"TAGS": group, "WAIT": "false"}), 0, time.time_ns() // 1_000_000,
                            b.store_host)
        result = await b.put(rec)
        if not result.ok:
            log.debug("offset moved event for %s not stored: %s", group, result.status.name)

    async def pull(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        handed = None
        if not self.fast.why:
            if getattr(conn, "fast_send", False) is not False:
                self.fast.install(conn)
            handed = take(conn)
        return await self.process(conn, cmd, True, handed)

    async def process(self, conn: Connection, cmd: RemotingCommand, allow_suspend: bool,
                      handed: Handed | None = None) -> RemotingCommand:
        """The Python path: the header read field by field (lazily: a field a refusal comes before is not
        parsed), then what ``plan`` decides (or what the compiled half planned for this very frame: ``handed``),
        suspension and the offset-moved event awaited here."""
        ext = cmd.ext
        group = ext_str(cmd, "consumerGroup")
        topic = ext_str(cmd, "topic")
        queue_id = ext_i32(cmd, "queueId")
        offset = ext_int(cmd, "queueOffset")
        max_nums = ext_i32(cmd, "maxMsgNums")
        sys_flag = ext_i32(cmd, "sysFlag")
        etype, expr = ext.get("expressionType"), ext.get("subscription")
        p = None if handed is None else _planned(handed, cmd, (group, topic, queue_id, offset, max_nums, sys_flag,
                                                                 etype or None, expr or None))
        if p is None:
            p = self.plan(conn.remote_addr[0], group, topic, queue_id, offset, max_nums, sys_flag, etype, expr,
                          lambda: ext_int(cmd, "subVersion", 0))
        if type(p) is tuple:
            return cmd.response(*p)
        b = self.ctx
        if allow_suspend and sys_flag & COMMIT_OFFSET and not b.is_slave:  # RocketMQ 4 keeps these on masters only
            self.commit(group, topic, queue_id, ext_int(cmd, "commitOffset", -1))
        if allow_suspend and self.suspends(p, sys_flag, lambda: ext_int(cmd, "suspendTimeoutMillis", 0)):
            await b.hold.hold(topic, queue_id, offset, p.mfilter, p.hold_ms / 1000,
                              lambda: b.store.get_max_offset(topic, queue_id), conn)
            return await self.process(conn, cmd, False)
        if p.code == _MOVED:
            res = p.res
            log.debug("pull offset moved: %s %s q%d offset %d -> %d (min %d max %d)", group, topic, queue_id,
                      offset, p.nxt, res.min_offset, res.max_offset)
            await self._offset_moved(group, topic, queue_id, offset, p.nxt)
        return cmd.response(*self.finish(p, group, topic))

    def plan(self, addr: str, group: str, topic: str, queue_id: int, offset: int, max_nums: int, sys_flag: int,
             etype: str | None, expr: str | None, sub_version: Callable[[], int] | int) -> Plan | tuple[int, str]:
        """The decisions both paths share (the Python one, ``fastpull``'s per-request one): the refusals as
        (code, remark), else the store read and its status (reference §3.4) as a Plan. No side effect but the
        store's read counters; ``etype``/``expr`` are the pull's own subscription fields (None or empty: TAG,
        everything), ``sub_version`` its subVersion (a callable: parsed only where it is read)."""
        b = self.ctx
        cfg = b.config
        if not cfg.brokerPermission & Perm.READ:
            return ResponseCode.NO_PERMISSION, f"the broker[{cfg.brokerName}] pulling message is forbidden"
        sg = b.groups.table.get(group) or b.groups.find(group)
        if sg is None:
            return ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist"
        if not sg.consumeEnable:
            return ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}"
        # a slave serves a topic it holds queues for before the metadata sync brings its config (#27)
        tc = b.topics.readable(topic, b.store.topic_queues if b.is_slave else None)  # type: ignore[attr-defined]
        if tc is None:
            return ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!"
        if not tc.perm & Perm.READ:
            return ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden"
        if queue_id < 0 or queue_id >= tc.readQueueNums:
            return (ResponseCode.SYSTEM_ERROR, f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                    f"topicConfig.readQueueNums:[{tc.readQueueNums}] consumer:[{addr}]")

        if sys_flag & SUBSCRIPTION:
            etype = etype or "TAG"
            expr = expr or "*"
        else:
            info = b.consumers.groups.get(group)
            if info is None:
                return ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's group info not exist"
            if not sg.consumeBroadcastEnable and info.message_model == "BROADCASTING":
                return ResponseCode.NO_PERMISSION, f"the consumer group[{group}] can not consume by broadcast way"
            sub = info.subscriptions.get(topic)
            if sub is None:
                return ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist"
            wanted = sub_version if type(sub_version) is int else sub_version()  # type: ignore[operator]
            if sub.subVersion < wanted:
                return ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest"
            etype, expr = sub.expressionType, sub.subString
        try:
            mfilter = b.get_filter(group, topic, etype, expr)
        except FilterExpressionError as e:
            refusals.info("pull.subscription", "pull of %s by %s: bad %s subscription %s: %s", topic, group,
                          printable(etype, 20), printable(expr, 100), printable(str(e)))
            return ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"parse the consumer's subscription failed: {e}"
        except LookupError as e:
            return ResponseCode.SYSTEM_ERROR, str(e)

        store = b.store
        count = max_nums if max_nums < cfg.maxTransferCountOnMessageInMemory else cfg.maxTransferCountOnMessageInMemory
        codes = _tag_codes(mfilter) if self.compiled else _NOT_TAGS
        if codes is _NOT_TAGS:
            res = store.get_messages(group, topic, queue_id, offset, count, mfilter, cfg.maxTransferBytesOnMessageInMemory)
            n = len(res.messages)
            body = b"".join(res.messages)
            last = _Q.unpack_from(res.messages[-1], PHYSICAL_OFFSET)[0] if n else -1
        else:
            res, body, n, last = store.get_joined(topic, queue_id, offset, count, mfilter, codes,  # type: ignore[attr-defined]
                                                  cfg.maxTransferBytesOnMessageInMemory)
        status = res.status
        if status is FOUND:
            code = ResponseCode.SUCCESS
            nxt = res.next_begin_offset
        elif status is GetStatus.OFFSET_OVERFLOW_ONE:
            code, nxt = _NOT_FOUND, offset
        elif status is GetStatus.NO_MATCHED_MESSAGE or status is GetStatus.MESSAGE_WAS_REMOVING:
            code, nxt = _RETRY, res.next_begin_offset
        elif status is GetStatus.OFFSET_FOUND_NULL:
            code, nxt = _NOT_FOUND, res.next_begin_offset
        elif status is GetStatus.NO_MESSAGE_IN_QUEUE or status is GetStatus.NO_MATCHED_LOGIC_QUEUE:
            code, nxt = (_NOT_FOUND if offset == 0 else _MOVED), 0
        elif status is GetStatus.OFFSET_TOO_SMALL:
            code, nxt = _MOVED, res.min_offset
        else:  # OFFSET_OVERFLOW_BADLY
            code, nxt = _MOVED, res.max_offset
        if b.is_slave and code == _MOVED:  # a slave may lag its master: let the consumer retry, not jump
            code, nxt = _RETRY, offset
        return Plan(res, body, n, last, code, nxt, sg, mfilter)

    def commit(self, group: str, topic: str, queue_id: int, commit: int) -> None:
        """A pull's commitOffset (the caller checked the COMMIT_OFFSET flag and that this is a master)."""
        if commit >= 0:
            self.ctx.offsets.commit(group, topic, queue_id, commit)

    def suspends(self, p: Plan, sys_flag: int, timeout: Callable[[], int] | int) -> bool:
        """Whether the pull waits for messages (long or short polling); sets ``p.hold_ms``. ``timeout``: the
        pull's suspendTimeoutMillis (a callable: parsed only where it is read)."""
        if p.code != _NOT_FOUND or not sys_flag & SUSPEND:
            return False
        cfg = self.ctx.config
        if cfg.longPollingEnable:
            ms = timeout if type(timeout) is int else timeout()  # type: ignore[operator]
            p.hold_ms = min(ms, 3_600_000)  # an hour bounds a held pull
        else:
            p.hold_ms = cfg.shortPollingTimeMills
        return p.hold_ms > 0

    def finish(self, p: Plan, group: str, topic: str) -> tuple[int, str, dict[str, str], bytes]:
        """The answer (code, remark, ext fields, body) of a pull that goes no further; counts what it hands over."""
        b = self.ctx
        res = p.res
        status = res.status
        suggest = "0"
        if b.config.slaveReadEnable:
            suggest = str(p.sg.brokerId)
            if status is FOUND and p.n and self._lagging(p.last):
                suggest = str(p.sg.whichBrokerWhenConsumeSlowly)
        fields = {"suggestWhichBrokerId": suggest, "nextBeginOffset": str(p.nxt), "minOffset": str(res.min_offset),
                  "maxOffset": str(res.max_offset)}
        if p.code != 0:
            return p.code, _STATUS_NAMES[status], fields, b""  # the GetMessageStatus name, as 4.9's remark
        st = b.stats
        if st is not None:
            st.got(topic, group, p.n, len(p.body))
        return 0, _STATUS_NAMES[status], fields, p.body


def _planned(handed: Handed, cmd: RemotingCommand, fields: tuple[Any, ...]) -> Plan | tuple[int, str] | None:
    """The compiled half's plan of ``cmd`` when ``handed`` was decided from this frame's fields (its opaque, the
    fields the Python path parsed; the subVersion where the plan read it), else None: plan it here. A plan
    that failed raises its exception here, as ``plan`` would have (the Python path's error answer)."""
    if handed.opaque != cmd.opaque or handed.fields != fields:
        return None
    p = handed.plan
    if isinstance(p, Exception):
        raise p
    if type(p) is Plan and not fields[5] & SUBSCRIPTION and handed.sub_version != ext_int(cmd, "subVersion", 0):
        return None
    return p  # type: ignore[no-any-return]


class Plan:
    """A pull's store read and its status, as ``PullProcessor.plan`` decided them."""

    __slots__ = ("res", "body", "n", "last", "code", "nxt", "sg", "mfilter", "hold_ms")

    def __init__(self, res: GetResult, body: bytes, n: int, last: int, code: int, nxt: int, sg: Any,
                 mfilter: MessageFilter | None) -> None:
        self.res, self.body, self.n, self.last, self.code, self.nxt = res, body, n, last, code, nxt
        self.sg, self.mfilter, self.hold_ms = sg, mfilter, 0
