"""What every activity of the gRPC endpoint shares: the proxy's status codes and their mapping from
remoting answers, time conversions, the topic message types, and ``Activity``, the base of the
activity classes (as RocketMQ's proxy splits its gRPC service: route, send, receive/ack, transaction,
client/telemetry, DLQ forward, lite pull), which reach the broker and the shared tables through the
servicer (service.py)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from google.protobuf import duration_pb2, timestamp_pb2

from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.protocol.codes import ResponseCode

if TYPE_CHECKING:
    from rmq.plugins.grpc_proxy.peer import GrpcPeer
    from rmq.plugins.grpc_proxy.service import MessagingService
    from rmq.protocol.command import RemotingCommand

C = d.Code
POP_MESSAGE, ACK_MESSAGE, CHANGE_INVISIBLE = 200050, 200051, 200053
MAX_BODY = 4 * 1024 * 1024
ALL_TYPES = [d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION]
TYPES = {"NORMAL": [d.NORMAL], "FIFO": [d.FIFO], "DELAY": [d.DELAY], "TRANSACTION": [d.TRANSACTION], "MIXED": ALL_TYPES}
NOT_OURS = "receipt handle was not issued by this broker for this group and topic"

# remoting answer -> the proxy's status code
_CODES = {
    ResponseCode.SUCCESS: C.OK,
    ResponseCode.TOPIC_NOT_EXIST: C.TOPIC_NOT_FOUND,
    ResponseCode.NO_PERMISSION: C.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: C.BAD_REQUEST,
    ResponseCode.SYSTEM_BUSY: C.TOO_MANY_REQUESTS,
    ResponseCode.FLUSH_DISK_TIMEOUT: C.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: C.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: C.HA_NOT_AVAILABLE,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: C.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: C.ILLEGAL_FILTER_EXPRESSION,
    ResponseCode.NO_MESSAGE: C.INVALID_RECEIPT_HANDLE,
    ResponseCode.PULL_NOT_FOUND: C.MESSAGE_NOT_FOUND,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: C.NOT_IMPLEMENTED,
}


def accepted(tc: Any) -> list[int]:
    """The message types a topic accepts (RocketMQ 5's ``message.type`` attribute; none = NORMAL)."""
    return TYPES.get(getattr(tc, "message_type", "NORMAL"), [d.NORMAL])


def status(code: int, message: str = "OK") -> d.Status:
    return d.Status(code=code, message=message or d.Code.Name(code))


NO_CLIENT_ID = status(C.CLIENT_ID_REQUIRED, "x-mq-client-id is required")


def from_remoting(resp: RemotingCommand | None) -> d.Status:
    if resp is None:
        return status(C.INTERNAL_SERVER_ERROR, "no answer from the broker")
    code = _CODES.get(resp.code, C.INTERNAL_SERVER_ERROR)  # type: ignore[call-overload]
    return status(code, resp.remark or ("OK" if code == C.OK else d.Code.Name(code)))


def ts(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def ms_of(t: timestamp_pb2.Timestamp) -> int:
    return t.seconds * 1000 + t.nanos // 1_000_000


def dur_ms(v: duration_pb2.Duration) -> int:
    return v.seconds * 1000 + v.nanos // 1_000_000


def json_bytes(obj: Any) -> bytes:
    return json.dumps(obj).encode()


class Activity:
    """One activity's RPCs; the broker, its request handler and the shared tables (peers, receipts,
    renewals, routes) are the servicer's."""

    def __init__(self, svc: MessagingService) -> None:
        self.svc = svc

    @property
    def broker(self) -> Any:
        return self.svc.broker

    def peer(self, context: Any) -> GrpcPeer | None:
        return self.svc.peers.get(context)

    async def call(self, peer: GrpcPeer, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand | None:
        return await self.svc.call(peer, code, ext, body)

    def topic(self, name: str) -> Any:
        return self.broker.topics.table.get(name)

    def orderly(self, group: str) -> bool:
        sgc = self.broker.groups.table.get(group)
        return bool(sgc is not None and sgc.consumeMessageOrderly)
