"""The client activity of the gRPC endpoint (the proxy's ClientActivity): Heartbeat, the Telemetry
stream (settings in, the proxy's merged settings and the broker's calls to the client out) and
NotifyClientTermination. A client is registered with the broker as a remoting heartbeat would, so
admin views list it and the broker's calls to a consumer or producer reach it (peer.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf import duration_pb2

from rmq.plugins.grpc_proxy.access import ACCOUNT, Refused
from rmq.plugins.grpc_proxy.common import MAX_BODY, NO_CLIENT_ID, Activity, C, json_bytes, status
from rmq.plugins.grpc_proxy.peer import GrpcPeer
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.protocol.codes import RequestCode

CUSTOMIZED_BACKOFF = [1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200]


class ClientActivity(Activity):
    async def heartbeat(self, request: s.HeartbeatRequest, context: Any) -> s.HeartbeatResponse:
        peer = self.peer(context)
        if peer is None:
            return s.HeartbeatResponse(status=NO_CLIENT_ID)
        await self.register(peer)
        return s.HeartbeatResponse(status=status(C.OK))

    async def register(self, peer: GrpcPeer) -> None:
        """A remoting heartbeat for the client, as the proxy's: a producer per published topic (group =
        topic), a consumer as its group (CONSUME_POP, CLUSTERING) with its subscriptions, so admin
        views list it and the broker's calls to a consumer (running info, consume directly) reach it."""
        st = peer.settings
        if st is None:
            return
        producers: list[dict[str, Any]] = []
        consumers: list[dict[str, Any]] = []
        if st.client_type == d.PRODUCER:
            producers = [{"groupName": t.name} for t in st.publishing.topics]
        elif st.client_type in (d.PUSH_CONSUMER, d.SIMPLE_CONSUMER) and st.subscription.group.name:
            subs = [{"topic": e.topic.name, "subString": e.expression.expression or "*",
                     "expressionType": "SQL92" if e.expression.type == d.SQL else "TAG", "tagsSet": [], "codeSet": [],
                     "subVersion": 0, "classFilterMode": False}
                    for e in st.subscription.subscriptions if e.topic.name]
            consumers = [{"groupName": st.subscription.group.name, "consumeType": "CONSUME_POP",
                          "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                          "subscriptionDataSet": subs, "unitMode": False}]
        if producers or consumers:
            body = json_bytes({"clientID": peer.client_id, "producerDataSet": producers, "consumerDataSet": consumers})
            await self.call(peer, RequestCode.HEART_BEAT, {}, body)

    async def telemetry(self, request_iterator: Any, context: Any) -> AsyncIterator[s.TelemetryCommand]:
        peer = self.peer(context)
        if peer is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "x-mq-client-id is required")
            return
        reader = asyncio.ensure_future(self._read(peer, request_iterator))
        get: asyncio.Future[Any] | None = None
        peer.streams += 1
        try:
            while not reader.done() or not peer.outbox.empty():
                get = asyncio.ensure_future(peer.outbox.get())
                done, _ = await asyncio.wait({get, reader}, return_when=asyncio.FIRST_COMPLETED)
                if get in done:
                    item, get = get.result(), None
                    yield item
                else:
                    get.cancel()
                    get = None
        finally:
            peer.streams -= 1
            reader.cancel()
            if get is not None:
                get.cancel()

    async def _read(self, peer: GrpcPeer, request_iterator: Any) -> None:
        async for cmd in request_iterator:
            if cmd is None:  # bytes that are not a TelemetryCommand (access.safe_decoder)
                await peer.outbox.put(s.TelemetryCommand(status=status(C.BAD_REQUEST, "not a TelemetryCommand")))
                continue
            try:  # the gate for a stream: each command's names and permissions (access.py)
                self.svc.gate.authorize("Telemetry", cmd, ACCOUNT.get())
            except Refused as e:
                await peer.outbox.put(s.TelemetryCommand(status=status(e.code, e.message)))
                continue
            if cmd.HasField("settings"):
                peer.settings = cmd.settings
                await self.register(peer)
                await peer.outbox.put(s.TelemetryCommand(status=status(C.OK), settings=self.merged(cmd.settings)))
            elif cmd.HasField("thread_stack_trace") or cmd.HasField("verify_message_result"):
                peer.answered(cmd)

    def merged(self, st: d.Settings) -> d.Settings:
        """The client's settings with the proxy's: retry policy, batch size, long polling, FIFO."""
        out = d.Settings()
        out.CopyFrom(st)
        if st.client_type == d.PRODUCER:
            out.backoff_policy.CopyFrom(d.RetryPolicy(max_attempts=3, exponential_backoff=d.ExponentialBackoff(
                initial=duration_pb2.Duration(nanos=10_000_000), max=duration_pb2.Duration(seconds=1), multiplier=2)))
            out.publishing.max_body_size = MAX_BODY
            out.publishing.validate_message_type = True
        else:
            group = st.subscription.group.name
            sgc = self.broker.groups.table.get(group) if group else None
            retry_max = sgc.retryMaxTimes if sgc is not None else 16
            out.subscription.receive_batch_size = 32
            out.subscription.long_polling_timeout.CopyFrom(duration_pb2.Duration(seconds=20))
            out.subscription.fifo = bool(sgc is not None and sgc.consumeMessageOrderly)
            out.backoff_policy.CopyFrom(d.RetryPolicy(max_attempts=retry_max + 1, customized_backoff=d.CustomizedBackoff(
                next=[duration_pb2.Duration(seconds=x) for x in CUSTOMIZED_BACKOFF])))
        out.metric.on = False
        return out

    async def notify_client_termination(self, request: Any, context: Any) -> s.NotifyClientTerminationResponse:
        self.svc.peers.forget(context)
        return s.NotifyClientTerminationResponse(status=status(C.OK))
