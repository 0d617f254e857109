"""The lite-pull activity of the gRPC endpoint (RocketMQ 5's PullMessage, UpdateOffset, GetOffset,
QueryOffset): one queue pulled by offset, the group's offsets kept by the broker, each the broker's
own remoting request (PULL_MESSAGE, UPDATE/QUERY_CONSUMER_OFFSET, GET_MIN/MAX_OFFSET,
SEARCH_OFFSET_BY_TIMESTAMP)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from rmq.plugins.grpc_proxy.common import (
    NO_CLIENT_ID,
    Activity,
    C,
    dur_ms,
    from_remoting,
    ms_of,
    status,
)
from rmq.plugins.grpc_proxy.convert import to_message
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.message import decode_messages

if TYPE_CHECKING:
    from rmq.plugins.grpc_proxy.peer import GrpcPeer


class PullActivity(Activity):
    def admit(self, request: Any, context: Any, topic_code: int = C.BAD_REQUEST) -> GrpcPeer | d.Status:
        """The caller of an RPC on one queue, or the status refusing it: no client id, no such topic
        (``topic_code``) or no such queue (BAD_REQUEST)."""
        peer = self.peer(context)
        if peer is None:
            return NO_CLIENT_ID
        mq = request.message_queue
        tc = self.topic(mq.topic.name)
        if tc is None:
            return status(topic_code, f"topic {mq.topic.name[:80]!r} not found")
        if not 0 <= mq.id < max(tc.readQueueNums, tc.writeQueueNums):
            return status(C.BAD_REQUEST, f"queue {mq.id} of {mq.topic.name[:80]!r} does not exist")
        return peer

    async def pull_message(self, request: s.PullMessageRequest, context: Any) -> AsyncIterator[s.PullMessageResponse]:
        """The broker's PULL_MESSAGE on one queue: status, the messages, then the next offset."""
        peer = self.admit(request, context, C.TOPIC_NOT_FOUND)
        if isinstance(peer, d.Status):
            yield s.PullMessageResponse(status=peer)
            return
        mq = request.message_queue
        poll = dur_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else 0
        remaining = context.time_remaining()
        if remaining is not None:
            poll = min(poll, max(0, int(remaining * 1000) - 1500))
        expr = request.filter_expression
        ext = {"consumerGroup": request.group.name, "topic": mq.topic.name, "queueId": str(mq.id),
               "queueOffset": str(max(request.offset, 0)), "maxMsgNums": str(min(max(request.batch_size, 1), 32)),
               "sysFlag": str(0x4 | (0x2 if poll > 0 else 0)), "commitOffset": "0",
               "suspendTimeoutMillis": str(max(0, min(poll, 30_000))), "subscription": expr.expression or "*",
               "subVersion": "0", "expressionType": "SQL92" if expr.type == d.SQL else "TAG"}
        resp = await self.call(peer, RequestCode.PULL_MESSAGE, ext)
        if resp is None:
            yield s.PullMessageResponse(status=status(C.INTERNAL_SERVER_ERROR, "no answer from the broker"))
            return
        nxt = int(resp.ext.get("nextBeginOffset") or request.offset)
        if resp.code == ResponseCode.SUCCESS:
            yield s.PullMessageResponse(status=status(C.OK))
            for m in decode_messages(resp.body or b""):
                yield s.PullMessageResponse(message=to_message(m))
        elif resp.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            yield s.PullMessageResponse(status=status(C.MESSAGE_NOT_FOUND, "no new message"))
        elif resp.code == ResponseCode.PULL_OFFSET_MOVED:
            yield s.PullMessageResponse(status=status(C.ILLEGAL_OFFSET, f"offset {request.offset} moved to {nxt}"))
        else:
            yield s.PullMessageResponse(status=from_remoting(resp))
            return
        yield s.PullMessageResponse(next_offset=nxt)

    async def update_offset(self, request: s.UpdateOffsetRequest, context: Any) -> s.UpdateOffsetResponse:
        peer = self.admit(request, context)
        if isinstance(peer, d.Status):
            return s.UpdateOffsetResponse(status=peer)
        mq = request.message_queue
        if request.offset < 0:
            return s.UpdateOffsetResponse(status=status(C.ILLEGAL_OFFSET, f"offset {request.offset} < 0"))
        resp = await self.call(peer, RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": request.group.name, "topic": mq.topic.name, "queueId": str(mq.id),
            "commitOffset": str(request.offset)})
        return s.UpdateOffsetResponse(status=from_remoting(resp))

    async def get_offset(self, request: s.GetOffsetRequest, context: Any) -> s.GetOffsetResponse:
        peer = self.admit(request, context)
        if isinstance(peer, d.Status):
            return s.GetOffsetResponse(status=peer)
        mq = request.message_queue
        resp = await self.call(peer, RequestCode.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": request.group.name, "topic": mq.topic.name, "queueId": str(mq.id)})
        if resp is not None and resp.code == ResponseCode.QUERY_NOT_FOUND:
            return s.GetOffsetResponse(status=status(C.OFFSET_NOT_FOUND, resp.remark or "no committed offset"))
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return s.GetOffsetResponse(status=from_remoting(resp))
        return s.GetOffsetResponse(status=status(C.OK), offset=int(resp.ext.get("offset") or 0))

    async def query_offset(self, request: s.QueryOffsetRequest, context: Any) -> s.QueryOffsetResponse:
        """The queue's first or next offset, or the offset of a time (BEGINNING, END, TIMESTAMP)."""
        peer = self.admit(request, context)
        if isinstance(peer, d.Status):
            return s.QueryOffsetResponse(status=peer)
        mq = request.message_queue
        ext = {"topic": mq.topic.name, "queueId": str(mq.id)}
        policy = request.query_offset_policy
        if policy == d.TIMESTAMP:
            if not request.HasField("timestamp"):
                return s.QueryOffsetResponse(status=status(C.BAD_REQUEST, "TIMESTAMP needs a timestamp"))
            code, ext["timestamp"] = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, str(ms_of(request.timestamp))
        else:
            code = RequestCode.GET_MAX_OFFSET if policy == d.END else RequestCode.GET_MIN_OFFSET
        resp = await self.call(peer, code, ext)
        if resp is None or resp.code != ResponseCode.SUCCESS:
            return s.QueryOffsetResponse(status=from_remoting(resp))
        return s.QueryOffsetResponse(status=status(C.OK), offset=int(resp.ext.get("offset") or 0))

