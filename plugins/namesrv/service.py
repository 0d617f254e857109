"""The NameServer role: request processors over the route table and the KV store."""

from __future__ import annotations

import logging
import struct
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import attrs

from rmq.kernel import RateLimitedLog
from rmq.plugins.namesrv.kvconfig import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfigManager
from rmq.plugins.namesrv.routes import (
    PERM_READ,
    PERM_WRITE,
    DataVersion,
    RouteInfoManager,
    decode_register_body,
    dumps,
)
from rmq.protocol.access import ADMIN, ANY, SIGNED, topic
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand, ext_bool, ext_i32, ext_int, ext_str
from rmq.protocol.jsonbody import loads
from rmq.protocol.names import printable, validate_topic
from rmq.roles.runtime import persist_changes

if TYPE_CHECKING:
    from rmq.kernel import Connection, ProcessorRegistry, RemotingServer
    from rmq.roles import NamesrvConfig

log = logging.getLogger("rmq.namesrv")

FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."
_WATCHED = "namesrv.watched"
_refusals = RateLimitedLog(log)
#: settings UPDATE_NAMESRV_CONFIG may change while running (read where they are used)
NAMESRV_RUNTIME_KEYS = frozenset(("orderMessageEnable", "brokerChannelExpiredTime", "scanNotActiveBrokerInterval"))


def _addr_problem(addr: str) -> str | None:
    """None for a plausible ``host:port`` (what brokers register), else why not."""
    host, sep, port = addr.rpartition(":")
    if not sep or not host or len(addr) > 255 or not port.isdigit() or int(port) > 65535:
        return f"address {printable(addr, 80)} is not host:port"
    if not host.isprintable() or " " in host:
        return f"address {printable(addr, 80)} has an unprintable host"
    return None


class NamesrvService:
    """State and handlers of one NameServer; ``run_scanner`` expires silent brokers."""

    def __init__(self, config: NamesrvConfig, home: Path | None = None) -> None:
        self.config = config
        self.routes = RouteInfoManager()
        self.kv = KVConfigManager(config.kv_config_path(home))
        self.kv.load()
        self.server: RemotingServer | None = None
        self.config_file = ""  # the rmqd TOML file (UPDATE_NAMESRV_CONFIG writes changes back to it)

    def register(self, registry: ProcessorRegistry, owner: str) -> None:
        rc = RequestCode
        # RocketMQ's name server checks no ACL; the table still says what each code touches: writes are
        # an operator's or a cluster member's (REGISTER/UNREGISTER_BROKER come from brokers), reads are open
        for code, proc, acc in (
            (rc.PUT_KV_CONFIG, self.put_kv_config, ADMIN),
            (rc.GET_KV_CONFIG, self.get_kv_config, SIGNED),
            (rc.DELETE_KV_CONFIG, self.delete_kv_config, ADMIN),
            (rc.GET_KVLIST_BY_NAMESPACE, self.get_kv_list, SIGNED),
            (rc.REGISTER_BROKER, self.register_broker, ADMIN),
            (rc.UNREGISTER_BROKER, self.unregister_broker, ADMIN),
            (rc.GET_ROUTEINFO_BY_TOPIC, self.get_route, topic("topic", ANY)),
            (rc.GET_BROKER_CLUSTER_INFO, self.get_cluster_info, SIGNED),
            (rc.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.get_all_topics, SIGNED),
            (rc.GET_TOPICS_BY_CLUSTER, self.get_topics_by_cluster, SIGNED),
            (rc.GET_SYSTEM_TOPIC_LIST_FROM_NS, self.get_system_topics, SIGNED),
            (rc.DELETE_TOPIC_IN_NAMESRV, self.delete_topic, ADMIN),
            (rc.QUERY_DATA_VERSION, self.query_data_version, SIGNED),
            (rc.WIPE_WRITE_PERM_OF_BROKER, self.wipe_write_perm, ADMIN),
            (rc.ADD_WRITE_PERM_OF_BROKER, self.add_write_perm, ADMIN),
            (rc.GET_NAMESRV_CONFIG, self.get_config, SIGNED),
            (rc.UPDATE_NAMESRV_CONFIG, self.update_config, ADMIN),
        ):
            registry.register(code, proc, owner=owner, access=acc)

    async def run_scanner(self) -> None:
        """Drop brokers silent for brokerChannelExpiredTime; first scan after 5 s, then every interval."""
        first = min(5.0, self.config.scanNotActiveBrokerInterval / 1000)
        await anyio.sleep(first)
        while True:
            dead = self.routes.scan_not_active(time.monotonic(), self.config.brokerChannelExpiredTime / 1000)
            for addr in dead:
                log.warning("broker %s expired after %d ms without registration", addr,
                            self.config.brokerChannelExpiredTime)
            await anyio.sleep(self.config.scanNotActiveBrokerInterval / 1000)

    def _on_close(self, conn: Connection) -> None:
        self.routes.on_connection_closed(conn)

    # ------------------------------------------------------------------ KV config

    async def get_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_NAMESRV_CONFIG (319): every setting as Java properties text (mqadmin getNamesrvConfig)."""
        cfg = self.config
        lines = []
        for f in attrs.fields(type(cfg)):
            v = getattr(cfg, f.name)
            lines.append(f"{f.name}={('true' if v else 'false') if isinstance(v, bool) else v}")
        return cmd.response(body="\n".join(lines).encode())

    async def update_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_NAMESRV_CONFIG (318): properties text; only settings read at use change (others need
        a restart and are refused by name, as kvConfigPath is in RocketMQ's black list); written back
        into the rmqd TOML file's [namesrv] table."""
        cfg = self.config
        kinds = {f.name: f.type for f in attrs.fields(type(cfg))}
        changes: dict[str, object] = {}
        for line in (cmd.body or b"").decode("utf-8", "replace").splitlines():
            key, sep, raw = (x.strip() for x in line.partition("="))
            if not key or key[0] in "#!":
                continue
            if not sep or key not in kinds:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"unknown namesrv setting {printable(key, 80)}")
            if key not in NAMESRV_RUNTIME_KEYS:
                return cmd.response(ResponseCode.SYSTEM_ERROR, f"{key} takes effect only at start: change it in "
                                                               "the rmqd config file and restart")
            if kinds[key] in (bool, "bool"):
                if raw.lower() not in ("true", "false"):
                    return cmd.response(ResponseCode.SYSTEM_ERROR, f"{key}={printable(raw, 40)}: expected true or false")
                changes[key] = raw.lower() == "true"
            else:
                try:
                    changes[key] = int(raw)
                except ValueError:
                    return cmd.response(ResponseCode.SYSTEM_ERROR, f"{key}={printable(raw, 40)}: expected a number")
                if changes[key] <= 0:  # type: ignore[operator]
                    return cmd.response(ResponseCode.SYSTEM_ERROR, f"{key} must be positive")
        for key, value in changes.items():
            setattr(cfg, key, value)
        # as RocketMQ persists namesrv.properties
        problem = await persist_changes("namesrv", changes, self.config_file, "UPDATE_NAMESRV_CONFIG",
                                        conn.remote_addr[0])
        return cmd.response(ResponseCode.SUCCESS, problem)

    async def put_kv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.kv.put(ext_str(cmd, "namespace"), ext_str(cmd, "key"), ext_str(cmd, "value"))
        return cmd.response()

    async def get_kv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ns, key = ext_str(cmd, "namespace"), ext_str(cmd, "key")
        value = self.kv.get(ns, key)
        if value is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}")
        return cmd.response(ext={"value": value})

    async def delete_kv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.kv.delete(ext_str(cmd, "namespace"), ext_str(cmd, "key"))
        return cmd.response()

    async def get_kv_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        ns = ext_str(cmd, "namespace")
        table = self.kv.namespace(ns)
        if table is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")
        return cmd.response(body=dumps({"table": table}))

    # ------------------------------------------------------------------ brokers

    async def register_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        crc = ext_i32(cmd, "bodyCrc32", 0)
        if crc and cmd.body and (zlib.crc32(cmd.body) & 0x7FFFFFFF) != crc:
            log.warning("register from %s:%d rejected: body crc32 mismatch", *conn.remote_addr[:2])
            return cmd.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        cluster, broker_addr = ext_str(cmd, "clusterName"), ext_str(cmd, "brokerAddr")
        broker_name, broker_id = ext_str(cmd, "brokerName"), ext_int(cmd, "brokerId")
        ha_addr = ext_str(cmd, "haServerAddr", "")
        problem = (validate_topic(cluster) or validate_topic(broker_name) or _addr_problem(broker_addr)
                   or (ha_addr and _addr_problem(ha_addr)) or (None if 0 <= broker_id < 1 << 63 else "bad brokerId"))
        if problem:
            _refusals.warning("register", "register from %s:%d rejected: %s", *conn.remote_addr[:2], problem)
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad register request: {problem}")
        try:
            body = decode_register_body(cmd.body, ext_bool(cmd, "compressed", False))
        except (ValueError, TypeError, zlib.error, struct.error, UnicodeDecodeError) as e:
            _refusals.warning("register", "register from %s:%d rejected: undecodable body: %s",
                              *conn.remote_addr[:2], printable(str(e)))
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"bad register body: {printable(str(e))}")
        if not conn.attributes.get(_WATCHED):
            conn.attributes[_WATCHED] = True
            conn.on_close(self._on_close)
        ha, master = self.routes.register_broker(
            cluster,
            broker_addr,
            broker_name,
            broker_id,
            ha_addr,
            body,
            conn,
            time.monotonic(),
            # RocketMQ 5 brokers send it (a Boolean; absent from 4.x): see RouteInfoManager's prime slave
            None if cmd.ext.get("enableActingMaster") is None else ext_bool(cmd, "enableActingMaster", False),
        )
        ext = {}
        if ha:
            ext["haServerAddr"] = ha
        if master:
            ext["masterAddr"] = master
        order = self.kv.namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        return cmd.response(ext=ext, body=dumps({"table": order}) if order else b"")

    async def unregister_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.routes.unregister_broker(
            ext_str(cmd, "clusterName"), ext_str(cmd, "brokerAddr"), ext_str(cmd, "brokerName"),
            ext_int(cmd, "brokerId"),
        )
        return cmd.response()

    async def query_data_version(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            version = DataVersion.from_json(loads(cmd.body)) if cmd.body else DataVersion()
        except ValueError:
            version = DataVersion()
        changed, held = self.routes.is_data_version_changed(ext_str(cmd, "brokerAddr"), version, time.monotonic())
        return cmd.response(
            ext={"changed": "true" if changed else "false"}, body=dumps(held) if held is not None else b""
        )

    async def wipe_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._change_write_perm(cmd, wipe=True)

    async def add_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return self._change_write_perm(cmd, wipe=False)

    def _change_write_perm(self, cmd: RemotingCommand, wipe: bool) -> RemotingCommand:
        name = ext_str(cmd, "brokerName")
        count = 0
        for qds in self.routes.topic_queue_table.values():
            qd = qds.get(name)
            if qd is not None:
                # as RocketMQ: wiping clears the write bit; adding restores full READ|WRITE
                qd["perm"] = (qd["perm"] & ~PERM_WRITE) if wipe else (PERM_READ | PERM_WRITE)
                count += 1
        log.info("%s write permission of broker %s on %d topics", "wiped" if wipe else "added", name, count)
        key = "wipeTopicCount" if wipe else "addTopicCount"
        return cmd.response(ext={key: str(count)})

    # ------------------------------------------------------------------ routes and lists

    async def get_route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = ext_str(cmd, "topic")
        order = None
        if self.config.orderMessageEnable:
            order = self.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, topic)
        route = self.routes.pickup_route(topic, order)
        if route is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}{FAQ}"
            )
        return cmd.response(body=dumps(route))

    async def get_cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=dumps(self.routes.cluster_info()))

    async def get_all_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=dumps({"topicList": self.routes.all_topics()}))

    async def get_topics_by_cluster(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=dumps({"topicList": self.routes.topics_by_cluster(ext_str(cmd, "cluster"))}))

    async def get_system_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """Cluster and broker names (their auto-created topics) plus, as RocketMQ, one broker's
        address for the admin tools that then ask that broker for its system topics."""
        topics: set[str] = set()
        for cluster, names in self.routes.cluster_addr_table.items():
            topics.add(cluster)
            topics.update(names)
        doc: dict[str, object] = {"topicList": sorted(topics)}
        for bd in self.routes.broker_addr_table.values():
            if bd["brokerAddrs"]:
                doc["brokerAddr"] = bd["brokerAddrs"][min(bd["brokerAddrs"])]
                break
        return cmd.response(body=dumps(doc))

    async def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.routes.delete_topic(ext_str(cmd, "topic"), ext_str(cmd, "clusterName", "") or None)
        return cmd.response()


