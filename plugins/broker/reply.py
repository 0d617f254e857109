"""Request-reply (RocketMQ 4.4+): SEND_REPLY_MESSAGE (324) / SEND_REPLY_MESSAGE_V2 (325).

A responder sends its reply to ``<cluster>_REPLY_TOPIC``; the broker pushes it to the requesting
client (PUSH_REPLY_MESSAGE_TO_CLIENT 326, found by ``REPLY_TO_CLIENT`` among its producers'
connections) and, with ``storeReplyMessageEnable`` (default true), also stores it. The answer's
code is the push's: 0, or SYSTEM_ERROR with RocketMQ's remark when the requester is unknown or
did not take it (reference: rocketmq-timer-tx-acl.md §3).
"""

from __future__ import annotations

import logging
import random
import time
from typing import TYPE_CHECKING

from rmq.kernel import MessageRecord, PutStatus, RateLimitedLog
from rmq.protocol.access import PUB, topic
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import HeaderError, RemotingCommand, ext_i32, ext_int
from rmq.protocol.common import Perm, prop_value, properties_problem, set_props
from rmq.protocol.headers import SEND_LONG, SEND_V2, SendKeys
from rmq.protocol.names import validate_topic

if TYPE_CHECKING:
    from rmq.kernel import Connection
    from rmq.plugins.broker.context import ProcessorContext

log = logging.getLogger("rmq.broker.reply")
refusals = RateLimitedLog(log)

PUSH_TIMEOUT = 10.0  # RocketMQ's 10,000 ms


def reply_topic(cluster: str) -> str:
    return f"{cluster}_REPLY_TOPIC"


class ReplyProcessor:
    def __init__(self, ctx: ProcessorContext) -> None:
        self.ctx = ctx
        self.pushed = 0

    def register(self, registry: object, owner: str) -> None:
        registry.register(RequestCode.SEND_REPLY_MESSAGE, self.reply, owner=owner,  # type: ignore[attr-defined]
                          access=topic(SEND_LONG.topic, PUB))
        registry.register(RequestCode.SEND_REPLY_MESSAGE_V2, self.reply, owner=owner,  # type: ignore[attr-defined]
                          access=topic(SEND_V2.topic, PUB))

    async def reply(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        keys: SendKeys = SEND_V2 if cmd.code == RequestCode.SEND_REPLY_MESSAGE_V2 else SEND_LONG
        ext = cmd.ext
        topic = ext.get(keys.topic)
        if not topic:
            raise HeaderError(keys.topic, "is missing")
        reason = validate_topic(topic)
        if reason is not None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, reason)
        tc = b.topics.table.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not tc.perm & Perm.WRITE:
            return cmd.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        # a send's rule (send.py): a queue the topic does not have is refused, never created (issue #26: each
        # stray queue id made a consume queue, two descriptors, until the broker ran out of them)
        queue_id = ext_i32(cmd, keys.queue_id, 0)
        if queue_id >= tc.writeQueueNums and queue_id >= tc.readQueueNums:
            host, port = conn.remote_addr[:2]
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"request queueId[{queue_id}] is illegal, topic[{topic}] "
                                f"has {max(tc.writeQueueNums, tc.readQueueNums)} queues. Producer: {host}:{port}")
        if queue_id < 0:
            queue_id = random.randrange(tc.writeQueueNums) if tc.writeQueueNums > 0 else 0
        sys_flag = ext_i32(cmd, keys.sys_flag, 0)
        born_ts = ext_int(cmd, keys.born_timestamp, 0)
        flag = ext_i32(cmd, keys.flag, 0)
        props = ext.get(keys.properties) or ""
        body = cmd.body or b""
        if len(body) > b.config.maxMessageSize:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"the message body size over max value, MAX: "
                                                              f"{b.config.maxMessageSize}")
        bad = properties_problem(props)
        if bad is not None:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"malformed message properties: {bad}")
        target = prop_value(props, "REPLY_TO_CLIENT")
        if not target:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "reply message properties[REPLY_TO_CLIENT] is null")
        host, port = conn.remote_addr[:2]
        push = RemotingCommand.request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, {
            "producerGroup": ext.get(keys.producer_group) or "", "topic": topic,
            "defaultTopic": ext.get(keys.default_topic) or "TBW102",
            "defaultTopicQueueNums": ext.get(keys.default_topic_queue_nums) or "4", "queueId": str(queue_id),
            "sysFlag": str(sys_flag), "bornTimestamp": str(born_ts), "flag": str(flag),
            "properties": set_props(props, {"PUSH_REPLY_TIME": str(time.time_ns() // 1_000_000)}),
            "reconsumeTimes": ext.get(keys.reconsume_times) or "0", "unitMode": ext.get(keys.unit_mode) or "false",
            "bornHost": f"{host}:{port}", "storeHost": b.broker_addr,
            "storeTimestamp": str(time.time_ns() // 1_000_000)}, body)
        channel = b.producers.channel_of(target)
        if channel is None:
            code, remark = ResponseCode.SYSTEM_ERROR, f"push reply message fail, channel of <{target}> not found."
        else:
            try:
                answer = await channel.send_request(push, PUSH_TIMEOUT)
                ok = answer.code == ResponseCode.SUCCESS
            except Exception as e:  # noqa: BLE001 - a dead or slow requester: this reply's failure
                refusals.info("push", "push reply to %s failed: %r", target, e)
                ok = False
            code, remark = (0, None) if ok else (ResponseCode.SYSTEM_ERROR, f"push reply message to {target}fail.")
            if ok:
                self.pushed += 1
        fields = {"msgId": "0", "queueId": str(queue_id), "queueOffset": "0"}
        if b.config.storeReplyMessageEnable:
            rec = MessageRecord(topic, queue_id, body, flag, props, sys_flag, born_ts, b.born_host(conn),
                                ext_i32(cmd, keys.reconsume_times, 0))
            result = await b.store.put_message(rec)
            if result.status is PutStatus.PUT_OK:
                fields = {"msgId": f"{b.msg_id_prefix}{result.wrote_offset:016X}", "queueId": str(queue_id),
                          "queueOffset": str(result.queue_offset)}
            else:
                log.warning("storing a reply in %s failed: %s", topic, result.status.name)
        return cmd.response(code, remark, fields)
