"""``SimpleConsumer``: RocketMQ 5's receive / ack / change-invisible-duration consumer, over POP.

No rebalance and no offsets to manage: ``receive`` asks the brokers of the subscribed topics for
up to ``max_messages`` messages (POP_MESSAGE, long polling up to ``await_duration``), each then
invisible to other receivers for ``invisible_duration``; ``ack`` retires one; a message not acked
in time is received again with ``delivery_attempt`` one higher, and after the group's
``retryMaxTimes`` it goes to the group's DLQ. ``change_invisible_duration`` extends (or shortens:
0 = now) the time before a message comes back, and returns a message with a fresh receipt.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from rmq.client.base import ClientBase
from rmq.client.errors import BrokerError, ClientError
from rmq.client.options import ClientOptions, build
from rmq.protocol.codes import ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.message import MessageExt, decode_messages

__all__ = ["SimpleConsumer"]

POP_MESSAGE = 200050
ACK_MESSAGE = 200051
CHANGE_MESSAGE_INVISIBLETIME = 200053
RECEIPT = "POP_CK"  # where the Java client keeps a popped message's receipt too


def delivery_attempt(msg: MessageExt) -> int:
    """How many times this message has been handed out, this time included."""
    return msg.reconsume_times + 1


class SimpleConsumer(ClientBase):
    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        subscriptions: dict[str, str] | None = None,
        await_duration: float = 5.0,
        kernel: Any = None,
        **options: Any,
    ) -> None:
        self._options = build(ClientOptions, options, "SimpleConsumer")
        super().__init__(namesrv_addr, self._options, kernel)
        self.group = group
        self.await_duration = await_duration
        self.subscriptions: dict[str, str] = dict(subscriptions or {})
        self._turn = itertools.count()

    def subscribe(self, topic: str, expression: str = "*") -> None:
        self.subscriptions[topic] = expression

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)

    async def _targets(self) -> list[tuple[str, str, str]]:
        """(topic, expression, broker name) for every readable broker of every subscribed topic."""
        out = []
        for topic, expr in self.subscriptions.items():
            route = await self.instance.route(topic)
            self.instance.topics.add(topic)
            for bd in route.broker_datas:
                out.append((topic, expr, bd.broker_name))
        return out

    async def receive(self, max_messages: int = 16, invisible_duration: float = 30.0,
                      *, await_duration: float | None = None) -> list[MessageExt]:
        """Up to ``max_messages`` (1..32) messages, or [] once ``await_duration`` passed without any."""
        self._check_running()
        if not self.subscriptions:
            raise ClientError("subscribe to a topic before receive()")
        if not 1 <= max_messages <= 32:
            raise ValueError("max_messages must be in 1..32")
        wait = self.await_duration if await_duration is None else await_duration
        targets = await self._targets()
        if not targets:
            return []
        k = next(self._turn) % len(targets)
        targets = targets[k:] + targets[:k]
        per_poll = int(wait * 1000 / len(targets))
        deadline = time.monotonic() + wait
        while True:
            for topic, expr, broker in targets:
                got = await self._pop(topic, expr, broker, max_messages, invisible_duration, per_poll)
                if got:
                    return got
            if time.monotonic() >= deadline:
                return []

    async def _pop(self, topic: str, expr: str, broker: str, n: int, invisible: float,
                   poll_ms: int) -> list[MessageExt]:
        inst = self.instance
        addr = await inst.find_broker_addr(broker, topic)
        ext = {"consumerGroup": self.group, "topic": topic, "queueId": "-1", "maxMsgNums": str(n),
               "invisibleTime": str(int(invisible * 1000)), "pollTime": str(poll_ms),
               "bornTime": str(time.time_ns() // 1_000_000), "initMode": "0", "expType": "TAG", "exp": expr,
               "order": "false"}
        cmd = RemotingCommand.request(POP_MESSAGE, ext)
        resp = await inst.remoting.invoke(addr, cmd, poll_ms / 1000 + self._options.request_timeout)
        if resp.code == ResponseCode.PULL_NOT_FOUND:
            return []
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark, f"receive from {topic}", addr)
        h = resp.ext
        starts = {}
        for part in (h.get("startOffsetInfo") or "").split(";"):
            bits = part.split(" ")
            if len(bits) == 3:
                starts[int(bits[1])] = bits[2]
        msgs = decode_messages(resp.body or b"")
        for m in msgs:
            m.properties[RECEIPT] = " ".join((starts.get(m.queue_id, str(m.queue_offset)), h["popTime"],
                                              h["invisibleTime"], h.get("reviveQid", "0"), "0", broker,
                                              str(m.queue_id), str(m.queue_offset)))
        return msgs

    @staticmethod
    def _receipt(msg: MessageExt) -> list[str]:
        parts = (msg.properties.get(RECEIPT) or "").split(" ")
        if len(parts) < 8:
            raise ClientError("this message was not received by a SimpleConsumer (no receipt)")
        return parts

    async def ack(self, msg: MessageExt) -> None:
        """Retire a received message; BrokerError (NO_MESSAGE) when its receipt is stale."""
        self._check_running()
        parts = self._receipt(msg)
        addr = await self.instance.find_broker_addr(parts[5], msg.topic)
        await self.instance.invoke(addr, ACK_MESSAGE, {
            "consumerGroup": self.group, "topic": msg.topic, "queueId": parts[6], "extraInfo": " ".join(parts),
            "offset": parts[7]}, what=f"ack in {msg.topic}")

    async def change_invisible_duration(self, msg: MessageExt, invisible_duration: float) -> MessageExt:
        """Hide the message for ``invisible_duration`` seconds from now; the message gets a new receipt
        (the old one no longer acks)."""
        self._check_running()
        parts = self._receipt(msg)
        addr = await self.instance.find_broker_addr(parts[5], msg.topic)
        resp = await self.instance.invoke(addr, CHANGE_MESSAGE_INVISIBLETIME, {
            "consumerGroup": self.group, "topic": msg.topic, "queueId": parts[6], "extraInfo": " ".join(parts),
            "offset": parts[7], "invisibleTime": str(int(invisible_duration * 1000))},
            what=f"change invisible duration in {msg.topic}")
        parts[1], parts[2] = resp.ext.get("popTime", parts[1]), resp.ext.get("invisibleTime", parts[2])
        msg.properties[RECEIPT] = " ".join(parts)
        return msg
