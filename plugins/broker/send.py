"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320): validate, route, store, answer.

Hot path of the broker, so: header fields read straight from ``cmd.ext`` by the
spelling of the request code (no normalised copy), topic legality cached by the
topic table, the properties string never parsed unless it holds DELAY, TRAN_MSG
or a retry topic is involved, and the offset msgId built from a precomputed hex
prefix.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING, Any

from rmq.kernel import MessageRecord, PutResult, PutStatus, RateLimitedLog
from rmq.plugins.broker.fastpull import wants
from rmq.plugins.broker.fastsend import FastSend
from rmq.plugins.broker.flowcontrol import SendFlowControl
from rmq.plugins.broker.topics import NOT_ALLOWED_SEND, TopicConfig
from rmq.protocol.access import send as access_send
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import HeaderError, RemotingCommand, ext_i32, ext_int
from rmq.protocol.common import (
    MAX_PROPERTIES_BYTES,
    Perm,
    SysFlag,
    prop_value,
    properties_problem,
    set_props,
    waits_for_store,
)
from rmq.protocol.headers import SEND_LONG, SEND_V2, SEND_V2_CODES, SendKeys
from rmq.protocol.message import BatchError, decode_batch
from rmq.protocol.names import DLQ_PREFIX, RETRY_PREFIX, SYSTEM_TOPIC_PREFIX, printable, validate_topic

if TYPE_CHECKING:
    from rmq.kernel import Connection
    from rmq.plugins.broker.context import ProcessorContext

log = logging.getLogger("rmq.broker")
refusals = RateLimitedLog(log)  # lines a peer can trigger at will

FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."

_TRUE = frozenset(("true", "1", "True", "TRUE"))
_BATCH_CODE = int(RequestCode.SEND_BATCH_MESSAGE)
_PROPS_SAFE_CHARS = MAX_PROPERTIES_BYTES // 4  # at most 4 UTF-8 bytes per character: no encode needed below
_BORN_KEY = "broker.born"
_PUT_OK = PutStatus.PUT_OK  # an enum member lookup costs ~70 ns: once per module, not per send
_VERSION_HONOURS_MAX_RECONSUME = 121  # V3_4_9

_PUT_CODES: dict[PutStatus, tuple[int, str]] = {
    PutStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, ""),
    PutStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, ""),
    PutStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, ""),
    PutStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "service not available now. It may be caused by one of the following reasons: the broker's disk is "
        "full, messages are put to the slave, message store has been shut down, etc.",
    ),
    PutStatus.CREATE_MAPPED_FILE_FAILED: (ResponseCode.SYSTEM_ERROR, "create mapped file failed, server is busy or broken."),
    PutStatus.MESSAGE_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, "the message is illegal, maybe msg body or properties length not matched."),
    PutStatus.PROPERTIES_SIZE_EXCEEDED: (ResponseCode.MESSAGE_ILLEGAL, "the message is illegal, maybe msg properties length limit 32k."),
    PutStatus.OS_PAGECACHE_BUSY: (ResponseCode.SYSTEM_BUSY, "[PC_SYNCHRONIZED]broker busy, start flow control for a while"),
    PutStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"),
    # RocketMQ 5's mapping; the remark is the timer stage's own
    PutStatus.WHEEL_TIMER_FLOW_CONTROL: (ResponseCode.SYSTEM_ERROR, ""),
    PutStatus.WHEEL_TIMER_MSG_ILLEGAL: (ResponseCode.MESSAGE_ILLEGAL, ""),
    PutStatus.WHEEL_TIMER_NOT_ENABLE: (ResponseCode.SYSTEM_ERROR, ""),
}
_NO_FDS = "too many open files"  # how a store's remark starts when descriptors, not space, ran out
_STORED_CODES = frozenset((PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
                           PutStatus.SLAVE_NOT_AVAILABLE))


class SendProcessor:
    def __init__(self, ctx: ProcessorContext) -> None:
        self.ctx = ctx
        self.inflight = 0
        cfg = ctx.config
        self.flow = SendFlowControl(cfg.waitTimeMillsInSendQueue, cfg.osPageCacheBusyTimeOutMills)
        self._cluster = f"CLUSTER\x01{cfg.brokerClusterName}"
        self.fast = FastSend(ctx, self)  # the compiled path: given to a connection after its first stored send

    def register(self, registry: object, owner: str) -> None:
        for code, access in ((RequestCode.SEND_MESSAGE, access_send("topic", "producerGroup")),
                             (RequestCode.SEND_MESSAGE_V2, access_send("b", "a")),
                             (RequestCode.SEND_BATCH_MESSAGE, access_send("b", "a"))):
            registry.register(code, self.send, owner=owner, access=access)  # type: ignore[attr-defined]

    async def send(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        cfg = b.config
        if self.inflight >= cfg.sendThreadPoolQueueCapacity:
            return cmd.response(
                ResponseCode.SYSTEM_BUSY,
                f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, {self.inflight} sends in "
                f"flight (sendThreadPoolQueueCapacity {cfg.sendThreadPoolQueueCapacity})",
            )
        if self.flow.busy:  # the loop just stalled: sends read meanwhile fail fast (flowcontrol.py)
            return cmd.response(ResponseCode.SYSTEM_BUSY, self.flow.remark)
        ext = cmd.ext
        code = cmd.code
        keys = SEND_V2 if code in SEND_V2_CODES else SEND_LONG
        get = ext.get
        topic = get(keys.topic)
        if topic is None:
            raise HeaderError(keys.topic, "is missing")
        # Java's parse rules and ranges (an int field >= 2^31 must not reach the store and take an
        # offset): plain short digits inline, anything else (and every refusal) through ext_i32/ext_int
        qid_text = get(keys.queue_id)
        v = qid_text
        queue_id = int(v) if v and len(v) < 10 and v.isdigit() and v.isascii() else ext_i32(cmd, keys.queue_id)
        v = get(keys.sys_flag)
        sys_flag = int(v) if v and len(v) < 10 and v.isdigit() and v.isascii() else ext_i32(cmd, keys.sys_flag)
        v = get(keys.born_timestamp)
        born_ts = int(v) if v and len(v) < 19 and v.isdigit() and v.isascii() else ext_int(cmd, keys.born_timestamp)
        v = get(keys.flag)
        flag = int(v) if v and len(v) < 10 and v.isdigit() and v.isascii() else ext_i32(cmd, keys.flag)
        props = get(keys.properties) or ""
        batch = code == _BATCH_CODE or get(keys.batch) in _TRUE
        # as 4.9 stores it: without WAIT=true (9 bytes a message; WAIT=false stays, the store's SYNC_FLUSH
        # needs it) and with CLUSTER = this broker's cluster (a request-reply responder builds the reply topic
        # from it). Any other WAIT value: answered without waiting for the slave (isWaitStoreMsgOK). A batch's
        # own properties are appended to each member whole, WAIT=true included, as 4.9's batch encoder does;
        # a delayed or half message keeps it too (4.9 encodes their properties again after putting it back)
        waits = True
        i = props.find("WAIT\x01true")
        if batch or (i >= 0 and _reencoded(props, sys_flag)):
            waits = waits_for_store(props)
        elif i >= 0 and (i == 0 or props[i - 1] == "\x02"):
            j = i + 9
            if j == len(props):
                props = props[:i - 1] if i else ""
            elif props[j] == "\x02":
                props = props[:i] + props[j + 1:]
            else:
                waits = waits_for_store(props)
        elif "WAIT\x01" in props:  # a scan only for a send without WAIT=true
            waits = waits_for_store(props)
        if "CLUSTER\x01" in props:
            props = set_props(props, {"CLUSTER": cfg.brokerClusterName})
        else:
            props = f"{props}{self._cluster}" if not props or props[-1] == "\x02" else f"{props}\x02{self._cluster}"
        body = cmd.body

        tc = b.topics.table.get(topic)
        if tc is None or not b.accepts_writes or topic in NOT_ALLOWED_SEND or topic[:8] == "rmq_sys_":
            refused = self._check_topic(conn, cmd, topic, keys)
            if isinstance(refused, RemotingCommand):
                return refused
            tc = refused
        if not tc.perm & Perm.WRITE:
            return cmd.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        if queue_id >= tc.writeQueueNums and queue_id >= tc.readQueueNums:
            nums = max(tc.writeQueueNums, tc.readQueueNums)
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, topic[{topic}] has {nums} queues. Producer: {_peer(conn)}",
            )
        if queue_id < 0:
            queue_id = random.randrange(tc.writeQueueNums) if tc.writeQueueNums > 0 else 0
            qid_text = str(queue_id)
        if len(body) > cfg.maxMessageSize:
            refusals.info("send.body", "send to %s from %s:%d refused: body of %d bytes", topic, *conn.remote_addr[:2],
                          len(body))
            return cmd.response(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message body size over max value, MAX: {cfg.maxMessageSize}, got {len(body)} bytes",
            )
        if len(props) > _PROPS_SAFE_CHARS and len(props.encode()) > MAX_PROPERTIES_BYTES:
            return cmd.response(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the message properties length {len(props.encode())} exceeds the limit {MAX_PROPERTIES_BYTES}",
            )
        bad_props = properties_problem(props)
        if bad_props is not None:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"malformed message properties: {bad_props}")
        reconsume = 0
        if topic[0] == "%":
            reconsume = ext_i32(cmd, keys.reconsume_times, 0)
            if reconsume < 0:
                raise HeaderError(keys.reconsume_times, f"is negative: {reconsume}")
            if topic.startswith(RETRY_PREFIX):
                if batch:
                    return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"batch request does not support retry group {topic}")
                routed = self._retry_or_dlq(cmd, keys, topic, reconsume, get(keys.max_reconsume_times), queue_id)
                if isinstance(routed, RemotingCommand):
                    return routed
                topic, queue_id = routed
                qid_text = str(queue_id)
        if "TRAN_MSG\x01" in props and prop_value(props, "TRAN_MSG") == "true":
            if b.config.rejectTransactionMessage or "TRAN_MSG" not in b.pipeline.claimed:
                return cmd.response(
                    ResponseCode.NO_PERMISSION,
                    f"the broker[{b.config.brokerName}] sending transaction message is forbidden"
                    + ("" if b.config.rejectTransactionMessage else " (no plugin handles transaction messages)"),
                )

        self.inflight += 1
        try:
            if batch:
                return await self._send_batch(conn, cmd, topic, queue_id, body, props, sys_flag, born_ts, reconsume,
                                              waits)
            born = conn.attributes.get(_BORN_KEY) or b.born_host(conn)
            rec = MessageRecord(topic, queue_id, body, flag, props, sys_flag, born_ts, born, reconsume)
            extra = None
            if "DELAY\x01" in props or "TIMER_" in props or "TRAN_MSG\x01" in props:  # PutPipeline.may_defer
                refused = b.pipeline.route(rec)  # delay levels, timers, half messages: re-routed by their stage
                if refused is not None:
                    return self._answer(cmd, queue_id, refused, None)
                if rec.topic != topic and not reconsume:
                    extra = b.pipeline.response_fields(rec)  # a parked timer message's recallHandle
            store = b.store
            if _holds(b, store, conn):
                result = store.put_message_nowait(rec)  # SYNC_FLUSH: the answer is held, no task waits
            else:
                result = await store.put_message(rec)
                if waits and b.sync_master and b.replication is not None and result.status is _PUT_OK:
                    await b.wait_slave(result)
        finally:
            self.inflight -= 1
        if result.status is _PUT_OK:  # the common case, inline
            st = b.stats
            if st is not None:
                st.put(topic, 1, len(body))
            fields = {
                "msgId": f"{b.msg_id_prefix}{result.wrote_offset:016X}",
                "queueId": qid_text,
                "queueOffset": str(result.queue_offset),
                "MSG_REGION": cfg.regionId,
                "TRACE_ON": b.trace_on,
            }
            if extra:
                fields.update(extra)
            if wants(conn, "send"):
                self.fast.install(conn)
            if result.durable_at:
                return cmd.response(0, None, fields).held_until(
                    store.durable, result.durable_at, store.flush_timeout, ResponseCode.FLUSH_DISK_TIMEOUT)
            return cmd.response(0, None, fields)
        return self._answer(cmd, queue_id, result, None)

    def _check_topic(self, conn: Connection, cmd: RemotingCommand, topic: str,
                     keys: SendKeys) -> RemotingCommand | TopicConfig:
        """The slow path of topic checks: broker permission, system topics, validation, auto-creation."""
        b = self.ctx
        cfg = b.config
        ext = cmd.ext
        if b.is_slave:
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                                f"the broker[{cfg.brokerName}] is a slave (brokerRole SLAVE) and takes no messages")
        if not cfg.brokerPermission & Perm.WRITE:
            # as 4.9's msgCheck: a broker without write permission refuses order topics only (the name
            # server's routes already steer other sends away); the topic's own permission is checked after
            otc = b.topics.table.get(topic)
            if otc is not None and otc.order:
                return cmd.response(ResponseCode.NO_PERMISSION,
                                    f"the broker[{cfg.brokerName}] sending message is forbidden")
        elif not b.accepts_writes:  # controller mode: fenced (no role from the controller, or cut off from it)
            why = (b.replicas.fenced_reason if b.replicas is not None else "") or "it has no role from the controller yet"
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE,
                                f"the broker[{cfg.brokerName}] takes no messages now: {why}")
        if topic in NOT_ALLOWED_SEND or topic.startswith(SYSTEM_TOPIC_PREFIX):
            return cmd.response(ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden.")
        tc = b.topics.table.get(topic)
        if tc is not None:
            return tc
        reason = validate_topic(topic)
        if reason is not None:  # 4.9's TopicValidator answers SYSTEM_ERROR (5.x: INVALID_PARAMETER)
            refusals.info("send.topic", "send from %s:%d refused: %s", *conn.remote_addr[:2], reason)
            return cmd.response(ResponseCode.SYSTEM_ERROR, reason)
        client_nums = ext_i32(cmd, keys.default_topic_queue_nums, 4)
        unit = ext.get(keys.unit_mode) in _TRUE
        default_topic = ext.get(keys.default_topic) or ""
        tc = b.topics.create_in_send(topic, default_topic, client_nums, 2 if unit else 0, _peer(conn))
        if tc is None and topic.startswith(RETRY_PREFIX):
            tc = b.topics.create_in_send_back(topic, 1, Perm.READ_WRITE)
        if tc is None:
            refusals.info("send.missing", "send to missing topic %s from %s:%d refused (auto-create %s)", topic,
                     *conn.remote_addr[:2], "on" if cfg.autoCreateTopicEnable else "off")
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!{FAQ}")
        return tc

    def _retry_or_dlq(self, cmd: RemotingCommand, keys: SendKeys, topic: str, reconsume: int, max_hdr: str | None,
                      queue_id: int) -> tuple[str, int] | RemotingCommand:
        """A send to %RETRY%group: to the DLQ once reconsumeTimes reached the group's maximum."""
        b = self.ctx
        group = topic[len(RETRY_PREFIX):]
        sg = b.groups.find(group)
        if sg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}{FAQ}")
        max_times = sg.retryMaxTimes
        if cmd.version >= _VERSION_HONOURS_MAX_RECONSUME and max_hdr:
            max_times = ext_i32(cmd, keys.max_reconsume_times)
        if reconsume >= max_times:
            dlq = DLQ_PREFIX + group
            dtc = b.topics.create_in_send_back(dlq, 1, Perm.READ_WRITE)
            log.info("message for %s reached %d reconsumes: to %s", topic, reconsume, dlq)
            return dlq, random.randrange(dtc.writeQueueNums or 1)
        return topic, queue_id

    async def _send_batch(self, conn: Connection, cmd: RemotingCommand, topic: str, queue_id: int, body: bytes,
                          props: str, sys_flag: int, born_ts: int, reconsume: int, waits: bool) -> RemotingCommand:
        b = self.ctx
        try:
            items = decode_batch(body)
        except BatchError as e:
            refusals.info("send.batch", "batch from %s:%d refused: %s", *conn.remote_addr[:2], printable(str(e)))
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {e}")
        if not items:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "empty batch")
        born = b.born_host(conn)
        recs = []
        add = recs.append
        batch_problem = b.pipeline.batch_problem
        for mbody, mflag, mprops in items:
            if props:
                mprops = f"{mprops}{props}" if not mprops or mprops.endswith("\x02") else f"{mprops}\x02{props}"
            if len(mprops) > _PROPS_SAFE_CHARS and len(mprops.encode()) > MAX_PROPERTIES_BYTES:
                return cmd.response(ResponseCode.MESSAGE_ILLEGAL, "a batch member's properties exceed 32767 bytes")
            bad_props = properties_problem(mprops)
            if bad_props is None and ("DELAY\x01" in mprops or "TIMER_" in mprops or "TRAN_MSG\x01" in mprops):
                bad_props = batch_problem(mprops)  # PutPipeline.may_defer's test, inline
            if bad_props is not None:
                return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"batch member refused: {bad_props}")
            add(MessageRecord(topic, queue_id, mbody, mflag, mprops, sys_flag, born_ts, born, reconsume))
        store = b.store
        if _holds(b, store, conn):
            result = store.put_messages_nowait(recs)  # SYNC_FLUSH: the answer is held, no task waits
        else:
            result = await store.put_messages(recs)
            if waits and b.sync_master and b.replication is not None and result.status is PutStatus.PUT_OK:
                await b.wait_slave(result)
        if result.status is PutStatus.PUT_OK:
            if b.stats is not None:
                b.stats.put(topic, len(recs), len(body))
            if wants(conn, "send"):  # a producer that only sends batches
                self.fast.install(conn)
        resp = self._answer(cmd, queue_id, result, result.physical_offsets)
        if result.durable_at:
            return resp.held_until(store.durable, result.durable_at, store.flush_timeout,
                                   ResponseCode.FLUSH_DISK_TIMEOUT)
        return resp

    def _answer(self, cmd: RemotingCommand, queue_id: int, result: PutResult, batch_offsets: object) -> RemotingCommand:
        status = result.status
        if status in _STORED_CODES:
            b = self.ctx
            prefix = b.msg_id_prefix
            if batch_offsets:
                msg_id = ",".join([f"{prefix}{p:016X}" for p in batch_offsets])  # type: ignore[attr-defined]
            else:
                msg_id = f"{prefix}{result.wrote_offset:016X}"
            code = ResponseCode.SUCCESS if status is PutStatus.PUT_OK else _PUT_CODES[status][0]
            return cmd.response(code, None, {
                "msgId": msg_id,
                "queueId": str(queue_id),
                "queueOffset": str(result.queue_offset),
                "MSG_REGION": b.config.regionId,
                "TRACE_ON": b.trace_on,
            })
        code, remark = _PUT_CODES.get(status, (ResponseCode.SYSTEM_ERROR, "UNKNOWN_ERROR"))
        if result.remark.startswith(_NO_FDS):  # not the disk: the boilerplate would send operators astray
            remark = f"service not available now: {result.remark}"
        elif result.remark:
            remark = f"{remark} {result.remark}".strip() if remark else result.remark
        refusals.warning(f"put.{status.name}", "put refused by the store: %s %s", status.name, result.remark)
        return cmd.response(code, remark)


def _reencoded(props: str, sys_flag: int) -> bool:
    """Whether 4.9 stores this message's properties as sent, WAIT=true included: its CommitLog encodes a
    delayed message's again (REAL_TOPIC / REAL_QID added; a plain or committed one), and its transaction
    bridge a half message's (TRAN_MSG=true), both from the map SendMessageProcessor had put WAIT back into."""
    if "TRAN_MSG\x01" in props and (prop_value(props, "TRAN_MSG") or "").lower() == "true":
        return True
    if "DELAY\x01" not in props or sys_flag & SysFlag.TX_MASK not in (SysFlag.TX_NOT, SysFlag.TX_COMMIT):
        return False
    level = prop_value(props, "DELAY") or ""
    return level.isascii() and level.isdigit() and int(level) > 0


def _holds(b: ProcessorContext, store: Any, conn: Connection) -> bool:
    """A send may be answered by a held answer: the store offers ``put_message_nowait`` (its class,
    not a wrapper's ``__getattr__``: a wrapper that counts or filters puts must see them) and holds
    answers now (SYNC_FLUSH), the connection can hold one, and no slave must confirm first."""
    return (getattr(type(store), "put_message_nowait", None) is not None and bool(store.holds_answers)
            and getattr(conn, "holds_answers", False) and not (b.sync_master and b.replication is not None))


def _peer(conn: Connection) -> str:
    host, port = conn.remote_addr[:2]
    return f"{host}:{port}"
