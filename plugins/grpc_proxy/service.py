"""The gRPC MessagingService (apache.rocketmq.v2) of a broker, RocketMQ 5's proxy in "local" mode.

Every RPC is translated into the remoting request the broker already serves (SEND_MESSAGE_V2,
POP_MESSAGE, ACK_MESSAGE, END_TRANSACTION...) and handed to the broker role's request handler,
interceptors (ACL) included, through a ``GrpcPeer`` standing in for the connection; the answer is
translated back with the proxy's status codes (reference: rocketmq-grpc-v2.md §2-§8). So gRPC and
remoting clients share one implementation of every semantic, and a 5.x producer's message can
be consumed by a 4.x consumer and the reverse.

The servicer only delegates, as the proxy's ``GrpcMessagingApplication`` does to its activities:
routes.py (QueryRoute, QueryAssignment), client.py (Heartbeat, Telemetry, NotifyClientTermination),
send.py (SendMessage, RecallMessage), transaction.py (EndTransaction), receive.py (ReceiveMessage,
AckMessage, ChangeInvisibleDuration), dlq.py (ForwardMessageToDeadLetterQueue) and pull.py (the
lite-pull RPCs). It holds what they share: the broker and its request handler (``call``), the
clients (peer.py), receipt handles (receipts.py), renewals (renew.py) and the name servers' routes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from rmq.plugins.grpc_proxy.access import ACCOUNT, Gate
from rmq.plugins.grpc_proxy.client import CUSTOMIZED_BACKOFF, ClientActivity
from rmq.plugins.grpc_proxy.common import MAX_BODY, C, status
from rmq.plugins.grpc_proxy.convert import to_message
from rmq.plugins.grpc_proxy.dlq import DeadLetterActivity
from rmq.plugins.grpc_proxy.peer import GrpcPeer, PeerTable
from rmq.plugins.grpc_proxy.pull import PullActivity
from rmq.plugins.grpc_proxy.receipts import Receipts
from rmq.plugins.grpc_proxy.receive import ReceiveActivity
from rmq.plugins.grpc_proxy.renew import GrpcOptions, Renewer
from rmq.plugins.grpc_proxy.routes import RouteActivity
from rmq.plugins.grpc_proxy.send import SendActivity
from rmq.plugins.grpc_proxy.transaction import TransactionActivity
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.plugins.grpc_proxy.v2 import service_pb2_grpc as sg
from rmq.protocol.acl import sign
from rmq.protocol.command import RemotingCommand

if TYPE_CHECKING:
    from rmq.kernel import BrokerContext

__all__ = ["MAX_BODY", "MessagingService"]


class MessagingService(sg.MessagingServiceServicer):
    def __init__(self, broker: BrokerContext, handle: Callable[[Any, RemotingCommand], Awaitable[RemotingCommand | None]],
                 endpoint: tuple[str, int], accounts: Any = None, options: GrpcOptions | None = None) -> None:
        self.broker = broker
        self.handle = handle
        self.host, self.port = endpoint
        self.options = options or GrpcOptions()
        self.gate = Gate(accounts)  # access.py: authentication, names and permissions before every method
        self.routes: Any = None  # routes.RouteView: the topic's other brokers, from the name servers
        # receipt handles are signed with a key of this start's, so only handles this broker issued are acted on
        self.receipts = Receipts()
        self.route = RouteActivity(self)
        self.client = ClientActivity(self)
        self.sender = SendActivity(self)
        self.transactions = TransactionActivity(self)
        self.receive = ReceiveActivity(self)
        self.dlq = DeadLetterActivity(self)
        self.pull = PullActivity(self)
        self.peers = PeerTable(to_message, self.transactions.remember)
        self.renewer = Renewer(self.options, self.receive.renew_change, self.receive.online,
                               lambda n: CUSTOMIZED_BACKOFF[min(n, len(CUSTOMIZED_BACKOFF) - 1)] * 1000)

    @property
    def resolve_peer(self) -> Callable[[str], tuple[str, int] | None] | None:
        """front.py's real client address behind its splice (None: grpcio's peer is the client)."""
        return self.peers.resolve_peer

    @resolve_peer.setter
    def resolve_peer(self, fn: Callable[[str], tuple[str, int] | None] | None) -> None:
        self.peers.resolve_peer = fn

    def client_ip(self, context: Any) -> str:
        return self.peers.client_ip(context)

    async def call(self, peer: GrpcPeer, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand | None:
        """The broker's own request for an RPC, signed as the account the gate authenticated (the
        broker's ACL then checks it again), unsigned for a white-listed peer or with ACL off."""
        cmd = RemotingCommand.request(code, ext, body)
        account = ACCOUNT.get()
        if account is not None:
            sign(cmd.ext, cmd.body, *account)
        return await self.handle(peer, cmd)

    # ------------------------------------------------------------------ the RPCs, by activity
    # (streaming RPCs return the activity's async iterator; access.guard wraps each one)

    async def QueryRoute(self, request: s.QueryRouteRequest, context: Any) -> s.QueryRouteResponse:  # noqa: N802
        return await self.route.query_route(request, context)

    async def QueryAssignment(self, request: s.QueryAssignmentRequest, context: Any) -> s.QueryAssignmentResponse:  # noqa: N802
        return await self.route.query_assignment(request, context)

    async def Heartbeat(self, request: s.HeartbeatRequest, context: Any) -> s.HeartbeatResponse:  # noqa: N802
        return await self.client.heartbeat(request, context)

    def Telemetry(self, request_iterator: Any, context: Any) -> AsyncIterator[s.TelemetryCommand]:  # noqa: N802
        return self.client.telemetry(request_iterator, context)

    async def NotifyClientTermination(self, request: Any, context: Any) -> s.NotifyClientTerminationResponse:  # noqa: N802
        return await self.client.notify_client_termination(request, context)

    async def SendMessage(self, request: s.SendMessageRequest, context: Any) -> s.SendMessageResponse:  # noqa: N802
        return await self.sender.send_message(request, context)

    async def RecallMessage(self, request: s.RecallMessageRequest, context: Any) -> s.RecallMessageResponse:  # noqa: N802
        return await self.sender.recall_message(request, context)

    async def EndTransaction(self, request: s.EndTransactionRequest, context: Any) -> s.EndTransactionResponse:  # noqa: N802
        return await self.transactions.end_transaction(request, context)

    def ReceiveMessage(self, request: s.ReceiveMessageRequest, context: Any) -> AsyncIterator[s.ReceiveMessageResponse]:  # noqa: N802
        return self.receive.receive_message(request, context)

    async def AckMessage(self, request: s.AckMessageRequest, context: Any) -> s.AckMessageResponse:  # noqa: N802
        return await self.receive.ack_message(request, context)

    async def ChangeInvisibleDuration(self, request: s.ChangeInvisibleDurationRequest, context: Any) -> Any:  # noqa: N802
        return await self.receive.change_invisible_duration(request, context)

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:  # noqa: N802
        return await self.dlq.forward(request, context)

    def PullMessage(self, request: s.PullMessageRequest, context: Any) -> AsyncIterator[s.PullMessageResponse]:  # noqa: N802
        return self.pull.pull_message(request, context)

    async def UpdateOffset(self, request: s.UpdateOffsetRequest, context: Any) -> s.UpdateOffsetResponse:  # noqa: N802
        return await self.pull.update_offset(request, context)

    async def GetOffset(self, request: s.GetOffsetRequest, context: Any) -> s.GetOffsetResponse:  # noqa: N802
        return await self.pull.get_offset(request, context)

    async def QueryOffset(self, request: s.QueryOffsetRequest, context: Any) -> s.QueryOffsetResponse:  # noqa: N802
        return await self.pull.query_offset(request, context)

    async def SyncLiteSubscription(self, request: Any, context: Any) -> Any:  # noqa: N802
        """RocketMQ 5.4's lite topics are not served: NOT_IMPLEMENTED, as a status the SDK reads."""
        return s.SyncLiteSubscriptionResponse(status=status(C.NOT_IMPLEMENTED, "lite subscriptions are not served"))
