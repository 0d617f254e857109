"""Admin: topics, clusters, group progress, message lookup, offset resets.

Everything here is plain request/response against the name server and brokers,
usable from scripts (see ``rmq.client.blocking.Admin``) and tests.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import anyio
import attrs

from rmq.client.base import ClientBase
from rmq.client.errors import BadResponseError, BrokerError, ClientError, decode_records
from rmq.client.instance import parse_offset_table
from rmq.client.options import ClientOptions, build
from rmq.client.route import PERM_READ, PERM_WRITE, TopicRoute, json_int, json_object
from rmq.kernel.model import MessageQueue
from rmq.protocol import jsonbody
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingError
from rmq.protocol.message import MessageExt, decode_offset_msg_id

log = logging.getLogger("rmq.client.admin")


@attrs.frozen(slots=True)
class ClusterInfo:
    """brokers: broker name -> {broker id: addr}; clusters: cluster name -> broker names."""

    brokers: dict[str, dict[int, str]]
    clusters: dict[str, list[str]]

    def master_addrs(self, cluster: str | None = None) -> list[str]:
        names = self.clusters.get(cluster, []) if cluster else list(self.brokers)
        return [a for n in sorted(names) if (a := self.brokers.get(n, {}).get(0))]

    def members(self) -> list[tuple[str, str, int, str]]:
        """Every broker as (cluster, broker name, broker id, address), sorted: the cluster list's rows."""
        return [(cluster, name, bid, addr) for cluster, names in sorted(self.clusters.items())
                for name in sorted(names) for bid, addr in sorted(self.brokers.get(name, {}).items())]


@attrs.frozen(slots=True)
class QueueProgress:
    queue: MessageQueue
    committed: int  # -1: the group never committed on this queue
    max_offset: int
    last_timestamp: int = 0

    @property
    def lag(self) -> int:
        return max(0, self.max_offset - max(self.committed, 0))


@attrs.frozen(slots=True)
class TopicQueueStats:
    queue: MessageQueue
    min_offset: int
    max_offset: int
    last_update_timestamp: int = 0


class Admin(ClientBase):
    """``Admin(namesrv_addr)``: ``async with Admin("127.0.0.1:9876") as admin: await admin.create_topic("T")``."""

    def __init__(self, namesrv_addr: str | list[str] | None = None, *, kernel: Any = None, **options: Any) -> None:
        self._options = build(ClientOptions, options, "Admin")
        super().__init__(namesrv_addr, self._options, kernel)

    # ------------------------------------------------------------------ cluster and topics
    async def cluster_info(self) -> ClusterInfo:
        self._check_running()
        resp = await self.instance.invoke_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark, "cluster info", "namesrv")
        doc = json_object(resp.body, "cluster info")
        try:
            brokers = {
                str(name): {
                    json_int(k, "broker id", -(1 << 63), (1 << 63) - 1): str(v)
                    for k, v in (bd.get("brokerAddrs") or {}).items()
                }
                for name, bd in (doc.get("brokerAddrTable") or {}).items()
            }
            clusters = {str(c): sorted(map(str, names)) for c, names in (doc.get("clusterAddrTable") or {}).items()}
        except (AttributeError, TypeError) as exc:  # a list where an object belongs, or the reverse
            raise BadResponseError(f"cluster info has an unexpected shape: {exc}") from None
        for name, addrs in brokers.items():
            self.instance.brokers.setdefault(name, addrs)
        return ClusterInfo(brokers, clusters)

    async def broker_runtime_info(self, broker_addr: str) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO of one broker: offsets, store figures, and replication
        (``brokerRole``, ``haConnectionCount``, ``slaveAckOffset``, ``slaveFallBehindMuch``, ``haSlaves``
        as JSON text on a master; ``masterAddr``, ``masterConnected`` on a slave)."""
        self._check_running()
        resp = await self.instance.invoke(broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO, what="broker runtime info")
        table = json_object(resp.body, "broker runtime info").get("table")
        if type(table) is not dict:
            raise BadResponseError("broker runtime info has no table")
        return {str(k): str(v) for k, v in table.items()}

    # ------------------------------------------------------------------ controller mode (RocketMQ 5)

    async def controller_metadata(self, controller_addr: str) -> dict[str, str]:
        """CONTROLLER_GET_METADATA_INFO of one controller node: ``group``, ``controllerLeaderId``,
        ``controllerLeaderAddress``, ``isLeader``, ``peers``."""
        self._check_running()
        resp = await self.instance.invoke(controller_addr, RequestCode.CONTROLLER_GET_METADATA_INFO,
                                          what="controller metadata")
        return dict(resp.ext)

    async def _controller_leader(self, controller_addr: str) -> str:
        meta = await self.controller_metadata(controller_addr)
        leader = meta.get("controllerLeaderAddress") or ""
        if not leader:
            raise ClientError(f"controller {controller_addr} knows no leader (no majority of controllers?)")
        return leader

    async def sync_state_data(self, controller_addr: str, broker_names: list[str]) -> dict[str, Any]:
        """CONTROLLER_GET_SYNC_STATE_DATA from the leader: per broker name, the master, epochs, and the
        in-sync and other replicas (with ``alive``)."""
        leader = await self._controller_leader(controller_addr)
        resp = await self.instance.invoke(leader, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA,
                                          body=json.dumps(broker_names).encode(), what="sync state data")
        table = json_object(resp.body, "sync state data").get("replicasInfoTable")
        if type(table) is not dict:
            raise BadResponseError("sync state data has no replicasInfoTable")
        return table

    async def replica_info(self, controller_addr: str, broker_name: str) -> dict[str, Any]:
        """CONTROLLER_GET_REPLICA_INFO: the master (id and address when alive), master epoch and SyncStateSet."""
        leader = await self._controller_leader(controller_addr)
        resp = await self.instance.invoke(leader, RequestCode.CONTROLLER_GET_REPLICA_INFO,
                                          {"brokerName": broker_name}, what=f"replica info of {broker_name}")
        out: dict[str, Any] = dict(resp.ext)
        out.update(json_object(resp.body or b"{}", "replica info"))
        return out

    async def elect_master(self, controller_addr: str, cluster: str, broker_name: str, broker_id: int) -> dict[str, str]:
        """CONTROLLER_ELECT_MASTER for a manual switch (designateElect): ``broker_id`` becomes master if it
        is alive and in the SyncStateSet; the answer names the master and the new epoch."""
        leader = await self._controller_leader(controller_addr)
        resp = await self.instance.invoke(
            leader, RequestCode.CONTROLLER_ELECT_MASTER,
            {"clusterName": cluster, "brokerName": broker_name, "brokerId": str(broker_id), "designateElect": "true",
             "invokeTime": str(int(time.time() * 1000))},
            ok=(ResponseCode.SUCCESS, ResponseCode.CONTROLLER_MASTER_STILL_EXIST), what=f"elect master of {broker_name}")
        return dict(resp.ext)

    async def list_topics(self) -> list[str]:
        self._check_running()
        resp = await self.instance.invoke_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark, "topic list", "namesrv")
        topics = json_object(resp.body, "topic list").get("topicList") or []
        if type(topics) is not list or not all(type(t) is str for t in topics):
            raise BadResponseError("topicList is not a list of strings")
        return sorted(topics)

    async def topic_route(self, topic: str) -> TopicRoute:
        self._check_running()
        return await self.instance.route(topic, refresh=True)

    async def create_topic(
        self,
        topic: str,
        queue_nums: int = 8,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int = PERM_READ | PERM_WRITE,
        order: bool = False,
        cluster: str | None = None,
        broker_addr: str | None = None,
        wait: float = 5.0,
    ) -> None:
        """Create or update ``topic`` on every master of ``cluster`` (or all, or one broker).

        Waits up to ``wait`` seconds for the name server to publish the route, so a
        producer or consumer started right after finds it.
        """
        self._check_running()
        ext = {
            "topic": topic,
            "defaultTopic": "TBW102",
            "readQueueNums": str(read_queue_nums or queue_nums),
            "writeQueueNums": str(write_queue_nums or queue_nums),
            "perm": str(perm),
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "true" if order else "false",
        }
        addrs = await self.masters(cluster, broker_addr)
        if not addrs:
            raise ClientError(f"no master broker found{' in cluster ' + cluster if cluster else ''}")
        for addr in addrs:
            await self.instance.invoke(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext, what=f"create topic {topic}")
        deadline = time.monotonic() + wait
        want = read_queue_nums or queue_nums
        while True:
            try:
                route = await self.instance.fetch_route(topic)
            except (ClientError, RemotingError):
                route = None
            if route is not None and route.queue_datas and all(
                q.read_queue_nums == want for q in route.queue_datas
            ):
                return
            if time.monotonic() >= deadline:
                log.info("route of %s not (yet) published by the name server", topic)
                return
            await anyio.sleep(0.1)

    async def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """Delete on the brokers, then on the name servers."""
        self._check_running()
        info = await self.cluster_info()
        for addr in info.master_addrs(cluster):
            await self.instance.invoke(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic},
                                       what=f"delete topic {topic}")
        ext = {"topic": topic}
        if cluster:
            ext["clusterName"] = cluster
        for ns in self.instance.namesrv_addrs:
            try:
                await self.instance.invoke(ns, RequestCode.DELETE_TOPIC_IN_NAMESRV, ext, what="delete topic")
            except (ClientError, RemotingError) as exc:
                log.warning("delete of %s on name server %s failed: %s", topic, ns, exc)
        self.instance.routes.pop(topic, None)

    async def topic_stats(self, topic: str) -> list[TopicQueueStats]:
        """Min/max offset per queue (GET_TOPIC_STATS_INFO, or per-queue offset calls)."""
        self._check_running()
        route = await self.instance.route(topic, refresh=True)
        out: list[TopicQueueStats] = []
        for bd in route.broker_datas:
            addr = bd.master_addr or bd.any_addr()
            if addr is None:
                continue
            try:
                resp = await self.instance.invoke(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
                for mq, stats in _parse_mq_objects(resp.body).items():
                    out.append(TopicQueueStats(mq, _long(stats, "minOffset", 0), _long(stats, "maxOffset", 0),
                                               _long(stats, "lastUpdateTimestamp", 0)))
                continue
            except BrokerError as exc:
                if not _answer_by_queue(exc):
                    raise
            for mq in route.subscribe_queues(topic):
                if mq.broker_name == bd.broker_name:
                    out.append(TopicQueueStats(mq, await self.instance.min_offset(mq),
                                               await self.instance.max_offset(mq)))
        return sorted(out, key=lambda s: s.queue)

    # ------------------------------------------------------------------ groups
    async def consumer_progress(self, group: str, topic: str | None = None) -> list[QueueProgress]:
        """Committed offset, max offset and lag per queue for ``group``.

        Uses GET_CONSUME_STATS; with ``topic`` given and a broker lacking it, falls back
        to QUERY_CONSUMER_OFFSET + GET_MAX_OFFSET per queue.
        """
        self._check_running()
        inst = self.instance
        out: list[QueueProgress] = []
        if topic is not None:
            route = await inst.route(topic, refresh=True)
            addrs = [(bd.broker_name, bd.master_addr or bd.any_addr()) for bd in route.broker_datas]
        else:
            info = await self.cluster_info()
            addrs = [(n, a.get(0)) for n, a in sorted(info.brokers.items())]
        for broker, addr in addrs:
            if addr is None:
                continue
            ext = {"consumerGroup": group}
            if topic:
                ext["topic"] = topic
            try:
                resp = await inst.invoke(addr, RequestCode.GET_CONSUME_STATS, ext, what="consume stats")
                for mq, st in _parse_mq_objects(resp.body).items():
                    out.append(QueueProgress(mq, _long(st, "consumerOffset", -1), _long(st, "brokerOffset", 0),
                                             _long(st, "lastTimestamp", 0)))
                continue
            except BrokerError as exc:
                if exc.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and topic is None:
                    raise ClientError(f"broker {broker} has no GET_CONSUME_STATS; pass topic=") from exc
                if exc.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                    if exc.code in (ResponseCode.SYSTEM_ERROR, ResponseCode.CONSUMER_NOT_ONLINE):
                        continue  # this broker knows nothing of the group
                    raise
            assert topic is not None
            for mq in (await inst.route(topic)).subscribe_queues(topic):
                if mq.broker_name != broker:
                    continue
                committed = await inst.query_consumer_offset(group, mq)
                out.append(QueueProgress(mq, -1 if committed is None else committed, await inst.max_offset(mq)))
        return sorted(out, key=lambda p: p.queue)

    async def consumer_lag(self, group: str, topic: str | None = None) -> int:
        return sum(p.lag for p in await self.consumer_progress(group, topic))

    async def consumer_ids(self, group: str, topic: str) -> list[str]:
        self._check_running()
        return await self.instance.consumer_ids(group, topic)

    async def reset_offset_by_timestamp(
        self, group: str, topic: str, timestamp_ms: int, *, force: bool = True
    ) -> dict[MessageQueue, int]:
        """Move ``group`` on ``topic`` back (or forward) to ``timestamp_ms``.

        Asks each broker to reset and notify online consumers
        (INVOKE_BROKER_TO_RESET_OFFSET); where a broker lacks that, the offsets are
        searched and committed directly (takes effect for consumers that (re)start).
        """
        self._check_running()
        inst = self.instance
        route = await inst.route(topic, refresh=True)
        result: dict[MessageQueue, int] = {}
        for bd in route.broker_datas:
            addr = bd.master_addr
            if addr is None:
                continue
            ext = {"topic": topic, "group": group, "timestamp": str(int(timestamp_ms)),
                   "isForce": "true" if force else "false"}
            try:
                resp = await inst.invoke(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext, timeout=10.0,
                                         what="reset offset")
                result.update(parse_offset_table(resp.body) if resp.body else {})
                continue
            except BrokerError as exc:
                if not _answer_by_queue(exc):
                    raise
            for mq in route.subscribe_queues(topic):
                if mq.broker_name != bd.broker_name:
                    continue
                off = await (inst.max_offset(mq) if timestamp_ms == -1 else inst.search_offset(mq, int(timestamp_ms)))
                if not force:
                    cur = await inst.query_consumer_offset(group, mq)
                    if cur is not None and cur < off:
                        continue
                await inst.update_consumer_offset(group, mq, off, oneway=False)
                result[mq] = off
        return result

    # ------------------------------------------------------------------ messages
    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """The message at an offset id (the broker address is inside the id)."""
        self._check_running()
        ip, port, offset = decode_offset_msg_id(offset_msg_id)
        resp = await self.instance.invoke(f"{ip}:{port}", RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)},
                                          what="view message")
        msgs = decode_records(resp.body, "view message")
        if not msgs:
            raise ClientError(f"no message at {offset_msg_id}")
        return msgs[0]

    async def query_message(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = 32,
        begin_ms: int = 0,
        end_ms: int | None = None,
        unique_key: bool = False,
    ) -> list[MessageExt]:
        """Messages of ``topic`` indexed under ``key`` (one of their KEYS, or their UNIQ_KEY)."""
        self._check_running()
        inst = self.instance
        route = await inst.route(topic, refresh=True)
        ext = {
            "topic": topic,
            "key": key,
            "maxNum": str(max_num),
            "beginTimestamp": str(begin_ms),
            "endTimestamp": str(end_ms if end_ms is not None else int(time.time() * 1000) + 60_000),
        }
        if unique_key:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        out: list[MessageExt] = []
        for bd in route.broker_datas:
            addr = bd.master_addr or bd.any_addr()
            if addr is None:
                continue
            resp = await inst.invoke(addr, RequestCode.QUERY_MESSAGE, ext,
                                     ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND), what="query message")
            if resp.code == ResponseCode.SUCCESS and resp.body:
                for m in decode_records(resp.body, "query message"):
                    if m.topic != topic:
                        continue
                    if unique_key and m.msg_id != key:
                        continue
                    if not unique_key and key not in (m.keys or "").split(" "):
                        continue
                    out.append(m)
        out.sort(key=lambda m: m.store_timestamp)
        return out[:max_num] if not unique_key else out

    async def query_message_by_id(self, topic: str, msg_id: str) -> MessageExt:
        """By client id (UNIQ_KEY, what ``SendResult.msg_id`` holds) or offset id."""
        if len(msg_id) in (32, 56):
            found = await self.query_message(topic, msg_id, unique_key=True)
            if found:
                return found[0]
            try:
                return await self.view_message(msg_id)
            except (ClientError, RemotingError, ValueError):
                pass
        raise ClientError(f"message {msg_id} not found in {topic!r}")


    # ------------------------------------------------------------------ operators' requests (mqadmin)
    async def _doc(self, addr: str, code: int, ext: dict[str, str] | None = None, what: str = "",
                   body: bytes | None = None) -> Any:
        """A broker or namesrv request whose answer body is a JSON document (fastjson keys allowed)."""
        self._check_running()
        resp = await self.instance.invoke(addr, code, ext or {}, body or b"", what=what or f"request {code}")
        return jsonbody.loads(resp.body) if resp.body else None

    async def masters(self, cluster: str | None = None, broker_addr: str | None = None) -> list[str]:
        """``[broker_addr]`` when given, else the master brokers of ``cluster`` (of every cluster when None)."""
        if broker_addr:
            return [broker_addr]
        return (await self.cluster_info()).master_addrs(cluster)

    async def _topic_masters(self, topic: str) -> list[str]:
        route = await self.instance.route(topic, refresh=True)
        return [a for bd in route.broker_datas if (a := bd.master_addr)]

    async def clone_group_offset(self, src_group: str, dest_group: str, topic: str | None = None,
                                 offline: bool = False) -> list[str]:
        """CLONE_GROUP_OFFSET on every master holding ``topic`` (every master when None)."""
        addrs = await self._topic_masters(topic) if topic else await self.masters(None, None)
        ext = {"srcGroup": src_group, "destGroup": dest_group, "topic": topic or "",
               "offline": "true" if offline else "false"}
        for addr in addrs:
            await self._doc(addr, RequestCode.CLONE_GROUP_OFFSET, ext, "clone group offset")
        return addrs

    async def consumer_connection(self, group: str, broker_addr: str | None = None) -> dict[str, Any]:
        """GET_CONSUMER_CONNECTION_LIST: members, their clients, subscriptions (the first broker that knows)."""
        return await self._first_doc(await self.masters(None, broker_addr), RequestCode.GET_CONSUMER_CONNECTION_LIST,
                                     {"consumerGroup": group}, "consumer connection",
                                     f"the consumer group[{group}] not online")

    async def producer_connection(self, group: str, topic: str) -> dict[str, Any]:
        return await self._first_doc(await self._topic_masters(topic), RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                     {"producerGroup": group}, "producer connection",
                                     f"the producer group[{group}] not online")

    async def _first_doc(self, addrs: list[str], code: int, ext: dict[str, str], what: str, nobody: str) -> Any:
        """The answer of the first of ``addrs`` that knows (a member is connected to some brokers only);
        else the last refusal, or ClientError(``nobody``) when there was no broker to ask."""
        last: Exception | None = None
        for addr in addrs:
            try:
                return await self._doc(addr, code, ext, what)
            except BrokerError as e:
                last = e
        raise last or ClientError(nobody)

    async def consumer_running_info(self, group: str, client_id: str, jstack: bool = False) -> dict[str, Any]:
        """GET_CONSUMER_RUNNING_INFO, forwarded by a broker the member is connected to."""
        last: Exception | None = None
        for addr in await self.masters(None, None):
            try:
                return await self._doc(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, {
                    "consumerGroup": group, "clientId": client_id, "jstackEnable": "true" if jstack else "false"},
                    "consumer running info")
            except BrokerError as e:
                last = e
        raise last or ClientError(f"the consumer {client_id} of {group} is not online")

    async def consumer_status(self, group: str, topic: str, client_id: str = "") -> dict[str, dict[MessageQueue, int]]:
        """INVOKE_BROKER_TO_GET_CONSUMER_STATUS: each member's own offsets on ``topic``."""
        out: dict[str, dict[MessageQueue, int]] = {}
        for addr in await self._topic_masters(topic):
            self._check_running()
            resp = await self.instance.invoke(addr, RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {
                "topic": topic, "group": group, "clientAddr": client_id}, what="consumer status")
            text = (resp.body or b"").decode("utf-8", "replace")
            for cid, table in _split_client_tables(text).items():
                out.setdefault(cid, {}).update(parse_offset_table(('{"offsetTable":' + table + "}").encode()))
        return out

    async def consume_message_directly(self, group: str, client_id: str, msg_id: str,
                                       topic: str | None = None) -> dict[str, Any]:
        """CONSUME_MESSAGE_DIRECTLY: the stored message (offset msgId) given to one member's listener."""
        ip, port, _ = decode_offset_msg_id(msg_id)
        return await self._doc(f"{ip}:{port}", RequestCode.CONSUME_MESSAGE_DIRECTLY, {
            "consumerGroup": group, "clientId": client_id, "msgId": msg_id, "topic": topic or ""},
            "consume message directly")

    async def topic_consumed_by(self, topic: str) -> list[str]:
        groups: set[str] = set()
        for addr in await self._topic_masters(topic):
            doc = await self._doc(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}, "consumed by")
            groups.update((doc or {}).get("groupList") or [])
        return sorted(groups)

    async def consume_time_span(self, topic: str, group: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for addr in await self._topic_masters(topic):
            doc = await self._doc(addr, RequestCode.QUERY_CONSUME_TIME_SPAN, {"topic": topic, "group": group},
                                  "consume time span")
            out += (doc or {}).get("consumeTimeSpanSet") or []
        return out

    async def broker_consume_stats(self, broker_addr: str, order_only: bool = False) -> dict[str, Any]:
        """GET_BROKER_CONSUME_STATS: ``{"totalDiff": n, "groups": {group: {MessageQueue: OffsetWrapper}}}``."""
        import re

        self._check_running()
        resp = await self.instance.invoke(broker_addr, RequestCode.GET_BROKER_CONSUME_STATS,
                                          {"isOrder": "true" if order_only else "false"}, what="broker consume stats")
        text = (resp.body or b"{}").decode("utf-8", "replace")
        starts = [(m.start(), json.loads(f'"{m.group(1)}"')) for m in re.finditer(r'\{"((?:[^"\\]|\\.)*)":\[', text)]
        groups: dict[str, dict[MessageQueue, dict[str, Any]]] = {}
        for k, (at, group) in enumerate(starts):
            end = starts[k + 1][0] if k + 1 < len(starts) else len(text)
            groups[group] = _parse_mq_objects(text[at:end].encode())
        total = re.search(r'"totalDiff":(-?\d+)', text)
        return {"brokerAddr": broker_addr, "totalDiff": int(total.group(1)) if total else 0, "groups": groups}

    async def view_broker_stats(self, broker_addr: str, stats_name: str, stats_key: str) -> dict[str, Any]:
        return await self._doc(broker_addr, RequestCode.VIEW_BROKER_STATS_DATA,
                               {"statsName": stats_name, "statsKey": stats_key}, "broker stats")

    async def query_consume_queue(self, broker_addr: str, topic: str, queue_id: int, index: int, count: int,
                                  group: str | None = None) -> dict[str, Any]:
        ext = {"topic": topic, "queueId": str(queue_id), "index": str(index), "count": str(count)}
        if group:
            ext["consumerGroup"] = group
        return await self._doc(broker_addr, RequestCode.QUERY_CONSUME_QUEUE, ext, "query consume queue")

    async def all_producer_info(self, broker_addr: str) -> dict[str, Any]:
        return (await self._doc(broker_addr, RequestCode.GET_ALL_PRODUCER_INFO, {}, "producer info") or {}).get(
            "data") or {}

    async def topic_config(self, broker_addr: str, topic: str) -> dict[str, Any]:
        return await self._doc(broker_addr, RequestCode.GET_TOPIC_CONFIG, {"topic": topic}, "topic config")

    async def group_config(self, broker_addr: str, group: str) -> dict[str, Any]:
        return await self._doc(broker_addr, RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": group},
                               "subscription group config")

    async def system_topics_of_broker(self, broker_addr: str) -> list[str]:
        doc = await self._doc(broker_addr, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER, {}, "system topics")
        return list((doc or {}).get("topicList") or [])

    async def broker_maintenance(self, code: int, cluster: str | None = None,
                                 broker_addr: str | None = None) -> list[str]:
        """CLEAN_EXPIRED_CONSUMEQUEUE / DELETE_EXPIRED_COMMITLOG / CLEAN_UNUSED_TOPIC on brokers."""
        addrs = await self.masters(cluster, broker_addr)
        for addr in addrs:
            await self._doc(addr, code, {}, RequestCode(code).name)
        return addrs

    async def namesrv_config(self) -> dict[str, dict[str, str]]:
        """GET_NAMESRV_CONFIG of every configured name server: {addr: {key: value}}."""
        out = {}
        for addr in self.instance.namesrv_addrs:
            self._check_running()
            resp = await self.instance.invoke(addr, RequestCode.GET_NAMESRV_CONFIG, {}, what="namesrv config")
            text = (resp.body or b"").decode("utf-8", "replace")
            out[addr] = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln)
        return out

    async def update_namesrv_config(self, key: str, value: str) -> list[str]:
        addrs = list(self.instance.namesrv_addrs)
        for addr in addrs:
            self._check_running()
            await self.instance.invoke(addr, RequestCode.UPDATE_NAMESRV_CONFIG, {}, f"{key}={value}".encode(),
                                       what=f"updateNamesrvConfig {key}")
        return addrs

    async def put_kv_config(self, namespace: str, key: str, value: str) -> None:
        for addr in self.instance.namesrv_addrs:
            self._check_running()
            await self.instance.invoke(addr, RequestCode.PUT_KV_CONFIG,
                                       {"namespace": namespace, "key": key, "value": value}, what="put kv config")

    async def delete_kv_config(self, namespace: str, key: str) -> None:
        for addr in self.instance.namesrv_addrs:
            self._check_running()
            await self.instance.invoke(addr, RequestCode.DELETE_KV_CONFIG, {"namespace": namespace, "key": key},
                                       what="delete kv config")


def _split_client_tables(text: str) -> dict[str, str]:
    """``{"consumerTable":{"<clientId>":{<mq>:offset,...},...}}`` -> {clientId: "{...}"} (fastjson keys kept)."""
    out: dict[str, str] = {}
    at = text.find('"consumerTable"')
    i = text.find("{", at) + 1 if at >= 0 else len(text)
    while i < len(text):
        q = text.find('"', i)
        if q < 0:
            break
        end = text.find('"', q + 1)
        start = text.find("{", end)
        if end < 0 or start < 0:
            break
        depth, j = 0, start
        while j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        out[text[q + 1:end]] = text[start:j + 1]
        i = j + 1
        nxt = text.find(",", i)
        if nxt < 0 or text.find("}", i) < nxt:
            break
        i = nxt + 1
    return out


def _answer_by_queue(exc: BrokerError) -> bool:
    """The broker cannot answer for the whole topic (no member online, no offsets yet, an old broker):
    the caller asks queue by queue instead. False: a real refusal, raised."""
    never = exc.code == ResponseCode.SYSTEM_ERROR and "not exist" in (exc.remark or "")
    return never or exc.code in (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, ResponseCode.CONSUMER_NOT_ONLINE)


def _long(stats: dict[str, Any], key: str, default: int) -> int:
    return json_int(stats.get(key, default), key, -(1 << 63), (1 << 63) - 1)


def _parse_mq_objects(body: bytes) -> dict[MessageQueue, dict[str, Any]]:
    """``{"offsetTable":{<MessageQueue as key>:{...}}}`` (fastjson form) -> {mq: stats dict}.

    Entries that are not well-formed (bad JSON, a queue id beyond a Java int) are skipped.
    """
    import re

    if not body:
        return {}
    text = body.decode("utf-8", "replace")
    out: dict[MessageQueue, dict[str, Any]] = {}
    pattern = re.compile(r'\{([^{}]*"queueId"[^{}]*)\}\s*:\s*(\{[^{}]*\})')
    field = re.compile(r'"(brokerName|queueId|topic)"\s*:\s*(?:"([^"]*)"|(-?\d+))')
    for m in pattern.finditer(text):
        f = {k: (num if num else s) for k, s, num in field.findall(m.group(1))}
        if len(f) != 3:
            continue
        try:
            stats = jsonbody.loads(m.group(2))
            qid = json_int(f["queueId"], "queueId")
        except ValueError:
            continue
        if type(stats) is dict:
            out[MessageQueue(f["topic"], f["brokerName"], qid)] = stats
    return out
