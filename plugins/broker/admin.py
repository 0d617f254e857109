"""Admin and lookup processors: topics, subscription groups, stats, message query/view.

Bodies keyed by MessageQueue (202, 208) use fastjson's object-as-map-key form
(``{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}``) because Java admin tools
read exactly that.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from rmq.plugins.broker.context import TableProcessor
from rmq.plugins.broker.groups import SYSTEM_GROUPS, SubscriptionGroupConfig
from rmq.plugins.broker.stats import human_bytes
from rmq.plugins.broker.topics import MAX_QUEUE_NUMS, TopicConfig
from rmq.protocol import access
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand, ext_bool, ext_i32, ext_int, ext_str
from rmq.protocol.common import Perm
from rmq.protocol.jsonbody import loads
from rmq.protocol.message import MessageDecodeError, decode_message
from rmq.protocol.names import is_system_topic, require_group, validate_topic
from rmq.roles.runtime import persist_changes

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rmq.kernel import Connection
    from rmq.plugins.broker.context import ProcessorContext

log = logging.getLogger("rmq.broker")

_DEFAULT_QUERY_MAX = 32


def _j(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def readable_record(ctx: ProcessorContext, services: Mapping[str, Any], conn: Connection, cmd: RemotingCommand,
                    phys: int) -> bytes | RemotingCommand:
    """The stored record at ``phys`` if the caller may SUB its topic, else the answer to give (not found,
    unreadable, NO_PERMISSION): the topic is known only once read, so the ACL check comes here, before any
    byte of it leaves (view-by-id, consume-directly)."""
    rec = ctx.store.look_message_by_offset(phys)
    if rec is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {phys}")
    try:
        name = decode_message(bytes(rec), decompress=False).topic
    except MessageDecodeError as e:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"message at offset {phys} is unreadable: {e}")
    refused = access.check_after_read(services, conn.remote_addr[0], cmd, [access.read_of(name)])
    if refused is not None:
        return cmd.response(ResponseCode.NO_PERMISSION, refused)
    return bytes(rec)


def mq_map(entries: list[tuple[tuple[str, str, int], Any]]) -> str:
    """fastjson's ``Map<MessageQueue, V>``: object keys written unquoted."""
    parts = [
        "{" + f'"brokerName":{_j(b)},"queueId":{q},"topic":{_j(t)}' + "}:" + _j(v) for (t, b, q), v in entries
    ]
    return "{" + ",".join(parts) + "}"


TOPIC_ATTRIBUTES = {"message.type": ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")}


def parse_attributes(text: str, old: TopicConfig | None) -> dict[str, str]:
    """RocketMQ 5's ``attributes`` header (``+key=value,-key``, what ``mqadmin updateTopic -a`` sends)
    applied to the topic's current attributes; unknown keys and values are refused."""
    out = dict(old.attributes) if old is not None else {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        sign_, body = item[0], item[1:]
        key, eq, value = body.partition("=")
        if sign_ not in "+-" or not key:
            raise ValueError(f"attribute {item[:60]!r}: expected +key=value or -key")
        allowed = TOPIC_ATTRIBUTES.get(key)
        if allowed is None:
            raise ValueError(f"unsupported attribute key: {key[:60]} (supported: {', '.join(TOPIC_ATTRIBUTES)})")
        if sign_ == "-":
            out.pop(key, None)
        elif not eq or value.upper() not in allowed:
            raise ValueError(f"attribute {key}: value {value[:40]!r} is not one of {', '.join(allowed)}")
        else:
            out[key] = value.upper()
    return out


async def _persist_now(table: Any) -> None:
    """Write a metadata table's file off the loop, now (a change a crash must not take back)."""
    text = table.snapshot()
    if text is not None:
        try:
            await anyio.to_thread.run_sync(table.file.write, text)
        except OSError as e:
            table.dirty = True  # the periodic flush tries again
            log.error("cannot persist %s: %s", table.file.path, e)


_SECRET_WORDS = ("path", "dir", "file", "password", "secret")


def _secret_setting(name: str, value: Any, root: str) -> bool:
    """A setting a non-admin does not see: a path, a file, a secret, or anything under the store root."""
    low = name.lower()
    if any(w in low for w in _SECRET_WORDS):
        return True
    return bool(root) and isinstance(value, str) and root in value


def _prop(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


#: settings UPDATE_BROKER_CONFIG may change at run time (read where they are used, not at start)
RUNTIME_KEYS = frozenset((
    "autoCreateTopicEnable", "autoCreateSubscriptionGroup", "brokerPermission", "maxMessageSize",
    "rejectTransactionMessage", "transactionTimeOut", "transactionCheckMax", "transactionCheckInterval",
    "longPollingEnable", "shortPollingTimeMills", "slaveReadEnable", "fileReservedTime", "deleteWhen",
    "diskMaxUsedSpaceRatio", "traceOn", "defaultTopicQueueNums", "maxTransferCountOnMessageInMemory",
    "maxTransferBytesOnMessageInMemory", "storeReplyMessageEnable", "recallMessageEnable",
))


class AdminProcessor(TableProcessor):
    def requests(self) -> Iterable[tuple[int, Any, access.Access]]:
        rc = RequestCode
        # whole-broker listings stay open to any signed account, as RocketMQ 4.9 (slaves sync them)
        return (
            (rc.UPDATE_AND_CREATE_TOPIC, self.create_topic, access.ADMIN),
            (rc.DELETE_TOPIC_IN_BROKER, self.delete_topic, access.ADMIN),
            (rc.GET_ALL_TOPIC_CONFIG, self.all_topic_config, access.SIGNED),
            (rc.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self.update_group, access.ADMIN),
            (rc.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self.all_groups, access.SIGNED),
            (rc.DELETE_SUBSCRIPTIONGROUP, self.delete_group, access.ADMIN),
            (rc.GET_TOPIC_STATS_INFO, self.topic_stats, access.topic("topic", access.ANY)),
            (rc.GET_CONSUMER_CONNECTION_LIST, self.consumer_connections, access.group()),
            (rc.GET_PRODUCER_CONNECTION_LIST, self.producer_connections, access.SIGNED),  # no ACL resource
            (rc.GET_CONSUME_STATS, self.consume_stats,
             access.Access(topics=(("topic?", access.SUB),), groups=(("consumerGroup", access.SUB),))),
            (rc.GET_BROKER_RUNTIME_INFO, self.runtime_info, access.SIGNED),
            (rc.GET_BROKER_CONFIG, self.broker_config,
             access.Access(note="non-admin accounts get it without paths and secrets")),
            (rc.UPDATE_BROKER_CONFIG, self.update_broker_config, access.ADMIN),
            (rc.GET_ALL_CONSUMER_OFFSET, self.all_consumer_offsets, access.SIGNED),
            (rc.QUERY_MESSAGE, self.query_message, access.topic("topic", access.SUB)),
            (rc.VIEW_MESSAGE_BY_ID, self.view_message,
             access.Access(after_read="SUB on the topic of the message at the offset")),
        )

    # ------------------------------------------------------------------ topics

    def _user_topic(self, cmd: RemotingCommand, system_remark: str) -> str | RemotingCommand:
        """The request's topic, or the refusal for a name that is invalid or a system topic's (admins may
        not change those)."""
        topic = ext_str(cmd, "topic")
        reason = validate_topic(topic)
        if reason is not None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, reason)
        if is_system_topic(topic) or topic in self.ctx.topics.system_topics:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] {system_remark}")
        return topic  # type: ignore[no-any-return]

    async def create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        topic = self._user_topic(cmd, "is conflict with system topic.")
        if not isinstance(topic, str):
            return topic
        read = ext_i32(cmd, "readQueueNums", 16)
        write = ext_i32(cmd, "writeQueueNums", 16)
        if not (0 <= read <= MAX_QUEUE_NUMS and 0 <= write <= MAX_QUEUE_NUMS):
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                f"bad queue numbers read={read} write={write}: each must be in 0..{MAX_QUEUE_NUMS}",
            )
        perm = ext_i32(cmd, "perm", 6)
        sys_flag = ext_i32(cmd, "topicSysFlag", 0)
        if not 0 <= perm <= 15 or not 0 <= sys_flag < 1 << 31:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad perm {perm} or topicSysFlag {sys_flag}")
        filter_type = ext_str(cmd, "topicFilterType", "SINGLE_TAG") or "SINGLE_TAG"
        if filter_type not in ("SINGLE_TAG", "MULTI_TAG"):
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad topicFilterType {filter_type[:40]!r}")
        try:
            attributes = parse_attributes(cmd.ext.get("attributes") or "", b.topics.table.get(topic))
        except ValueError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        tc = TopicConfig(topic, read, write, perm, filter_type, sys_flag, ext_bool(cmd, "order", False), attributes)
        log.info("UPDATE_AND_CREATE_TOPIC %s from %s:%d", topic, *conn.remote_addr[:2])
        b.topics.update(tc)
        await _persist_now(b.topics)  # as 4.9's updateTopicConfig: persisted before the answer
        await b.register_now()
        return cmd.response()

    async def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        topic = self._user_topic(cmd, "is a system topic and cannot be deleted.")
        if not isinstance(topic, str):
            return topic
        log.info("DELETE_TOPIC_IN_BROKER %s from %s:%d", topic, *conn.remote_addr[:2])
        b.topics.delete(topic)
        b.offsets.delete_topic(topic)
        b.store.delete_topics([topic])
        await b.register_now()
        return cmd.response()

    async def all_topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_ALL_TOPIC_CONFIG (21): the whole table, or with RocketMQ 5.3's split-metadata header
        (``topicSeq``, ``maxTopicNum``, ``dataVersion``) one page of it; ``totalTopicNum`` either way.
        A slave probes one topic's page every 200 ms to learn the table's dataVersion (slavesync)."""
        topics, ext = self.ctx.topics, cmd.ext
        total = {"totalTopicNum": str(len(topics.table))}
        if ext.get("topicSeq") is None and ext.get("maxTopicNum") is None and ext.get("dataVersion") is None:
            return cmd.response(ext=total, body=topics.encode().encode())
        body = topics.page(ext_str(cmd, "dataVersion", ""), ext_i32(cmd, "topicSeq", 0),
                           ext_i32(cmd, "maxTopicNum", (1 << 31) - 1))
        return cmd.response(ext=total, body=body.encode())

    # ------------------------------------------------------------------ groups

    async def update_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            sg = SubscriptionGroupConfig.from_json(loads(cmd.body))
            require_group(sg.groupName)
        except (ValueError, TypeError, AttributeError) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad subscription group config: {e}")
        self.ctx.groups.update(sg)
        await _persist_now(self.ctx.groups)  # as 4.9: on disk before the answer
        return cmd.response()

    async def all_groups(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.ctx.groups.encode().encode())

    async def delete_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = require_group(ext_str(cmd, "groupName"))
        if group in SYSTEM_GROUPS:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"the subscription group[{group}] is a system group")
        self.ctx.groups.delete(group)
        await _persist_now(self.ctx.groups)
        if ext_bool(cmd, "removeOffset", False):
            self.ctx.offsets.delete_group(group)
        return cmd.response()

    # ------------------------------------------------------------------ stats and connections

    async def topic_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        topic = ext_str(cmd, "topic")
        tc = b.topics.readable(topic)  # a slave's held topics too: the consumer's offset lookups use this
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = b.store
        entries = []
        for q in range(tc.writeQueueNums):
            mx = store.get_max_offset(topic, q)
            last = store.get_store_time(topic, q, mx - 1) if mx > 0 else 0
            entries.append(((topic, b.config.brokerName, q), {
                "lastUpdateTimestamp": max(last, 0), "maxOffset": mx, "minOffset": store.get_min_offset(topic, q)}))
        return cmd.response(body=('{"offsetTable":' + mq_map(entries) + "}").encode())

    async def consumer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = ext_str(cmd, "consumerGroup")
        info = self.ctx.consumers.get(group)
        if info is None:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        body = {
            "connectionSet": [ch.to_json() for ch in info.channels.values()],
            "consumeFromWhere": info.consume_from_where,
            "consumeType": info.consume_type,
            "messageModel": info.message_model,
            "subscriptionTable": {t: s.to_json() for t, s in info.subscriptions.items()},
        }
        return cmd.response(body=_j(body).encode())

    async def producer_connections(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = ext_str(cmd, "producerGroup")
        chans = self.ctx.producers.groups.get(group)
        if not chans:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        return cmd.response(body=_j({"connectionSet": [ch.to_json() for ch in chans.values()]}).encode())

    async def consume_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        group = ext_str(cmd, "consumerGroup")
        topic = ext_str(cmd, "topic", "")
        topics = [topic] if topic else sorted(b.offsets.topics_of_group(group))
        store = b.store
        entries = []
        for t in topics:
            tc = b.topics.get(t)
            if tc is None:
                continue
            for q in range(tc.writeQueueNums):
                broker_off = store.get_max_offset(t, q)
                consumer_off = max(b.offsets.query(group, t, q), 0)
                last = store.get_store_time(t, q, consumer_off - 1) if consumer_off > 0 else 0
                entries.append(((t, b.config.brokerName, q), {
                    "brokerOffset": broker_off, "consumerOffset": consumer_off, "lastTimestamp": max(last, 0)}))
        st = b.stats
        tps = sum(st.group_tps(t, group) for t in topics) if st is not None else 0.0
        body = '{"consumeTps":' + f"{tps:.1f}" + ',"offsetTable":' + mq_map(entries) + "}"
        return cmd.response(body=body.encode())

    async def runtime_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        store = b.store
        table = {
            "brokerVersion": "409",
            "brokerVersionDesc": "V4_9_8 (rmq)",
            "bootTimestamp": str(b.boot_ms),
            "commitLogMaxOffset": str(store.max_phy_offset),
            "commitLogMinOffset": str(store.min_phy_offset),
            "brokerAddr": b.broker_addr,
            "topicCount": str(len(b.topics.table)),
            "consumerGroupOnline": str(len(b.consumers.groups)),
            "pullHeld": str(b.hold.held),
        }
        table.update(self._runtime_extra())
        pulls = getattr(b, "pull_processor", None)  # pulls decoded and answered per read (fastpull), not per task
        table["compiledPullRequests"] = str(pulls.fast.served if pulls is not None else 0)
        beats = getattr(b, "consumer_processor", None)  # heartbeats answered per read (fastbeat)
        table["compiledHeartbeats"] = str(beats.fast.served if beats is not None else 0)
        stats = getattr(b, "stats", None)
        if stats is not None:  # RocketMQ's keys: putTps, getTransferedTps, msgPutTotalTodayNow...
            table.update(stats.runtime())
        try:
            for k, v in (store.stats() or {}).items():
                if isinstance(v, (int, float, str, bool)):
                    table.setdefault(f"store.{k}", str(v))
        except Exception as e:  # stats are informative only
            log.debug("store stats failed: %s", e)
        table["brokerRole"] = b.config.brokerRole
        table["roleServices"] = ",".join(b.role_services)  # the rmq_role_lifespan services running now
        grpc_port = b.ports.get("grpc")
        if grpc_port:  # so another broker's gRPC endpoint routes clients here, even on a shared host
            table["grpcServerPort"] = str(grpc_port)
        if b.replicas is not None:  # controller mode
            table.update(b.replicas.stats())
        repl = b.replication
        if repl is not None:  # RocketMQ's HA keys where it has them; lists as JSON text
            for k, v in repl.stats().items():
                table.setdefault(k, v if isinstance(v, str) else _j(v))
        return cmd.response(body=_j({"table": table}).encode())

    def _runtime_extra(self) -> dict[str, str]:
        """The rest of RocketMQ's runtime keys, with this broker's analogues: no thread pools here, so the
        queue sizes are the requests in progress and the capacities RocketMQ's defaults."""
        import shutil

        b = self.ctx
        store = b.store
        earliest = 0
        rec = store.look_message_by_offset(store.min_phy_offset) if store.max_phy_offset > store.min_phy_offset else None
        if rec is not None and len(rec) >= 80:  # STORETIMESTAMP follows the born host (8 bytes, 20 for IPv6)
            at = 68 if int.from_bytes(bytes(rec[36:40]), "big") & 0x10 else 56
            earliest = int.from_bytes(bytes(rec[at:at + 8]), "big")
        try:
            usage = shutil.disk_usage(b.config.store_root())
            capacity = f"Total : {human_bytes(usage.total)}, Free : {human_bytes(usage.free)}."
        except (OSError, AttributeError):
            capacity = "Total : 0 B, Free : 0 B."
        secs = int(time.time() - b.boot_ms / 1000)
        sending = str(getattr(getattr(b, "send_processor", None), "inflight", 0))
        return {
            "brokerActive": "true",
            "runtime": f"[ {secs // 86400} days, {secs // 3600 % 24} hours, {secs // 60 % 60} minutes, {secs % 60} seconds ]",
            "earliestMessageTimeStamp": str(earliest),
            "startAcceptSendRequestTimeStamp": "0",
            "commitLogDirCapacity": capacity,
            "sendThreadPoolQueueSize": sending, "sendThreadPoolQueueCapacity": "10000",
            # pulls waiting for a worker, as RocketMQ counts them: none here (a held long poll is not
            # waiting for one, and is counted as pullHeld); clusterList shows this as the broker's load
            "pullThreadPoolQueueSize": "0", "pullThreadPoolQueueCapacity": "100000",
            "litePullThreadPoolQueueSize": "0", "litePullThreadPoolQueueCapacity": "100000",
            "queryThreadPoolQueueSize": "0", "queryThreadPoolQueueCapacity": "20000",
            "ackThreadPoolQueueSize": "0", "ackThreadPoolQueueCapacity": "100000",
            "sendThreadPoolQueueHeadWaitTimeMills": "0", "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "queryThreadPoolQueueHeadWaitTimeMills": "0", "litePullThreadPoolQueueHeadWaitTimeMills": "0",
            "ackThreadPoolQueueHeadWaitTimeMills": "0",
            "EndTransactionQueueSize": "0", "EndTransactionThreadPoolQueueCapacity": "100000",
            "putMessageEntireTimeMax": "0", "getMessageEntireTimeMax": "0",
        }

    async def broker_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CONFIG (26): every setting as Java properties text (what mqadmin getBrokerConfig prints).
        With ACL on, a non-admin account gets it without paths and secrets (issue #26: store paths and
        ``plainAclFile`` are a map for an attacker)."""
        cfg = self.ctx.config
        full = access.is_admin(self._services, conn.remote_addr[0], cmd)
        root = str(cfg.store_root())
        values = [(f.name, getattr(cfg, f.name)) for f in attrs.fields(type(cfg))]
        lines = [f"{k}={_prop(v)}" for k, v in values if full or not _secret_setting(k, v, root)]
        # RocketMQ's tools read these two (mqadmin exportConfigs fails without them): rmq runs no filter
        # servers, and its outgoing connections use TLS as RocketMQ's tlsEnable says ([tls] enable)
        tls = getattr(getattr(getattr(self.ctx, "kernel", None), "config", None), "tls", None)
        enable = tls.get("enable", False) if isinstance(tls, dict) else getattr(tls, "enable", False)
        lines += ["filterServerNums=0", f"useTLS={_prop(bool(enable))}"]
        version = _j({"counter": 1, "timestamp": self.ctx.boot_ms})
        return cmd.response(ResponseCode.SUCCESS, None, {"version": version}, "\n".join(lines).encode())

    async def update_broker_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_BROKER_CONFIG (25): Java properties text; the settings read at use take effect at once
        (RUNTIME_KEYS), any other is refused by name (it needs a restart: change the config file). As
        RocketMQ rewrites broker.properties, the keys are written into the rmqd TOML file the broker
        started from (those lines only; comments and the rest stay)."""
        b = self.ctx
        cfg = b.config
        fields = {f.name: f for f in attrs.fields(type(cfg))}
        changes: dict[str, Any] = {}
        for line in (cmd.body or b"").decode("utf-8", "replace").splitlines():
            line = line.strip()
            if not line or line[0] in "#!":
                continue
            key, sep, raw = line.partition("=")
            key, raw = key.strip(), raw.strip()
            if not sep or key not in fields:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"unknown broker setting {key[:80]!r}")
            if key not in RUNTIME_KEYS:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"{key} takes effect only at start: change it in "
                                                               "the rmqd config file and restart")
            kind = fields[key].type
            try:
                if kind in (bool, "bool"):
                    if raw.lower() not in ("true", "false"):
                        raise ValueError("expected true or false")
                    value: Any = raw.lower() == "true"
                elif kind in (int, "int"):
                    value = int(raw)
                else:
                    value = raw
            except ValueError as e:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"{key}={raw[:40]}: {e}")
            changes[key] = value
        for key, value in changes.items():
            setattr(cfg, key, value)
        if "traceOn" in changes:
            b.trace_on = "true" if cfg.traceOn else "false"  # type: ignore[misc]
        if "brokerPermission" in changes:
            b.accepts_writes = bool(cfg.brokerPermission & Perm.WRITE) and not b.is_slave  # type: ignore[misc]
            b.topics.data_version.next(int(time.time() * 1000))
            await b.register_now()
        # as RocketMQ rewrites broker.properties: the change survives a restart
        problem = await persist_changes("broker", changes, b.config_file, "UPDATE_BROKER_CONFIG", conn.remote_addr[0])
        return cmd.response(ResponseCode.SUCCESS, problem)

    async def all_consumer_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.ctx.offsets.encode().encode())

    # ------------------------------------------------------------------ message lookups

    async def query_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        b = self.ctx
        topic, key = ext_str(cmd, "topic"), ext_str(cmd, "key")
        max_num = ext_i32(cmd, "maxNum", _DEFAULT_QUERY_MAX)
        if ext_bool(cmd, "_UNIQUE_KEY_QUERY", False):
            max_num = _DEFAULT_QUERY_MAX
        begin = ext_int(cmd, "beginTimestamp", 0)
        end = ext_int(cmd, "endTimestamp", 2**62)
        found = b.store.query_by_key(topic, key, max(1, max_num), begin, end)
        stats: dict[str, Any] = {}
        try:
            stats = b.store.stats() or {}
        except Exception:
            stats = {}
        ext = {
            "indexLastUpdateTimestamp": str(stats.get("index_last_update_timestamp", 0)),
            "indexLastUpdatePhyoffset": str(stats.get("index_last_update_phyoffset", 0)),
        }
        if not found:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", ext)
        return cmd.response(ext=ext, body=b"".join(found))

    async def view_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        phys = ext_int(cmd, "offset")
        rec = readable_record(self.ctx, self._services, conn, cmd, phys)
        return rec if isinstance(rec, RemotingCommand) else cmd.response(body=rec)
