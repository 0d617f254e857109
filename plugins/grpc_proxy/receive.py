"""The receive activity of the gRPC endpoint (the proxy's ReceiveMessageActivity, AckMessageActivity
and ChangeInvisibleDurationActivity): ReceiveMessage is the broker's POP_MESSAGE, each message given
a sealed receipt (receipts.py) and, with ``auto_renew``, kept invisible until acked (renew.py);
AckMessage and ChangeInvisibleDuration act on a receipt this broker issued, through the newest one
of an auto-renewed message."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from rmq.plugins.grpc_proxy.access import ACCOUNT
from rmq.plugins.grpc_proxy.common import (
    ACK_MESSAGE,
    CHANGE_INVISIBLE,
    NO_CLIENT_ID,
    NOT_OURS,
    POP_MESSAGE,
    Activity,
    C,
    dur_ms,
    from_remoting,
    status,
    ts,
)
from rmq.plugins.grpc_proxy.convert import to_message
from rmq.plugins.grpc_proxy.renew import Tracked
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.protocol.codes import ResponseCode
from rmq.protocol.message import decode_messages

if TYPE_CHECKING:
    from rmq.plugins.grpc_proxy.peer import GrpcPeer


class ReceiveActivity(Activity):
    async def receive_message(self, request: s.ReceiveMessageRequest, context: Any) -> AsyncIterator[s.ReceiveMessageResponse]:
        peer = self.peer(context)
        if peer is None:
            yield s.ReceiveMessageResponse(status=NO_CLIENT_ID)
            return
        group = request.group.name
        topic = request.message_queue.topic.name
        auto = request.auto_renew and self.svc.options.enableProxyAutoRenew  # renew.py keeps them invisible
        if auto or not request.HasField("invisible_duration"):
            invisible = self.svc.options.defaultInvisibleTimeMills
        else:
            invisible = dur_ms(request.invisible_duration)
            if not 10_000 <= invisible <= 12 * 3_600_000:
                yield s.ReceiveMessageResponse(status=status(C.ILLEGAL_INVISIBLE_TIME, "invisible time must be 10 s .. 12 h"))
                return
        poll = dur_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else 20_000
        remaining = context.time_remaining()
        if remaining is not None:
            poll = min(poll, max(0, int(remaining * 1000) - 1500))
        poll = max(0, min(poll, 20_000))
        expr = request.filter_expression
        etype = "SQL92" if expr.type == d.SQL else "TAG"
        ext = {"consumerGroup": group, "topic": topic, "queueId": "-1", "maxMsgNums": str(min(max(request.batch_size, 1), 32)),
               "invisibleTime": str(invisible), "pollTime": str(poll), "bornTime": str(int(time.time() * 1000)),
               "initMode": "1", "expType": etype, "exp": expr.expression or "*",
               "order": "true" if self.orderly(group) else "false"}
        resp = await self.call(peer, POP_MESSAGE, ext)
        st = from_remoting(resp)
        if resp is None or resp.code != ResponseCode.SUCCESS:
            if st.code == C.MESSAGE_NOT_FOUND:
                st = status(C.MESSAGE_NOT_FOUND, "no new message")
            yield s.ReceiveMessageResponse(status=st)
            return
        h = resp.ext
        yield s.ReceiveMessageResponse(status=status(C.OK))
        for m in decode_messages(resp.body or b""):
            handle = " ".join((str(m.queue_offset), h["popTime"], h["invisibleTime"], h.get("reviveQid", "0"), "0",
                               self.broker.config.brokerName, str(m.queue_id), str(m.queue_offset)))
            msg = to_message(m, handle, invisible)
            sealed = msg.system_properties.receipt_handle = self.svc.receipts.seal(group, msg.topic.name, handle)
            if auto:
                self.svc.renewer.add(peer, group, msg.system_properties.message_id, Tracked(
                    msg.topic.name, sealed, handle.split(" "), m.reconsume_times, ACCOUNT.get()))
            yield s.ReceiveMessageResponse(message=msg)
        yield s.ReceiveMessageResponse(delivery_timestamp=ts(int(time.time() * 1000)))

    async def ack_message(self, request: s.AckMessageRequest, context: Any) -> s.AckMessageResponse:
        peer = self.peer(context)
        if peer is None:
            return s.AckMessageResponse(status=NO_CLIENT_ID)
        results = []
        group, topic = request.group.name, request.topic.name
        for e in request.entries:
            parts = self.open_receipt(peer, group, topic, e.message_id, e.receipt_handle)
            if isinstance(parts, d.Status):
                st = parts
            else:
                resp = await self.call(peer, ACK_MESSAGE, {
                    "consumerGroup": group, "topic": topic, "queueId": parts[6],
                    "extraInfo": " ".join(parts), "offset": parts[7]})
                st = from_remoting(resp)
            results.append(s.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=st))
        codes = {r.status.code for r in results}
        top = results[0].status if len(codes) == 1 and results else status(C.MULTIPLE_RESULTS, "multiple results")
        return s.AckMessageResponse(status=top, entries=results)

    async def change_invisible_duration(self, request: s.ChangeInvisibleDurationRequest, context: Any) -> Any:
        peer = self.peer(context)
        if peer is None:
            return s.ChangeInvisibleDurationResponse(status=NO_CLIENT_ID)
        group, topic = request.group.name, request.topic.name
        opened = self.open_receipt(peer, group, topic, request.message_id, request.receipt_handle)
        if isinstance(opened, d.Status):
            return s.ChangeInvisibleDurationResponse(status=opened)
        invisible = dur_ms(request.invisible_duration)
        if not 0 <= invisible <= 12 * 3_600_000:
            return s.ChangeInvisibleDurationResponse(status=status(C.ILLEGAL_INVISIBLE_TIME, "0 .. 12 h"))
        st, fresh = await self.change_invisible(peer, group, topic, opened, invisible)
        if fresh is None:
            return s.ChangeInvisibleDurationResponse(status=st)
        return s.ChangeInvisibleDurationResponse(status=st, receipt_handle=self.svc.receipts.seal(group, topic, " ".join(fresh)))

    def open_receipt(self, peer: GrpcPeer, group: str, topic: str, message_id: str, handle: str) -> list[str] | d.Status:
        """The receipt's fields (of an auto-renewed message, the newest receipt's), or the status refusing
        it: not issued by this broker for this group and topic, or expired."""
        parts = self.svc.receipts.unseal(group, topic, handle)
        if parts is None:
            return status(C.INVALID_RECEIPT_HANDLE, NOT_OURS)
        parts = self.svc.renewer.take(peer, group, message_id, handle) or parts
        if time.time() * 1000 >= int(parts[1]) + int(parts[2]):
            return status(C.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
        return parts

    async def renew_change(self, peer: GrpcPeer, group: str, topic: str, parts: list[str], invisible: int,
                            account: Any) -> tuple[list[str] | None, bool]:
        """renew.py's CHANGE_INVISIBLETIME, signed as the account that received the message."""
        token = ACCOUNT.set(account)
        try:
            st, fresh = await self.change_invisible(peer, group, topic, parts, invisible)
        finally:
            ACCOUNT.reset(token)
        return fresh, st.code != C.INVALID_RECEIPT_HANDLE

    def online(self, peer: GrpcPeer, group: str) -> bool:
        """The client still consumes for ``group`` (the proxy's ``clientIsOffline``, negated)."""
        info = self.broker.consumers.get(group)
        return not peer.closed and info is not None and peer in info.channels

    async def change_invisible(self, peer: GrpcPeer, group: str, topic: str, parts: list[str],
                                invisible: int) -> tuple[d.Status, list[str] | None]:
        """The broker's CHANGE_INVISIBLETIME on a verified receipt: its status and the new receipt's
        fields (None when the broker refused: the message is no longer this receipt's)."""
        resp = await self.call(peer, CHANGE_INVISIBLE, {
            "consumerGroup": group, "topic": topic, "queueId": parts[6],
            "extraInfo": " ".join(parts), "offset": parts[7], "invisibleTime": str(invisible)})
        st = from_remoting(resp)
        if resp is None or st.code != C.OK:
            return st, None
        fresh = list(parts)
        fresh[1], fresh[2] = resp.ext.get("popTime", parts[1]), resp.ext.get("invisibleTime", parts[2])
        return st, fresh

