"""Half messages, END_TRANSACTION and the check service (see the package docstring)."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import anyio

from rmq.kernel import GetStatus, MessageRecord, PutResult, PutStatus, RateLimitedLog, record_of
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand, ext_bool, ext_int, ext_str
from rmq.protocol.common import Prop, SysFlag, prop_value, set_props
from rmq.protocol.message import (
    MessageDecodeError,
    decode_message,
    decode_offset_msg_id,
    encode_message,
    offset_msg_id,
)
from rmq.protocol.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

if TYPE_CHECKING:
    from rmq.kernel import BrokerContext, Connection
    from rmq.protocol.message import MessageExt

log = logging.getLogger("rmq.broker.transaction")
_limited = RateLimitedLog(log, interval=30.0)

SYS_GROUP = "CID_RMQ_SYS_TRANS"
OP_TAG = "d"
_TX_BITS = SysFlag.TX_PREPARED | SysFlag.TX_COMMIT  # 0x4 | 0x8 = the transaction type bits
_BATCH = 32
_COMMITTED_MAX = 65_536  # transactions remembered as committed, for a second END that must not store again


class HalfMessageStage:
    """Put stage for ``TRAN_MSG``: a prepared message becomes a half message (stored, unseen)."""

    trigger = Prop.TRAN_MSG
    priority = 100  # before delay levels: a half is never delayed (its delay applies at commit)

    def route(self, rec: MessageRecord) -> PutResult | None:
        if rec.topic == TRANS_HALF_TOPIC or rec.sys_flag & _TX_BITS != SysFlag.TX_PREPARED:
            return None  # a half put back by the check service, or not a prepared message
        if prop_value(rec.properties, Prop.TRAN_MSG) != "true":
            return None
        rec.properties = set_props(rec.properties, {Prop.REAL_TOPIC: rec.topic, Prop.REAL_QID: str(rec.queue_id)})
        rec.topic = TRANS_HALF_TOPIC
        rec.queue_id = 0
        rec.sys_flag &= ~_TX_BITS
        return None


def op_record(half_queue_offset: int) -> MessageRecord:
    """An op record ("d": this half is done). WAIT=false as RocketMQ's makeOpMessageInner: answered once
    appended, never failed by a SYNC_MASTER's missing slave (the half would be checked again)."""
    return MessageRecord(TRANS_OP_HALF_TOPIC, 0, str(half_queue_offset).encode(), 0,
                         f"{Prop.TAGS}\x01{OP_TAG}\x02{Prop.WAIT}\x01false\x02", 0, time.time_ns() // 1_000_000)


class TransactionEnder:
    """END_TRANSACTION: commit or roll back one half message (from the producer or a check answer)."""

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        # (group, UNIQ_KEY, born time) of recent commits, oldest first: a check's copy of a half committed
        # meanwhile, or an END sent again after its answer was lost, settles the half without a second
        # message (RocketMQ 4.9 stores it again). In memory, so a restart forgets it.
        self.committed: dict[tuple[str, str, int], None] = {}

    async def end(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        b = self.broker
        if b.is_slave:
            return cmd.response(ResponseCode.SLAVE_NOT_AVAILABLE)
        group = ext_str(cmd, "producerGroup")
        queue_offset = ext_int(cmd, "tranStateTableOffset")
        phys = ext_int(cmd, "commitLogOffset")
        kind = ext_int(cmd, "commitOrRollback", 0)
        from_check = ext_bool(cmd, "fromTransactionCheck", False)
        if kind not in (SysFlag.TX_COMMIT, SysFlag.TX_ROLLBACK):
            if kind != 0:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"commitOrRollback {kind} is not 8, 12 or 0")
            log.debug("transaction %s left unknown by %s (%s)", ext_str(cmd, "msgId", ""), group,
                      "check" if from_check else "producer")
            return None  # as RocketMQ: no answer at all
        raw = b.store.look_message_by_offset(phys)
        if raw is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "Find prepared transaction message failed")
        try:
            half = decode_message(raw)
        except MessageDecodeError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"half message at {phys} is unreadable: {e}")
        props = half.properties
        if half.topic != TRANS_HALF_TOPIC:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"the message at {phys} is not a half message")
        if props.get(Prop.PGROUP) != group:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "The producer group wrong")
        if half.queue_offset != queue_offset:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong")
        if half.commit_log_offset != phys:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "The commit log offset wrong")
        key = (group, props.get(Prop.UNIQ_KEY) or f"@{phys}", half.born_timestamp)
        if kind == SysFlag.TX_COMMIT and key in self.committed:
            log.info("transaction %s of %s already committed: half %d settled without storing it again",
                     key[1], group, queue_offset)
        elif kind == SysFlag.TX_COMMIT:
            real_topic, real_qid = props.get(Prop.REAL_TOPIC), props.get(Prop.REAL_QID)
            if not real_topic or not (real_qid or "").lstrip("-").isdigit():
                return cmd.response(ResponseCode.SYSTEM_ERROR, "the half message has no real topic/queue")
            # the stored commit keeps the half's properties (TRAN_MSG, PGROUP, REAL_TOPIC, REAL_QID) as
            # RocketMQ's does: it serialises them before taking those keys out of its map
            rec = record_of(half, real_topic, int(real_qid or 0), {},
                            sys_flag=(half.sys_flag & ~_TX_BITS) | SysFlag.TX_COMMIT,
                            prepared_tx_offset=phys)
            rec.store_timestamp = half.store_timestamp
            result = await b.put(rec)
            if result.status not in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
                                     PutStatus.SLAVE_NOT_AVAILABLE):
                code = {PutStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
                        PutStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
                        PutStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE}.get(
                            result.status, ResponseCode.SYSTEM_ERROR)
                return cmd.response(code, f"commit not stored: {result.status.name} {result.remark or ''}".strip())
            self.committed[key] = None
            if len(self.committed) > _COMMITTED_MAX:
                del self.committed[next(iter(self.committed))]
        op = await b.put(op_record(queue_offset))
        if op.status is not PutStatus.PUT_OK:
            _limited.warning("op", "transaction op for half offset %d not stored: %s", queue_offset, op.status.name)
        return cmd.response()


async def resume_check(broker: BrokerContext, cmd: RemotingCommand) -> RemotingCommand:
    """RESUME_CHECK_HALF_MESSAGE (323): put a discarded half back to be checked again (counter reset)."""
    failed = "Put message back to RMQ_SYS_TRANS_HALF_TOPIC failed."
    try:
        phys = decode_offset_msg_id(ext_str(cmd, "msgId"))[2]
        raw = broker.store.look_message_by_offset(phys)
        msg = decode_message(raw) if raw is not None else None
    except (ValueError, MessageDecodeError):
        msg = None
    if msg is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, failed)
    result = await broker.put(record_of(msg, TRANS_HALF_TOPIC, 0, {Prop.TRANSACTION_CHECK_TIMES: "0",
                                                                   Prop.WAIT: "false"}))
    if result.status is not PutStatus.PUT_OK:
        return cmd.response(ResponseCode.SYSTEM_ERROR, failed)
    return cmd.response()


class TransactionCheckService:
    """Asks producers about half messages that never got an END_TRANSACTION (master only)."""

    def __init__(self, broker: BrokerContext) -> None:
        self.broker = broker
        cfg = broker.config
        self.interval = max(cfg.transactionCheckInterval, 100) / 1000
        self.timeout_ms = cfg.transactionTimeOut
        self.max_checks = cfg.transactionCheckMax
        self.reserved_ms = cfg.fileReservedTime * 3_600_000
        self._rr = 0
        self.checks = self.discarded = 0

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.interval)
            if self.broker.is_slave:
                continue
            try:
                await self.check_once()
            except Exception as e:  # a bug or an odd record must not end the service
                _limited.error("check", "transaction check pass failed: %r", e)
                log.debug("transaction check failure", exc_info=True)

    def _fetch(self, topic: str, offset: int, n: int = _BATCH) -> tuple[list[MessageExt], int, int]:
        """Up to ``n`` messages of (topic, 0) from ``offset``; (messages, next offset, queue min)."""
        res = self.broker.store.get_messages(SYS_GROUP, topic, 0, offset, n)
        msgs = []
        if res.status is GetStatus.FOUND:
            for raw in res.messages:
                try:
                    msgs.append(decode_message(raw))
                except MessageDecodeError:
                    continue
            return msgs, res.next_begin_offset, res.min_offset
        return [], res.next_begin_offset if res.next_begin_offset > offset else offset, res.min_offset

    async def check_once(self) -> None:
        b = self.broker
        store = b.store
        if store.get_max_offset(TRANS_HALF_TOPIC, 0) <= 0:
            return
        start_ms = time.time_ns() // 1_000_000
        half_off = b.query_offset(SYS_GROUP, TRANS_HALF_TOPIC, 0)
        if half_off < 0:
            half_off = store.get_min_offset(TRANS_HALF_TOPIC, 0)
        op_off = b.query_offset(SYS_GROUP, TRANS_OP_HALF_TOPIC, 0)
        if op_off < 0:
            op_off = store.get_min_offset(TRANS_OP_HALF_TOPIC, 0)
        # every op from op_off: which halves are finished
        done: set[int] = set()
        ops_end = op_off
        op_min_needed: int | None = None
        while True:
            ops, nxt, _ = self._fetch(TRANS_OP_HALF_TOPIC, ops_end, 256)
            for op in ops:
                try:
                    target = int(op.body.decode())
                except ValueError:
                    continue
                if target >= half_off:
                    done.add(target)
                    if op_min_needed is None:
                        op_min_needed = op.queue_offset
            if not ops or nxt <= ops_end:
                break
            ops_end = nxt
        i = half_off
        half_max = store.get_max_offset(TRANS_HALF_TOPIC, 0)
        while i < half_max:
            if i in done:
                i += 1
                continue
            msgs, _nxt, qmin = self._fetch(TRANS_HALF_TOPIC, i, 1)
            if not msgs:
                if i < qmin:
                    i = qmin
                    continue
                i += 1  # a hole (a filtered or removed unit): nothing to check
                continue
            half = msgs[0]
            if half.store_timestamp >= start_ms:
                break  # put after this pass began (a copy we just appended, or a new half)
            props = half.properties
            checks = int(props.get(Prop.TRANSACTION_CHECK_TIMES) or 0)
            if checks >= self.max_checks or start_ms - half.born_timestamp > self.reserved_ms:
                if not await self._discard(half):
                    break  # not stored elsewhere: the next pass starts at this half again
                i += 1
                continue
            age = start_ms - half.born_timestamp if props.get(Prop.TRAN_PREPARED_QUEUE_OFFSET) else (
                start_ms - half.store_timestamp)
            immunity = props.get(Prop.CHECK_IMMUNITY_TIME_IN_SECONDS)
            if immunity is not None:
                try:
                    immune_ms = int(immunity) * 1000
                except ValueError:
                    immune_ms = self.timeout_ms
                original = props.get(Prop.TRAN_PREPARED_QUEUE_OFFSET)
                if original is not None and original.lstrip("-").isdigit() and int(original) in done:
                    i += 1  # the original half was settled: this immunity copy retires with it
                    continue
                if age < immune_ms:  # not to be asked yet: park a copy at the end, look further
                    extra = {Prop.TRAN_PREPARED_QUEUE_OFFSET: str(half.queue_offset)} if original is None else None
                    if (await self._put_back(half, checks, extra)).status is not PutStatus.PUT_OK:
                        break  # no copy parked: this half must stay ahead of the committed offset
                    i += 1
                    continue
            elif 0 <= age < self.timeout_ms:
                break  # too young; later halves are younger still
            if not await self._check(half, checks + 1):
                break  # as RocketMQ, a half that could not be put back is tried again, never passed over
            i += 1
        b.commit_offset(SYS_GROUP, TRANS_HALF_TOPIC, 0, i)
        # ops below the new half offset are no longer needed
        b.commit_offset(SYS_GROUP, TRANS_OP_HALF_TOPIC, 0, op_min_needed if op_min_needed is not None and any(
            d >= i for d in done) else ops_end)

    async def _put_back(self, half: MessageExt, checks: int, extra: dict[str, str] | None = None) -> PutResult:
        # not waited for, as RocketMQ's renewHalfMessageInner: on a SYNC_MASTER without a slave the copy is
        # stored (PUT_OK), not SLAVE_NOT_AVAILABLE, which would skip the check and copy the half again every
        # round. Its stored WAIT stays as it was (RocketMQ clears it after encoding): a commit copies it on
        rec = record_of(half, TRANS_HALF_TOPIC, 0, {Prop.TRANSACTION_CHECK_TIMES: str(checks), **(extra or {})})
        rec.waits = False
        return await self.broker.put(rec)

    async def _check(self, half: MessageExt, checks: int) -> bool:
        """Put a copy back (the copy is what the producer's answer names), then ask a producer. False
        when the store refused the copy (disk full, not writable): the half was left as it was."""
        b = self.broker
        group = half.properties.get(Prop.PGROUP) or ""
        chans = b.producer_channels(group)
        result = await self._put_back(half, checks)
        if result.status is not PutStatus.PUT_OK:
            _limited.warning("putback", "transaction check: half message not put back: %s", result.status.name)
            return False
        # the copy lives at result's offsets: remove the old one by an op so it is never checked again
        await b.put(op_record(half.queue_offset))
        if not chans:
            _limited.info(f"nochan:{group}", "transaction check: no live producer of group %s; will ask again", group)
            return True
        conn = chans[self._rr % len(chans)]
        self._rr += 1
        raw = b.store.look_message_by_offset(result.wrote_offset)
        if raw is None:
            return True
        c = decode_message(raw)
        copy = encode_message(
            half.properties.get(Prop.REAL_TOPIC) or c.topic, c.body,
            queue_id=int(half.properties.get(Prop.REAL_QID) or 0), flag=c.flag,
            # the producer is shown WAIT=false: RocketMQ's renew set it on the message it then sends
            properties={**c.properties, Prop.WAIT: "false"},
            sys_flag=c.sys_flag, queue_offset=c.queue_offset, commit_log_offset=c.commit_log_offset,
            born_timestamp=c.born_timestamp, born_host=c.born_host, store_timestamp=c.store_timestamp,
            store_host=c.store_host_raw or c.store_host, reconsume_times=c.reconsume_times,
            prepared_transaction_offset=c.prepared_transaction_offset)
        uniq = half.properties.get(Prop.UNIQ_KEY) or ""
        ext = {
            "tranStateTableOffset": str(result.queue_offset),
            "commitLogOffset": str(result.wrote_offset),
            "msgId": uniq,
            "transactionId": half.properties.get("__transactionId__") or uniq,
            "offsetMsgId": offset_msg_id(half.store_host_raw or b"", result.wrote_offset)
            if half.store_host_raw else "",
        }
        self.checks += 1
        try:
            with anyio.move_on_after(3):
                await conn.send_oneway(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, ext, bytes(copy),
                                                               oneway=True))
        except Exception as e:
            log.info("CHECK_TRANSACTION_STATE to %s failed: %s", getattr(conn, "remote_addr", "?"), e)
        return True

    async def _discard(self, half: MessageExt) -> bool:
        """Move the half to TRANS_CHECK_MAX_TIME_TOPIC; False when the store refused it (kept as a half)."""
        self.broker.ensure_topic(TRANS_CHECK_MAX_TIME_TOPIC, 1)  # as RocketMQ: created on first use, 1 queue
        rec = record_of(half, TRANS_CHECK_MAX_TIME_TOPIC, 0, {Prop.WAIT: "false"})  # as RocketMQ's
        result = await self.broker.put(rec)
        if result.status is not PutStatus.PUT_OK:
            _limited.warning("discard", "transaction check: half message not discarded: %s", result.status.name)
            return False
        await self.broker.put(op_record(half.queue_offset))
        self.discarded += 1
        log.warning("transaction %s of group %s discarded to %s after %s checks",
                    half.properties.get(Prop.UNIQ_KEY), half.properties.get(Prop.PGROUP),
                    TRANS_CHECK_MAX_TIME_TOPIC, half.properties.get(Prop.TRANSACTION_CHECK_TIMES))
        return True
