"""Client-facing processors besides send and pull: heartbeats, groups, offsets, locks, retries.

Codes 34, 35, 38 (membership), 14, 15, 29-32 (offsets), 41/42 (orderly locks),
36 (CONSUMER_SEND_MSG_BACK: retry through %RETRY%group with a delay level, DLQ
after the group's maximum).
"""

from __future__ import annotations

import json
import logging
import os
import random
import struct
import time
from typing import TYPE_CHECKING, Any

from rmq.kernel import GetStatus, PutStatus, RateLimitedLog, record_of
from rmq.plugins.broker.clients import ClientChannel, parse_heartbeat
from rmq.plugins.broker.context import TableProcessor
from rmq.plugins.broker.fastbeat import FastBeat
from rmq.protocol import access
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand, ext_bool, ext_i32, ext_int, ext_str
from rmq.protocol.common import Perm, Prop
from rmq.protocol.jsonbody import loads
from rmq.protocol.message import MessageDecodeError, decode_message, offset_msg_id
from rmq.protocol.names import DLQ_PREFIX, RETRY_PREFIX, printable, require_group, require_topic

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rmq.kernel import Connection
    from rmq.plugins.broker.context import ProcessorContext

log = logging.getLogger("rmq.broker")
refusals = RateLimitedLog(log)  # lines a peer can trigger at will

FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
_Q = struct.Struct(">q")


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


def first_in_memory(store: Any, topic: str, qid: int, in_memory_bytes: int) -> bool | None:
    """Whether a queue's first message (offset 0) is still among the newest ``in_memory_bytes`` of the
    commitlog (accessMessageInMemoryMaxRatio of the memory): a group with no offset yet may start
    there. None: the queue holds no message at 0."""
    res = store.get_messages("", topic, qid, 0, 1)
    if res.status is not GetStatus.FOUND or not res.messages:
        return None
    (phys,) = _Q.unpack_from(res.messages[0], 28)
    return bool(store.max_phy_offset - phys <= in_memory_bytes)


class ConsumerProcessor(TableProcessor):
    def __init__(self, ctx: ProcessorContext) -> None:
        super().__init__(ctx)
        self._in_memory_bytes = int(physical_memory() * ctx.config.accessMessageInMemoryMaxRatio / 100)
        self.fast = FastBeat(ctx, self)  # unchanged heartbeats answered per read, after the first one served here

    def requests(self) -> Iterable[tuple[int, Any, access.Access]]:
        rc = RequestCode
        consume = access.topic("topic", access.SUB, group="consumerGroup")
        read = access.topic("topic", access.SUB)
        return (
            (rc.HEART_BEAT, self.heart_beat, access.Access(resolve=access.heartbeat)),
            (rc.UNREGISTER_CLIENT, self.unregister_client, access.group("consumerGroup?")),
            (rc.GET_CONSUMER_LIST_BY_GROUP, self.consumer_list, access.group()),
            (rc.QUERY_CONSUMER_OFFSET, self.query_consumer_offset, consume),
            (rc.UPDATE_CONSUMER_OFFSET, self.update_consumer_offset, consume),
            (rc.SEARCH_OFFSET_BY_TIMESTAMP, self.search_offset, read),
            (rc.GET_MAX_OFFSET, self.max_offset, read),
            (rc.GET_MIN_OFFSET, self.min_offset, read),
            (rc.GET_EARLIEST_MSG_STORETIME, self.earliest_time, read),
            (rc.LOCK_BATCH_MQ, self.lock_batch, access.Access(resolve=access.body_queues)),
            (rc.UNLOCK_BATCH_MQ, self.unlock_batch, access.Access(resolve=access.body_queues)),
            (rc.CONSUMER_SEND_MSG_BACK, self.send_back,
             access.group("group", after_read="SUB on the topic of the message at the commit-log offset")),
            # compiles a subscription expression: reads and changes nothing
            (rc.CHECK_CLIENT_CONFIG, self.check_client_config, access.SIGNED),
        )

    # ------------------------------------------------------------------ membership

    async def heart_beat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        beat = self.fast.beat_of(conn)  # the connection's last heartbeat: this one once served (fastbeat)
        if beat is not None:
            beat.body = None
        try:
            hb = parse_heartbeat(cmd.body)
        except (ValueError, UnicodeDecodeError) as e:
            refusals.info("heartbeat", "bad heartbeat from %s:%d: %s", *conn.remote_addr[:2], printable(str(e)))
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad heartbeat body: {e}")
        b.watch_client(conn)
        now = time.monotonic()
        for data in hb.consumers:
            sg = b.groups.find(data.group)
            notify = True
            if sg is not None:
                notify = sg.notifyConsumerIdsChangedEnable
                b.topics.create_in_send_back(
                    RETRY_PREFIX + data.group, sg.retryQueueNums, Perm.READ_WRITE, 2 if data.unit_mode else 0
                )
            ch = ClientChannel(conn, hb.client_id, cmd.language, cmd.version, now)
            if b.consumers.register(data, ch) and notify:
                b.notify_consumer_ids_changed(data.group)
        for group in hb.producer_groups:
            b.producers.register(group, ClientChannel(conn, hb.client_id, cmd.language, cmd.version, now))
        if beat is not None:
            beat.remember(cmd.body, cmd.language, cmd.version, hb)
        return cmd.response()

    async def unregister_client(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        pg = ext_str(cmd, "producerGroup", "")
        if pg:
            b.producers.unregister(pg, conn)
        cg = ext_str(cmd, "consumerGroup", "")
        if cg and b.consumers.unregister(cg, conn):
            sg = b.groups.table.get(cg)
            if (sg is None or sg.notifyConsumerIdsChangedEnable) and cg in b.consumers.groups:
                b.notify_consumer_ids_changed(cg)
        return cmd.response()

    async def consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = ext_str(cmd, "consumerGroup")
        info = self.ctx.consumers.get(group)
        if info is None or not info.channels:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        body = json.dumps({"consumerIdList": info.client_ids()}, separators=(",", ":")).encode()
        return cmd.response(body=body)

    async def check_client_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG (46): Java consumers with SQL92 subscriptions ask before starting."""
        try:
            doc = loads(cmd.body or b"{}")
            sub = doc.get("subscriptionData") or {}
            etype = str(sub.get("expressionType") or "TAG")
            expr = str(sub.get("subString") or "*")
            group = str(doc.get("group") or "")
            topic = str(sub.get("topic") or "")
        except (ValueError, AttributeError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad CHECK_CLIENT_CONFIG body: {e}")
        if etype.upper() == "TAG":
            return cmd.response()
        try:
            self.ctx.get_filter(group, topic, etype, expr)
        except LookupError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        except ValueError as e:  # FilterExpressionError is a ValueError
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"parse the consumer's subscription failed: {e}")
        return cmd.response()

    # ------------------------------------------------------------------ offsets

    async def query_consumer_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        group, topic, qid = ext_str(cmd, "consumerGroup"), ext_str(cmd, "topic"), ext_i32(cmd, "queueId")
        offset = b.offsets.query(group, topic, qid)
        if offset >= 0:
            return cmd.response(ext={"offset": str(offset)})
        # Nothing committed: a fresh queue whose first message is still "in memory" starts at 0,
        # anything else is QUERY_NOT_FOUND (the client then applies consumeFromWhere).
        if b.store.get_min_offset(topic, qid) <= 0 and first_in_memory(b.store, topic, qid,
                                                                        self._in_memory_bytes) is not False:
            return cmd.response(ext={"offset": "0"})
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    async def update_consumer_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        group, topic = ext_str(cmd, "consumerGroup"), ext_str(cmd, "topic")
        qid, offset = ext_i32(cmd, "queueId"), ext_int(cmd, "commitOffset")
        tc = b.topics.table.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"Topic {printable(topic)} not exist!")
        if not 0 <= qid < max(tc.readQueueNums, tc.writeQueueNums, 1):
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"queueId[{qid}] is illegal for topic[{topic}]")
        if not 0 <= offset < 1 << 63:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"commitOffset {offset} is out of range")
        b.offsets.commit(group, topic, qid, offset)
        return cmd.response()

    async def search_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        off = self.ctx.store.get_offset_by_time(ext_str(cmd, "topic"), ext_i32(cmd, "queueId"), ext_int(cmd, "timestamp"))
        return cmd.response(ext={"offset": str(off)})

    async def max_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        off = self.ctx.store.get_max_offset(ext_str(cmd, "topic"), ext_i32(cmd, "queueId"))
        return cmd.response(ext={"offset": str(off)})

    async def min_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        off = self.ctx.store.get_min_offset(ext_str(cmd, "topic"), ext_i32(cmd, "queueId"))
        return cmd.response(ext={"offset": str(off)})

    async def earliest_time(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ts = self.ctx.store.get_earliest_store_time(ext_str(cmd, "topic"), ext_i32(cmd, "queueId"))
        return cmd.response(ext={"timestamp": str(ts)})

    # ------------------------------------------------------------------ orderly locks

    @staticmethod
    def _lock_body(cmd: RemotingCommand) -> tuple[str, str, list[tuple[str, str, int]]]:
        doc = loads(cmd.body or b"{}")
        if not isinstance(doc, dict):
            raise ValueError("lock body is not a JSON object")
        mq_set = doc.get("mqSet") or []
        if not isinstance(mq_set, list) or len(mq_set) > 65536:
            raise ValueError("mqSet must be an array of at most 65536 queues")
        mqs = []
        for mq in mq_set:
            mqs.append((require_topic(str(mq["topic"])), str(mq["brokerName"]), int(mq["queueId"])))
        client_id = str(doc.get("clientId") or "")
        if len(client_id) > 255 or not client_id.isprintable():
            raise ValueError(f"clientId {printable(client_id, 60)} is not printable or too long")
        return require_group(str(doc.get("consumerGroup") or "")), client_id, mqs

    async def lock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            group, client_id, mqs = self._lock_body(cmd)
        except (ValueError, KeyError, TypeError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad LOCK_BATCH_MQ body: {e}")
        locked = self.ctx.locks.try_lock_batch(group, mqs, client_id)
        body = {"lockOKMQSet": [{"brokerName": b, "queueId": q, "topic": t} for t, b, q in locked]}
        return cmd.response(body=json.dumps(body, separators=(",", ":")).encode())

    async def unlock_batch(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            group, client_id, mqs = self._lock_body(cmd)
        except (ValueError, KeyError, TypeError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad UNLOCK_BATCH_MQ body: {e}")
        self.ctx.locks.unlock_batch(group, mqs, client_id)
        return cmd.response()

    # ------------------------------------------------------------------ retries

    async def send_back(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        group = ext_str(cmd, "group")
        phys = ext_int(cmd, "offset")
        delay = ext_i32(cmd, "delayLevel", 0)
        sg = b.groups.find(group)
        if sg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}{FAQ}")
        if not b.accepts_writes:
            return cmd.response(ResponseCode.NO_PERMISSION, f"the broker[{b.config.brokerName}] sending message is forbidden")
        if sg.retryQueueNums <= 0:
            return cmd.response()
        raw = b.store.look_message_by_offset(phys)
        if raw is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {phys}")
        try:
            msg = decode_message(raw, decompress=False)
        except MessageDecodeError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"message at offset {phys} is unreadable: {e}")
        # the group's SUB was checked before; the message's topic is known only now (issue #26): a group
        # may retry only what it may read, checked before any retry topic or message is made
        refused = access.check_after_read(self._services, conn.remote_addr[0], cmd, [access.read_of(msg.topic)])
        if refused is not None:
            return cmd.response(ResponseCode.NO_PERMISSION, refused)
        unit = ext_bool(cmd, "unitMode", False)
        topic = RETRY_PREFIX + group
        tc = b.topics.create_in_send_back(topic, sg.retryQueueNums, Perm.READ_WRITE, 2 if unit else 0)
        if not tc.perm & Perm.WRITE:
            return cmd.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        props = msg.properties
        changes: dict[str, str | None] = {}
        if Prop.RETRY_TOPIC not in props:
            changes[Prop.RETRY_TOPIC] = msg.topic
        max_times = sg.retryMaxTimes
        hdr_max = ext_i32(cmd, "maxReconsumeTimes", None)
        if cmd.version >= 121 and hdr_max is not None and hdr_max >= 0:
            max_times = hdr_max
        queue_id = random.randrange(tc.writeQueueNums or 1)
        if msg.reconsume_times >= max_times or delay < 0:
            topic = DLQ_PREFIX + group
            dtc = b.topics.create_in_send_back(topic, 1, Perm.READ_WRITE, 2 if unit else 0)
            queue_id = random.randrange(dtc.writeQueueNums or 1)
            changes[Prop.DELAY] = "0"  # as 4.9's setDelayTimeLevel(0): the dead letter says DELAY=0
            log.info("message %s of group %s reached %d reconsumes: to %s", offset_msg_id(b.store_host, phys),
                     group, msg.reconsume_times, topic)
        else:
            if delay == 0:
                delay = 3 + msg.reconsume_times
            changes[Prop.DELAY] = str(delay)
        # as 4.9: the stored message's own ORIGIN_MESSAGE_ID, else its offset msgId (the header's
        # originMsgId is not used)
        if not (props.get(Prop.ORIGIN_MESSAGE_ID) or "").strip():
            changes[Prop.ORIGIN_MESSAGE_ID] = msg.offset_msg_id
        changes[Prop.WAIT] = "false"
        # RocketMQ clears the transaction type bits: a retried message is a plain message
        rec = record_of(msg, topic, queue_id, changes, sys_flag=msg.sys_flag & ~0x30,
                        reconsume_times=msg.reconsume_times + 1, prepared_tx_offset=0)
        result = await b.put(rec)
        if result.status is PutStatus.PUT_OK:
            return cmd.response()
        refusals.warning("sendback", "send back for group %s failed: %s %s", group, result.status.name, result.remark)
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"{result.status.name} {result.remark}".strip())
