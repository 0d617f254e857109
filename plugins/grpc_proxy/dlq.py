"""The dead-letter activity of the gRPC endpoint (the proxy's ForwardMessageToDLQActivity): a received
message the client gives up on goes into ``%DLQ%<group>``, then is acked."""

from __future__ import annotations

import logging
from typing import Any

from rmq.kernel import record_of
from rmq.plugins.grpc_proxy.common import (
    ACK_MESSAGE,
    NO_CLIENT_ID,
    Activity,
    C,
    from_remoting,
    status,
)
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.protocol.message import decode_messages
from rmq.protocol.names import dlq_topic

log = logging.getLogger("rmq.grpc")

DLQ_CLAIM_MS = 30_000  # a DLQ forward holds the message this long while it copies it


class DeadLetterActivity(Activity):
    async def forward(self, request: Any, context: Any) -> Any:
        """The received message into %DLQ%<group>, then acked. The gate has checked the names and the
        caller's SUB on group and topic; the receipt must be one this broker issued for them, and the
        broker's POP state must still hold it: it is claimed first (its invisible time renewed, so
        the receipt cannot be used twice), copied, then acked with the claim."""
        R = s.ForwardMessageToDeadLetterQueueResponse
        peer = self.peer(context)
        if peer is None:
            return R(status=NO_CLIENT_ID)
        group, topic = request.group.name, request.topic.name
        parts = self.svc.receive.open_receipt(peer, group, topic, request.message_id, request.receipt_handle)
        if isinstance(parts, d.Status):
            return R(status=parts)
        qid, off = int(parts[6]), int(parts[7])
        res = self.broker.store.get_messages(group, topic, qid, off, 1)
        if not res.messages or res.queue_offsets[0] != off:
            return R(status=status(C.INVALID_RECEIPT_HANDLE, "message gone"))
        st, claim = await self.svc.receive.change_invisible(peer, group, topic, parts, DLQ_CLAIM_MS)
        if claim is None:
            return R(status=st if st.code != C.OK else status(C.INVALID_RECEIPT_HANDLE, "receipt no longer valid"))
        [msg] = decode_messages(bytes(res.messages[0]))
        dlq = dlq_topic(group)
        self.broker.ensure_topic(dlq, 1, 6)
        put = await self.broker.put(record_of(msg, dlq, 0, {"DLQ_ORIGIN_TOPIC": topic,
                                                           "DLQ_ORIGIN_MESSAGE_ID": msg.properties.get("UNIQ_KEY", "")}))
        if not put.ok:  # the claim runs out and the message is delivered again
            log.warning("gRPC: %s/%d/%d not stored into %s: %s", topic, qid, off, dlq, put.status.name)
            return R(status=status(C.INTERNAL_SERVER_ERROR, "the dead letter queue did not take the message"))
        resp = await self.call(peer, ACK_MESSAGE, {"consumerGroup": group, "topic": topic, "queueId": parts[6],
                                                    "extraInfo": " ".join(claim), "offset": parts[7]})
        return R(status=from_remoting(resp))

