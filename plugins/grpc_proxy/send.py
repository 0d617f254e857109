"""The send activity of the gRPC endpoint (the proxy's SendMessageActivity and RecallMessageActivity):
each message becomes the broker's SEND_MESSAGE_V2, several of one topic one SEND_BATCH_MESSAGE, with
the proxy's checks and queue choice.

A retry of a message this broker stored without a slave (HA_NOT_AVAILABLE, SLAVE_PERSISTENCE_TIMEOUT:
the SDKs send again with the same message id) is answered from the copy stored first and never
stored twice (``_resend``), so the consumers do not see the message again while the first copy may
be held invisible; an attempt still storing when the client gives up runs on, and the retry waits
for it. RocketMQ's proxy has no such table: a 5.3 broker with its default ``inSyncReplicas`` (1)
never answers those codes, a SYNC_MASTER with 4.9's semantics (this broker's) does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from typing import TYPE_CHECKING, Any

from rmq.kernel import PutResult, PutStatus
from rmq.plugins.grpc_proxy.common import (
    MAX_BODY,
    NO_CLIENT_ID,
    Activity,
    C,
    accepted,
    from_remoting,
    ms_of,
    status,
)
from rmq.plugins.grpc_proxy.convert import SYSTEM_KEYS
from rmq.plugins.grpc_proxy.hashing import consistent_hash, java_string_hash
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.common import SysFlag, encode_properties
from rmq.protocol.message import BatchError, decode_offset_msg_id, encode_batch

if TYPE_CHECKING:
    from rmq.plugins.grpc_proxy.peer import GrpcPeer

# a send answered with one of these stored the message (no slave holds it yet): kept so a retry does not
# store it again (``_resend``), for this long and this many at most
UNREPLICATED = (ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.FLUSH_SLAVE_TIMEOUT)
UNREPLICATED_TTL_S = 60.0
MAX_UNREPLICATED = 10_000


class SendActivity(Activity):
    def __init__(self, svc: Any) -> None:
        super().__init__(svc)
        self._rr = itertools.count()
        self.unreplicated: dict[tuple[str, str], tuple[float, int, s.SendResultEntry]] = {}  # see _resend
        self.sending: dict[tuple[str, str], asyncio.Future[s.SendResultEntry]] = {}  # (topic, message id) storing now

    async def send_message(self, request: s.SendMessageRequest, context: Any) -> s.SendMessageResponse:
        """One message, or several of one topic as one batch (the proxy's SEND_BATCH_MESSAGE): one
        entry per message, the top status the entries' common one or MULTIPLE_RESULTS."""
        peer = self.peer(context)
        if peer is None:
            return s.SendMessageResponse(status=NO_CLIENT_ID)
        if not request.messages:
            return s.SendMessageResponse(status=status(C.MESSAGE_CORRUPTED, "no message to send"))
        if len(request.messages) == 1:
            entry = await self.send_one(peer, request.messages[0])
            return s.SendMessageResponse(status=entry.status, entries=[entry])
        entries = await self.send_batch(peer, request.messages)
        codes = {e.status.code for e in entries}
        top = entries[0].status if len(codes) == 1 else status(C.MULTIPLE_RESULTS, "multiple results")
        return s.SendMessageResponse(status=top, entries=entries)

    def prepare(self, m: d.Message, batch: bool) -> tuple[dict[str, str], int, int] | s.SendResultEntry:
        """A message's remoting properties, sysFlag and queue, or the entry refusing it. The queue of
        a message group is the proxy's (Guava's consistentHash of the group's Java hashCode over the
        write queues); a batch, like the proxy's, ignores the group for the choice."""
        topic = m.topic.name
        sp = m.system_properties
        if not m.body:
            return s.SendResultEntry(status=status(C.MESSAGE_BODY_EMPTY, "message body is empty"))
        if len(m.body) > MAX_BODY:
            return s.SendResultEntry(status=status(C.MESSAGE_BODY_TOO_LARGE, f"body over {MAX_BODY} bytes"))
        if not sp.message_id:
            return s.SendResultEntry(status=status(C.ILLEGAL_MESSAGE_ID, "message_id is blank"))
        for k in m.user_properties:
            if k in SYSTEM_KEYS or not k or any(ord(ch) < 32 for ch in k):
                return s.SendResultEntry(status=status(C.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property key {k!r} is reserved"))
        if sp.HasField("tag") and (not sp.tag.strip() or "|" in sp.tag):
            return s.SendResultEntry(status=status(C.ILLEGAL_MESSAGE_TAG, f"tag {sp.tag!r} is illegal"))
        tc = self.topic(topic)
        if tc is None:
            return s.SendResultEntry(status=status(C.TOPIC_NOT_FOUND, f"topic {topic} not found"))
        kind = sp.message_type or d.NORMAL
        if kind not in accepted(tc):
            return s.SendResultEntry(status=status(C.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, (
                f"the topic {topic} accepts {tc.message_type} messages, not {d.MessageType.Name(kind)}")))
        nq = max(tc.writeQueueNums, 1)
        props: dict[str, str] = dict(m.user_properties)
        props["UNIQ_KEY"] = sp.message_id
        if sp.HasField("tag"):
            props["TAGS"] = sp.tag
        if sp.keys:
            props["KEYS"] = " ".join(sp.keys)
        sys_flag = 0
        if sp.HasField("message_group"):
            props["__SHARDINGKEY"] = sp.message_group
        if sp.HasField("message_group") and not batch:
            qid = consistent_hash(java_string_hash(sp.message_group), nq)
        else:
            qid = next(self._rr) % nq
        if sp.HasField("delivery_timestamp"):
            when = ms_of(sp.delivery_timestamp)
            if when - time.time() * 1000 > 86_400_000:
                return s.SendResultEntry(status=status(C.ILLEGAL_DELIVERY_TIME, "delivery time more than 1 day ahead"))
            props["TIMER_DELIVER_MS"] = str(when)
        if sp.message_type == d.TRANSACTION:
            props["TRAN_MSG"] = "true"
            props["PGROUP"] = topic
            sys_flag |= SysFlag.TX_PREPARED
            if sp.HasField("orphaned_transaction_recovery_duration"):
                props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(sp.orphaned_transaction_recovery_duration.seconds)
        return props, sys_flag, qid

    @staticmethod
    def _send_ext(topic: str, qid: int, sys_flag: int, born: int, props: str, batch: bool) -> dict[str, str]:
        return {"a": topic, "b": topic, "c": "TBW102", "d": "4", "e": str(qid), "f": str(sys_flag), "g": str(born),
                "h": "0", "i": props, "j": "0", "k": "false", "m": "true" if batch else "false"}

    async def send_batch(self, peer: GrpcPeer, messages: Any) -> list[s.SendResultEntry]:
        """Several messages of one topic in one SEND_BATCH_MESSAGE: all stored or none."""
        topic = messages[0].topic.name
        items: list[tuple[bytes, int, str]] = []
        qid = sys_flag = 0
        for i, m in enumerate(messages):
            if m.topic.name != topic:
                return [s.SendResultEntry(status=status(C.MESSAGE_CORRUPTED, "topic in message is not same"))
                        for _ in messages]
            prepared = self.prepare(m, batch=True)
            if isinstance(prepared, s.SendResultEntry):
                return [prepared for _ in messages]
            props, flag, q = prepared
            if i == 0:
                qid, sys_flag = q, flag  # the proxy's header: the first message's queue and flag
            items.append((bytes(m.body), 0, encode_properties(props)))
        first = messages[0].system_properties
        born = ms_of(first.born_timestamp) if first.HasField("born_timestamp") else int(time.time() * 1000)
        try:
            body = encode_batch(items)
        except BatchError as e:
            return [s.SendResultEntry(status=status(C.MESSAGE_CORRUPTED, str(e))) for _ in messages]
        ext = self._send_ext(topic, qid, sys_flag, born, "", True)
        resp = await self.call(peer, RequestCode.SEND_BATCH_MESSAGE, ext, body)
        st = from_remoting(resp)
        if resp is None or st.code != C.OK:
            return [s.SendResultEntry(status=st) for _ in messages]
        offset = int(resp.ext.get("queueOffset", "0") or 0)
        return [s.SendResultEntry(status=st, message_id=m.system_properties.message_id, offset=offset + i)
                for i, m in enumerate(messages)]

    async def send_one(self, peer: GrpcPeer, m: d.Message) -> s.SendResultEntry:
        """One message. A retry of a message (same topic and message id) this broker is storing or
        stored without a slave is answered from that attempt (``_resend``), never stored twice; the
        store runs on when the client gives up waiting (the SDK's 3 s deadline is slaveTimeout's), so
        its outcome is there for the retry."""
        prepared = self.prepare(m, batch=False)
        if isinstance(prepared, s.SendResultEntry):
            return prepared
        key = (m.topic.name, m.system_properties.message_id)
        first = self.sending.get(key)
        if first is not None:  # the client gave up on an attempt still storing it: that attempt answers
            with contextlib.suppress(Exception):  # it failed: this one stores the message
                done = await asyncio.shield(first)
                if done.status.code == C.OK:
                    return done
        kept = self.unreplicated.get(key)
        if kept is not None and (again := await self._resend(key, kept)) is not None:
            return again
        task = asyncio.ensure_future(self._store_one(peer, m, prepared))
        self.sending[key] = task
        task.add_done_callback(lambda t: self.sending.pop(key) if self.sending.get(key) is t else None)
        return await asyncio.shield(task)

    async def _store_one(self, peer: GrpcPeer, m: d.Message, prepared: tuple[dict[str, str], int, int]) -> Any:
        props, sys_flag, qid = prepared
        topic = m.topic.name
        sp = m.system_properties
        born = ms_of(sp.born_timestamp) if sp.HasField("born_timestamp") else int(time.time() * 1000)
        ext = self._send_ext(topic, qid, sys_flag, born, encode_properties(props), False)
        resp = await self.call(peer, RequestCode.SEND_MESSAGE_V2, ext, bytes(m.body))
        st = from_remoting(resp)
        if resp is None or (st.code != C.OK and resp.code not in UNREPLICATED):
            return s.SendResultEntry(status=st)
        offset = int(resp.ext.get("queueOffset", "0") or 0)
        try:
            phys = int(decode_offset_msg_id(resp.ext.get("msgId", ""))[-1])
        except (ValueError, TypeError, IndexError):
            phys = -1
        if sys_flag & SysFlag.TX_PREPARED:
            self.svc.transactions.remember(topic, sp.message_id, (offset, max(phys, 0), topic))
        entry = s.SendResultEntry(status=status(C.OK), message_id=sp.message_id, transaction_id=sp.message_id,
                                  offset=offset, recall_handle=resp.ext.get("recallHandle", ""))
        if st.code != C.OK:  # stored here, not (yet) on a slave: the SDK's retry must not store it again
            if phys >= 0:
                self.unreplicated[(topic, sp.message_id)] = (time.monotonic(), phys, entry)
                while len(self.unreplicated) > MAX_UNREPLICATED:
                    self.unreplicated.pop(next(iter(self.unreplicated)))
            return s.SendResultEntry(status=st)
        return entry

    async def _resend(self, key: tuple[str, str], kept: tuple[float, int, s.SendResultEntry]) -> Any:
        """A send retried (same message id) after this broker stored the message and answered that no
        slave held it (HA_NOT_AVAILABLE / SLAVE_PERSISTENCE_TIMEOUT, which the SDKs retry): the copy
        stored then is the message, so the answer is whether a slave holds it now, with that copy's
        receipt; no second copy is stored (it would be a duplicate the consumers see, with the same
        message id, while the first may be held invisible). None: nothing kept to answer with (too
        old, or the copy is no longer in the commitlog), so the send goes ahead."""
        at, phys, entry = kept
        b: Any = self.broker
        rec = b.store.look_message_by_offset(phys) if time.monotonic() - at < UNREPLICATED_TTL_S else None
        if rec is None or len(rec) < 4 or b.is_slave:
            self.unreplicated.pop(key, None)
            return None
        result = PutResult(PutStatus.PUT_OK, wrote_offset=phys, wrote_bytes=int.from_bytes(rec[:4], "big"))
        if b.sync_master and b.replication is not None:
            await b.wait_slave(result)
        if result.status is PutStatus.PUT_OK:
            self.unreplicated.pop(key, None)
            return entry
        code = C.HA_NOT_AVAILABLE if result.status is PutStatus.SLAVE_NOT_AVAILABLE else C.SLAVE_PERSISTENCE_TIMEOUT
        return s.SendResultEntry(status=status(code, f"stored, no slave holds it yet: {result.status.name}"))

    async def recall_message(self, request: s.RecallMessageRequest, context: Any) -> s.RecallMessageResponse:
        peer = self.peer(context)
        if peer is None:
            return s.RecallMessageResponse(status=NO_CLIENT_ID)
        resp = await self.call(peer, RequestCode.RECALL_MESSAGE, {"topic": request.topic.name,
                                                                  "recallHandle": request.recall_handle})
        st = from_remoting(resp)
        return s.RecallMessageResponse(status=st, message_id=resp.ext.get("msgId", "") if resp is not None else "")
