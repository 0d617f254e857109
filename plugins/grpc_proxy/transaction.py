"""The transaction activity of the gRPC endpoint (the proxy's EndTransactionActivity): where each
half is, from its send and from every check relayed to a producer, and EndTransaction, which ends
the half there with the broker's END_TRANSACTION."""

from __future__ import annotations

from typing import Any

from rmq.plugins.grpc_proxy.common import NO_CLIENT_ID, Activity, C, from_remoting, status
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.protocol.codes import RequestCode

MAX_HALVES = 100_000  # halves whose place is kept at once


class TransactionActivity(Activity):
    def __init__(self, svc: Any) -> None:
        super().__init__(svc)
        self.halves: dict[str, tuple[int, int, str]] = {}  # topic@txid -> (queue offset, commitlog offset, group)

    def remember(self, topic: str, txid: str, where: tuple[int, int, str]) -> None:
        """Where a transaction's half is (half queue offset, commitlog offset, producer group): from its
        send, then from each check relayed to the producer, as the proxy's ``addTransactionDataByBrokerAddr``
        on CHECK_TRANSACTION_STATE. The table is memory only; the half itself is the durable state, and
        a check carries where it is, so a check answered after a restart still ends it (a check's
        put-back also moves the half: the newest place wins). A producer's own answer after a restart
        finds nothing, as under the proxy, and the next check resolves the half."""
        key = f"{topic}@{txid}"
        self.halves.pop(key, None)
        self.halves[key] = where
        if len(self.halves) > MAX_HALVES:  # answered or forgotten: keep the table bounded
            self.halves.pop(next(iter(self.halves)))

    async def end_transaction(self, request: s.EndTransactionRequest, context: Any) -> s.EndTransactionResponse:
        peer = self.peer(context)
        if peer is None:
            return s.EndTransactionResponse(status=NO_CLIENT_ID)
        if not request.transaction_id:
            return s.EndTransactionResponse(status=status(C.INVALID_TRANSACTION_ID, "transaction_id is blank"))
        key = f"{request.topic.name}@{request.transaction_id}"
        data = self.halves.pop(key, None)
        if data is None:
            return s.EndTransactionResponse(status=status(C.INTERNAL_SERVER_ERROR, "cannot found transaction data"))
        queue_offset, phys, group = data
        kind = {d.COMMIT: 8, d.ROLLBACK: 12}.get(request.resolution, 0)
        if kind == 0:  # unknown: the broker asks again later
            self.halves[key] = data
            return s.EndTransactionResponse(status=status(C.OK))
        ext = {"producerGroup": group, "tranStateTableOffset": str(queue_offset), "commitLogOffset": str(phys),
               "commitOrRollback": str(kind), "fromTransactionCheck": str(request.source == d.SOURCE_SERVER_CHECK).lower(),
               "msgId": request.message_id, "transactionId": request.transaction_id}
        resp = await self.call(peer, RequestCode.END_TRANSACTION, ext)
        return s.EndTransactionResponse(status=from_remoting(resp) if resp is not None else status(C.OK))
