"""The operator's request codes (mqadmin and the dashboard): offset resets pushed to live consumers,
calls forwarded to a consumer, consume time spans, offset cloning, stats, store maintenance.

Semantics are RocketMQ 4.9's ``AdminBrokerProcessor`` and ``Broker2Client`` unless a comment says
otherwise; bodies are the same JSON documents (``Map<MessageQueue, V>`` in fastjson's object-key form).
Store maintenance (306, 316, 321, 329) uses optional store capabilities and answers SYSTEM_ERROR
naming the missing one when a third party's store lacks it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from rmq.plugins.broker.admin import _j, mq_map, readable_record
from rmq.plugins.broker.context import TableProcessor
from rmq.protocol import access
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand, ext_bool, ext_i32, ext_int, ext_str
from rmq.protocol.message import decode_offset_msg_id
from rmq.protocol.names import is_system_topic

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rmq.kernel import Connection

log = logging.getLogger("rmq.broker")

#: how long the broker waits for a consumer it forwards a call to (307, 309, 221), as Java's 5 s
CLIENT_CALL_TIMEOUT = 5.0
#: QUERY_CONSUME_QUEUE never returns more units than this in one answer
MAX_CQ_UNITS = 1000


def _mq(topic: str, broker: str, qid: int) -> dict[str, Any]:
    return {"brokerName": broker, "queueId": qid, "topic": topic}


class AdminOpsProcessor(TableProcessor):
    def requests(self) -> Iterable[tuple[int, Any, access.Access]]:
        rc = RequestCode
        sub, A = access.SUB, access.Access
        group_topic = A(topics=(("topic", sub),), groups=(("group", sub),))
        return (
            (rc.INVOKE_BROKER_TO_RESET_OFFSET, self.reset_offset, access.ADMIN),
            (rc.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, self.consumer_status, group_topic),
            (rc.QUERY_TOPIC_CONSUME_BY_WHO, self.topic_consumed_by, access.topic("topic", access.ANY)),
            (rc.QUERY_TOPICS_BY_CONSUMER, self.topics_by_consumer, access.group("group")),
            (rc.QUERY_SUBSCRIPTION_BY_CONSUMER, self.subscription_by_consumer, group_topic),
            (rc.QUERY_CONSUME_TIME_SPAN, self.consume_time_span, group_topic),
            (rc.GET_SYSTEM_TOPIC_LIST_FROM_BROKER, self.system_topics, access.SIGNED),
            (rc.CLEAN_EXPIRED_CONSUMEQUEUE, self.clean_expired_cq, access.ADMIN),
            (rc.DELETE_EXPIRED_COMMITLOG, self.delete_expired_commitlog, access.ADMIN),
            (rc.CLEAN_UNUSED_TOPIC, self.clean_unused_topic, access.ADMIN),
            (rc.GET_CONSUMER_RUNNING_INFO, self.consumer_running_info, access.group()),
            (rc.QUERY_CORRECTION_OFFSET, self.correction_offset,
             A(topics=(("topic", sub),), groups=(("compareGroup?", sub),))),
            # hands a stored message to a member of the group: the message's topic is checked once read
            (rc.CONSUME_MESSAGE_DIRECTLY, self.consume_directly,
             access.group(after_read="SUB on the topic of the message the msgId names")),
            (rc.CLONE_GROUP_OFFSET, self.clone_group_offset, access.ADMIN),
            (rc.VIEW_BROKER_STATS_DATA, self.view_stats, access.SIGNED),
            (rc.GET_BROKER_CONSUME_STATS, self.broker_consume_stats, access.SIGNED),
            (rc.QUERY_CONSUME_QUEUE, self.query_consume_queue,
             A(topics=(("topic", sub),), groups=(("consumerGroup?", sub),))),
            (rc.GET_ALL_PRODUCER_INFO, self.all_producer_info, access.SIGNED),
            (rc.GET_TOPIC_CONFIG, self.topic_config, access.topic("topic", access.ANY)),
            (rc.GET_SUBSCRIPTIONGROUP_CONFIG, self.group_config, access.group("group")),
        )

    # ------------------------------------------------------------------ offsets

    async def reset_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET (222): the offsets at ``timestamp`` (-1: the queue ends), kept
        where the group is already behind unless ``isForce``, pushed to every live member as
        RESET_CONSUMER_CLIENT_OFFSET (220) so no consumer writes its old position back. With no member
        online: CONSUMER_NOT_ONLINE, as RocketMQ (mqadmin then commits the offsets itself)."""
        b = self.ctx
        topic, group = ext_str(cmd, "topic"), ext_str(cmd, "group")
        timestamp = ext_int(cmd, "timestamp")
        force = ext_bool(cmd, "isForce", False)
        log.info("reset offset from %s: topic=%s group=%s timestamp=%d force=%s", conn.remote_addr[0], topic,
                 group, timestamp, force)
        tc = b.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                                f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}")
        store, bname = b.store, b.config.brokerName
        table: list[tuple[tuple[str, str, int], int]] = []
        for q in range(tc.writeQueueNums):
            current = b.offsets.query(group, topic, q)
            if current == -1:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist")
            target = store.get_max_offset(topic, q) if timestamp == -1 else store.get_offset_by_time(topic, q, timestamp)
            target = max(target, 0)
            table.append(((topic, bname, q), target if force or target < current else current))
        info = b.consumers.get(group)
        if info is None or not info.channels:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
                                f"Timestamp: {timestamp}")
        body = ('{"offsetTable":' + mq_map(table) + "}").encode()
        for ch in list(info.channels.values()):
            push = RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, {
                "topic": topic, "group": group, "timestamp": str(timestamp), "isForce": "true" if force else "false"},
                self._reset_body_for(ch, table, body))
            try:
                await ch.conn.send_oneway(push)
            except Exception as e:  # noqa: BLE001 - one dead member does not stop the others
                log.warning("reset offset: telling %s failed: %r", ch.client_id, e)
        for (_, _, q), off in table:  # the group's own record follows, for members that join later
            b.offsets.commit(group, topic, q, off)
        return cmd.response(body=body)

    @staticmethod
    def _reset_body_for(ch: Any, table: list[tuple[tuple[str, str, int], int]], body: bytes) -> bytes:
        """The C++ client reads a list of queues with offsets (ResetOffsetBodyForC), others the map."""
        if ch.language.upper() != "CPP":
            return body
        return _j({"offsetTable": [{**_mq(t, bn, q), "offset": off} for (t, bn, q), off in table]}).encode()

    async def consumer_status(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223): each member's offsets on ``topic``, asked of
        the members (GET_CONSUMER_STATUS_FROM_CLIENT, 221); ``clientAddr`` picks one client id."""
        b = self.ctx
        topic, group = ext_str(cmd, "topic"), ext_str(cmd, "group")
        only = cmd.ext.get("clientAddr") or ""
        info = b.consumers.get(group)
        if info is None or not info.channels:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"No Any Consumer online in the consumer group: [{group}]")
        table: dict[str, Any] = {}
        ask = RemotingCommand.request(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, {"topic": topic, "group": group})
        for ch in list(info.channels.values()):
            if only and ch.client_id != only:
                continue
            try:
                answer = await ch.conn.send_request(ask, CLIENT_CALL_TIMEOUT)
            except Exception as e:  # noqa: BLE001 - a member that does not answer is left out, as Java
                log.info("consumer status from %s failed: %r", ch.client_id, e)
                continue
            if answer.code == ResponseCode.SUCCESS and answer.body:
                table[ch.client_id] = _member_text(answer.body, "messageQueueTable")
        parts = ",".join(f"{_j(k)}:{v}" for k, v in table.items())
        return cmd.response(body=('{"consumerTable":{' + parts + "}}").encode())

    async def correction_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_CORRECTION_OFFSET (308): per queue, the lowest offset any group other than
        ``filterGroups`` holds; MAX when ``compareGroup`` is behind it. (RocketMQ also deletes the
        filtered groups' offsets while answering; a query here changes nothing.)"""
        b = self.ctx
        topic = ext_str(cmd, "topic")
        skip = {g for g in (cmd.ext.get("filterGroups") or "").split(",") if g}
        compare = cmd.ext.get("compareGroup") or ""
        store = b.store
        lowest: dict[int, int] = {}
        for group in b.offsets.groups_of_topic(topic):
            if group in skip:
                continue
            for q, off in b.offsets.offsets(group, topic).items():
                if off >= store.get_min_offset(topic, q):
                    lowest[q] = min(off, lowest.get(q, off))
        for q, off in (b.offsets.offsets(compare, topic) if compare else {}).items():
            if q in lowest:
                lowest[q] = 2**63 - 1 if lowest[q] > off else lowest[q]
        return cmd.response(body=_j({"correctionOffsets": {str(q): v for q, v in sorted(lowest.items())}}).encode())

    async def clone_group_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """CLONE_GROUP_OFFSET (314): copy ``srcGroup``'s offsets to ``destGroup`` (one topic or all);
        an online source skips topics it no longer subscribes to unless ``offline``."""
        b = self.ctx
        src, dest = ext_str(cmd, "srcGroup"), ext_str(cmd, "destGroup")
        topic = cmd.ext.get("topic") or ""
        offline = ext_bool(cmd, "offline", False)
        topics = [topic] if topic else sorted(b.offsets.topics_of_group(src))
        info = b.consumers.get(src)
        for t in topics:
            if b.topics.get(t) is None:
                log.warning("clone group offset: no topic %s", t)
                continue
            if not offline and info is not None and info.subscriptions and t not in info.subscriptions:
                continue
            for q, off in b.offsets.offsets(src, t).items():
                b.offsets.commit(dest, t, q, off)
        log.info("cloned offsets of %s to %s (%s) for %s", src, dest, topic or "all topics", conn.remote_addr[0])
        return cmd.response()

    # ------------------------------------------------------------------ who consumes what

    async def topic_consumed_by(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_TOPIC_CONSUME_BY_WHO (300): groups online on the topic plus groups with offsets on it."""
        b = self.ctx
        topic = ext_str(cmd, "topic")
        groups = b.consumers.groups_of_topic(topic) | b.offsets.groups_of_topic(topic)
        return cmd.response(body=_j({"groupList": sorted(groups)}).encode())

    async def topics_by_consumer(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        topics = b.offsets.topics_of_group(ext_str(cmd, "group"))
        return cmd.response(body=_j({"brokerAddr": b.broker_addr, "topicList": sorted(topics)}).encode())

    async def subscription_by_consumer(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        group, topic = ext_str(cmd, "group"), ext_str(cmd, "topic")
        info = b.consumers.get(group)
        sub = info.subscriptions.get(topic) if info is not None else None
        return cmd.response(body=_j({"group": group, "topic": topic,
                                     "subscriptionData": sub.to_json() if sub is not None else None}).encode())

    async def consume_time_span(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_CONSUME_TIME_SPAN (303): per queue, the first and last store times, the store time of
        the group's last consumed message and how long the next one has waited."""
        b = self.ctx
        topic, group = ext_str(cmd, "topic"), ext_str(cmd, "group")
        tc = b.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = b.store
        now = int(time.time() * 1000)
        spans = []
        for q in range(tc.writeQueueNums):
            first = store.get_earliest_store_time(topic, q)
            mx = store.get_max_offset(topic, q)
            last = store.get_store_time(topic, q, mx - 1)
            committed = b.offsets.query(group, topic, q)
            consumed = store.get_store_time(topic, q, committed - 1) if committed > 0 else first
            delay = 0
            if committed < mx:
                nxt = store.get_store_time(topic, q, max(committed, 0))
                delay = now - nxt if nxt > 0 else 0
            spans.append({"messageQueue": _mq(topic, b.config.brokerName, q), "minTimeStamp": first,
                          "maxTimeStamp": last, "consumeTimeStamp": consumed, "delayTime": delay})
        return cmd.response(body=_j({"consumeTimeSpanSet": spans}).encode())

    async def system_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        return cmd.response(body=_j({"brokerAddr": b.broker_addr, "topicList": sorted(b.topics.system_topics)}).encode())

    # ------------------------------------------------------------------ calls forwarded to a consumer

    def _member(self, cmd: RemotingCommand, group: str, client_id: str) -> Any:
        info = self.ctx.consumers.get(group)
        for ch in (info.channels.values() if info is not None else ()):
            if ch.client_id == client_id and not ch.conn.closed:
                return ch
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")

    async def _forward(self, cmd: RemotingCommand, ch: Any, push: RemotingCommand) -> RemotingCommand:
        try:
            answer = await ch.conn.send_request(push, CLIENT_CALL_TIMEOUT)
        except TimeoutError:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"consumer <{ch.client_id}> Timeout: {CLIENT_CALL_TIMEOUT} s")
        except Exception as e:  # noqa: BLE001 - the client went away: the caller is told
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"invoke consumer <{ch.client_id}> Exception: {e!r}")
        return cmd.response(answer.code, answer.remark, body=answer.body)

    async def consumer_running_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO (307): asked of the named client, its answer returned as is."""
        group, client_id = ext_str(cmd, "consumerGroup"), ext_str(cmd, "clientId")
        ch = self._member(cmd, group, client_id)
        if isinstance(ch, RemotingCommand):
            return ch
        push = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, {
            "consumerGroup": group, "clientId": client_id,
            "jstackEnable": "true" if ext_bool(cmd, "jstackEnable", False) else "false"})
        return await self._forward(cmd, ch, push)

    async def consume_directly(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY (309): the stored message (by offset msgId) handed to one client's
        listener; its ConsumeMessageDirectlyResult is returned."""
        b = self.ctx
        group, client_id, msg_id = ext_str(cmd, "consumerGroup"), ext_str(cmd, "clientId"), ext_str(cmd, "msgId")
        ch = self._member(cmd, group, client_id)
        if isinstance(ch, RemotingCommand):
            return ch
        try:
            _, _, phys = decode_offset_msg_id(msg_id)
        except ValueError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad msgId {msg_id[:64]!r}: {e}")
        rec = readable_record(b, self._services, conn, cmd, phys)
        if isinstance(rec, RemotingCommand):
            return rec
        ext = {"consumerGroup": group, "clientId": client_id, "msgId": msg_id, "brokerName": b.config.brokerName}
        topic = cmd.ext.get("topic") or ""
        tc = b.topics.get(topic) if topic else None
        if tc is not None:
            ext["topic"] = topic
            ext["topicSysFlag"] = str(tc.topicSysFlag)
        sg = b.groups.table.get(group)
        if sg is not None:
            ext["groupSysFlag"] = str(getattr(sg, "groupSysFlag", 0))
        return await self._forward(cmd, ch, RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, ext,
                                                                   bytes(rec)))

    # ------------------------------------------------------------------ stats

    async def view_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """VIEW_BROKER_STATS_DATA (315): one stats item's minute, hour and day snapshots."""
        b = self.ctx
        name, key = ext_str(cmd, "statsName"), ext_str(cmd, "statsKey")
        data = b.stats.stats_data(name, key, b.config.brokerClusterName) if b.stats is not None else None
        if data is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        return cmd.response(body=_j(data).encode())

    async def broker_consume_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONSUME_STATS (317): consume stats of every subscription group with offsets here
        (``isOrder``: order topics only) and the broker's total lag."""
        b = self.ctx
        order_only = ext_bool(cmd, "isOrder", False)
        store, bname, st = b.store, b.config.brokerName, b.stats
        total = 0
        groups = []
        for group in sorted(b.groups.table):
            info = b.consumers.get(group)
            stats_list = []
            for topic in sorted(b.offsets.topics_of_group(group)):
                tc = b.topics.get(topic)
                if tc is None or (order_only and not tc.order):
                    continue
                if info is not None and info.subscriptions and topic not in info.subscriptions:
                    continue
                entries = []
                for q in range(tc.writeQueueNums):
                    broker_off = max(store.get_max_offset(topic, q), 0)
                    consumer_off = max(b.offsets.query(group, topic, q), 0)
                    last = store.get_store_time(topic, q, consumer_off - 1) if consumer_off > 0 else 0
                    total += max(broker_off - consumer_off, 0)
                    entries.append(((topic, bname, q), {"brokerOffset": broker_off, "consumerOffset": consumer_off,
                                                        "lastTimestamp": max(last, 0)}))
                tps = st.group_tps(topic, group) if st is not None else 0.0
                stats_list.append('{"consumeTps":' + f"{tps:.1f}" + ',"offsetTable":' + mq_map(entries) + "}")
            groups.append("{" + _j(group) + ":[" + ",".join(stats_list) + "]}")
        body = ('{"brokerAddr":' + _j(b.broker_addr) + ',"consumeStatsList":[' + ",".join(groups)
                + f'],"totalDiff":{total},"totalInflightDiff":0}}')
        return cmd.response(body=body.encode())

    async def all_producer_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_ALL_PRODUCER_INFO (328): every producer group with its connections (ProducerTableInfo)."""
        data = {}
        to_epoch = time.time() - time.monotonic()  # heartbeats are timed on the monotonic clock; Java says epoch ms
        for group, chans in sorted(self.ctx.producers.groups.items()):
            data[group] = [{"clientId": ch.client_id, "remoteIP": "{}:{}".format(*ch.conn.remote_addr[:2]),
                            "language": ch.language, "version": ch.version,
                            "lastUpdateTimestamp": int((ch.last_update + to_epoch) * 1000)}
                           for ch in chans.values()]
        return cmd.response(body=_j({"data": data}).encode())

    async def topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_TOPIC_CONFIG (351): TopicConfigAndQueueMapping (no static-topic mapping here)."""
        topic = ext_str(cmd, "topic")
        tc = self.ctx.topics.get(topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
        return cmd.response(body=_j({**tc.to_json(), "attributes": dict(tc.attributes),
                                     "mappingDetail": None}).encode())

    async def group_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_SUBSCRIPTIONGROUP_CONFIG (352). A lookup never creates the group (RocketMQ's
        findSubscriptionGroupConfig would, with autoCreateSubscriptionGroup)."""
        sg = self.ctx.groups.table.get(ext_str(cmd, "group"))
        if sg is None:
            return cmd.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")
        return cmd.response(body=_j(sg.to_json()).encode())

    # ------------------------------------------------------------------ store maintenance

    def _capability(self, cmd: RemotingCommand, name: str) -> Any:
        fn = getattr(self.ctx.store, name, None)
        if fn is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"the store plugin in use has no {name}()")
        return fn

    async def clean_expired_cq(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """CLEAN_EXPIRED_CONSUMEQUEUE (306): drop user topics' queues whose every entry points below the
        commitlog's first byte (what retention left of them)."""
        fn = self._capability(cmd, "clean_expired_consume_queues")
        if isinstance(fn, RemotingCommand):
            return fn
        n = fn(keep=self.ctx.topics.system_topics)
        log.info("CLEAN_EXPIRED_CONSUMEQUEUE from %s: %d topics' queues removed", conn.remote_addr[0], n)
        return cmd.response()

    async def delete_expired_commitlog(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """DELETE_EXPIRED_COMMITLOG (329): a retention pass now, whatever ``deleteWhen`` says; files
        younger than ``fileReservedTime`` stay (RocketMQ's manual delete)."""
        fn = self._capability(cmd, "delete_expired_now")
        if isinstance(fn, RemotingCommand):
            return fn
        n = await fn()
        log.warning("DELETE_EXPIRED_COMMITLOG from %s: %d commitlog files deleted", conn.remote_addr[0], n)
        return cmd.response()

    async def clean_unused_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """CLEAN_UNUSED_TOPIC (316): forget the store's queues of topics the broker no longer has
        (system, retry and DLQ topics kept)."""
        fn = self._capability(cmd, "topic_queues")
        if isinstance(fn, RemotingCommand):
            return fn
        b = self.ctx
        unused = [t for t in fn() if b.topics.get(t) is None and not is_system_topic(t)
                  and t not in b.topics.system_topics and not t.startswith(("%RETRY%", "%DLQ%"))]
        if unused:
            b.store.delete_topics(unused)
        log.warning("CLEAN_UNUSED_TOPIC from %s: %d topics removed from the store", conn.remote_addr[0], len(unused))
        return cmd.response()

    async def query_consume_queue(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_CONSUME_QUEUE (321): ``count`` consume queue units from ``index`` (offset, size, tag
        hash), with the group's subscription when ``consumerGroup`` is given."""
        b = self.ctx
        topic, qid = ext_str(cmd, "topic"), ext_i32(cmd, "queueId")
        index, count = ext_int(cmd, "index"), min(max(ext_i32(cmd, "count"), 0), MAX_CQ_UNITS)
        fn = self._capability(cmd, "consume_queue_units")
        if isinstance(fn, RemotingCommand):
            return fn
        found = fn(topic, qid, index, count)
        if found is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{qid}@{topic} is not exist!")
        lo, hi, units = found
        body: dict[str, Any] = {"maxQueueIndex": hi, "minQueueIndex": lo}
        group = cmd.ext.get("consumerGroup")
        if group:
            info = b.consumers.get(group)
            sub = info.subscriptions.get(topic) if info is not None else None
            body["subscriptionData"] = sub.to_json() if sub is not None else None
            if sub is None:
                body["filterData"] = f"{group}@{topic} is not online!"
        remark = None
        if not lo <= index < hi:
            remark = f"Index {index} of {qid}@{topic} is not exist!"
        else:
            body["queueData"] = [{"physicOffset": p, "physicSize": s, "tagsCode": t} for p, s, t in units]
        return cmd.response(0, remark, body=_j(body).encode())


def _member_text(body: bytes, member: str) -> str:
    """One member of a client's JSON answer as text: fastjson's MessageQueue object keys are not JSON,
    so the member is cut out by matching braces rather than parsed and re-encoded."""
    text = body.decode("utf-8", "replace")
    at = text.find(f'"{member}":')
    if at < 0:
        return "{}"
    start = text.find("{", at)
    if start < 0:
        return "{}"
    depth, in_str, esc = 0, False, False
    for i in range(start, len(text)):
        c = text[i]
        if in_str:
            esc, in_str = (False, True) if esc else (c == "\\", c != '"')
        elif c == '"':
            in_str = True
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
    return "{}"
