"""The NameServer's route table (RocketMQ's RouteInfoManager), as plain state without I/O.

Brokers register their topic tables; clients ask which brokers serve a topic.
Everything here is synchronous and runs on the event loop, so no locks: a
register call is atomic with respect to route queries.
"""

from __future__ import annotations

import json
import logging
import struct
import zlib
from collections.abc import Iterable
from typing import Any

import attrs

from rmq.protocol.common import Perm
from rmq.protocol.jsonbody import loads
from rmq.protocol.names import validate_topic

log = logging.getLogger("rmq.namesrv")

MASTER_ID = 0
MAX_REGISTER_BODY = 64 * 1024 * 1024  # inflated size of a compressed registration (~500k topics)
PERM_READ, PERM_WRITE = Perm.READ, Perm.WRITE

def dumps(obj: Any) -> bytes:
    """Standard JSON with sorted keys (fastjson's order), ASCII-escaped, compact."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("ascii")


@attrs.define
class DataVersion:
    """A broker's DataVersion. ``state_version`` (RocketMQ 5's ``stateVersion``): a controller-mode
    broker's master epoch; 4.9 brokers send none (0)."""

    timestamp: int = 0
    counter: int = 0
    state_version: int = 0

    @classmethod
    def from_json(cls, d: Any) -> DataVersion:
        if not isinstance(d, dict):
            return cls()
        return cls(timestamp=int(d.get("timestamp", 0) or 0), counter=int(d.get("counter", 0) or 0),
                   state_version=int(d.get("stateVersion", 0) or 0))

    def to_json(self) -> dict[str, int]:
        out = {"counter": self.counter, "timestamp": self.timestamp}
        if self.state_version:
            out["stateVersion"] = self.state_version
        return out


@attrs.define
class TopicConfigData:
    """The fields of a broker's TopicConfig the NameServer keeps (as a QueueData)."""

    topic: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_sys_flag: int = 0

    @classmethod
    def from_json(cls, name: str, d: dict[str, Any]) -> TopicConfigData:
        return cls(
            topic=str(d.get("topicName") or name),
            read_queue_nums=int(d.get("readQueueNums", 16)),
            write_queue_nums=int(d.get("writeQueueNums", 16)),
            perm=int(d.get("perm", 6)),
            topic_sys_flag=int(d.get("topicSysFlag", d.get("topicSynFlag", 0)) or 0),
        )


@attrs.define
class RegisterBody:
    """A decoded REGISTER_BROKER body: the broker's topic table, data version and filter servers."""

    data_version: DataVersion
    topics: list[TopicConfigData]
    filter_servers: list[str]


def decode_register_body(body: bytes, compressed: bool) -> RegisterBody:
    """Both body forms of REGISTER_BROKER: fastjson JSON, or the zlib "compressed" form."""
    if not body:
        return RegisterBody(DataVersion(), [], [])
    if compressed:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(body, MAX_REGISTER_BODY)
        if inflater.unconsumed_tail:
            raise ValueError(f"compressed register body inflates beyond {MAX_REGISTER_BODY} bytes")
        return _checked(_decode_compressed(raw))
    doc = loads(body)
    if not isinstance(doc, dict):
        raise ValueError("register body is not a JSON object")
    wrapper = doc.get("topicConfigSerializeWrapper") or {}
    table = wrapper.get("topicConfigTable") or {} if isinstance(wrapper, dict) else None
    if not isinstance(table, dict):
        raise ValueError("topicConfigSerializeWrapper.topicConfigTable is not an object")
    topics = [TopicConfigData.from_json(name, tc) for name, tc in table.items() if isinstance(tc, dict)]
    filters = doc.get("filterServerList") or []
    if not isinstance(filters, list):
        raise ValueError("filterServerList is not an array")
    return _checked(RegisterBody(DataVersion.from_json(wrapper.get("dataVersion")), topics, [str(f) for f in filters]))


def _checked(body: RegisterBody) -> RegisterBody:
    """Refuse a registration naming an illegal topic (a Java broker never sends one)."""
    for t in body.topics:
        reason = validate_topic(t.topic)
        if reason is not None:
            raise ValueError(f"register body names an illegal topic: {reason}")
        if not (0 <= t.read_queue_nums <= 65535 and 0 <= t.write_queue_nums <= 65535 and 0 <= t.perm <= 15):
            raise ValueError(f"register body: topic {t.topic} has out-of-range queue numbers or perm")
    return body


def _decode_compressed(raw: bytes) -> RegisterBody:
    """int32 len + dataVersion JSON, int32 count, per topic int32 len + "name r w perm filterType",
    int32 len + filterServerList JSON (all big-endian)."""
    pos = 0

    def chunk() -> bytes:
        nonlocal pos
        (n,) = struct.unpack_from(">i", raw, pos)
        pos += 4
        if n < 0 or pos + n > len(raw):
            raise ValueError(f"compressed register body: length {n} at byte {pos - 4} overruns the body")
        out = raw[pos : pos + n]
        pos += n
        return out

    version = DataVersion.from_json(loads(chunk()))
    (count,) = struct.unpack_from(">i", raw, pos)
    pos += 4
    topics = []
    for _ in range(count):
        fields = chunk().decode().split(" ")
        if len(fields) < 4:
            raise ValueError(f"compressed register body: bad topic entry {fields!r}")
        topics.append(TopicConfigData(fields[0], int(fields[1]), int(fields[2]), int(fields[3])))
    filters: list[str] = []
    if pos < len(raw):
        filters = list(loads(chunk()) or [])
    return RegisterBody(version, topics, filters)


def encode_compressed_register_body(
    version: DataVersion, topics: Iterable[TopicConfigData], filters: list[str]
) -> bytes:
    """Inverse of the compressed form (what a broker with compressedRegister=true sends)."""
    parts: list[bytes] = []

    def put(b: bytes) -> None:
        parts.append(struct.pack(">i", len(b)))
        parts.append(b)

    put(json.dumps(version.to_json()).encode())
    tl = list(topics)
    parts.append(struct.pack(">i", len(tl)))
    for t in tl:
        put(f"{t.topic} {t.read_queue_nums} {t.write_queue_nums} {t.perm} SINGLE_TAG".encode())
    put(json.dumps(filters).encode())
    return zlib.compress(b"".join(parts), 9)


@attrs.define
class BrokerLive:
    """What the NameServer knows about one registered broker address."""

    last_update: float
    data_version: DataVersion
    conn: Any  # the connection it registered over (None in unit tests)
    ha_server_addr: str
    broker_name: str
    cluster: str
    broker_id: int


def _short(names: list[str], limit: int = 10) -> str:
    if len(names) <= limit:
        return "[" + ", ".join(names) + "]"
    return "[" + ", ".join(names[:limit]) + f", ... {len(names) - limit} more]"


class RouteInfoManager:
    """Clusters, brokers, topic queue data and broker liveness."""

    def __init__(self) -> None:
        # topic -> brokerName -> QueueData (as the JSON dict clients receive)
        self.topic_queue_table: dict[str, dict[str, dict[str, Any]]] = {}
        # brokerName -> {"cluster", "brokerName", "brokerAddrs": {id: addr}}
        self.broker_addr_table: dict[str, dict[str, Any]] = {}
        self.cluster_addr_table: dict[str, set[str]] = {}
        self.broker_live_table: dict[str, BrokerLive] = {}
        self.filter_server_table: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ registration

    def register_broker(
        self,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        body: RegisterBody,
        conn: Any,
        now: float,
        acting_master: bool | None = None,
    ) -> tuple[str, str]:
        """Record a broker's registration; returns (haServerAddr, masterAddr) of its master for slaves.

        As RocketMQ 5's name server: the master's topics make the routes, and so do those of a *prime
        slave* (a broker new enough to send ``enableActingMaster``, whose id is the lowest of its broker
        name: the master is gone), so the topics a slave holds stay routable after its master died.
        A prime slave's topics are merged (it may lag its master's table), never removed; with
        ``acting_master`` their write permission is wiped."""
        self.cluster_addr_table.setdefault(cluster, set()).add(broker_name)
        bd = self.broker_addr_table.get(broker_name)
        register_first = bd is None
        if bd is None:
            bd = self.broker_addr_table[broker_name] = {
                "brokerAddrs": {},
                "brokerName": broker_name,
                "cluster": cluster,
            }
        addrs: dict[int, str] = bd["brokerAddrs"]
        # The same address under another id means a slave became master (or back): keep one entry.
        for bid in [bid for bid, a in addrs.items() if a == broker_addr and bid != broker_id]:
            del addrs[bid]
        # As RocketMQ 5: an id held by another live broker of a newer state version (a controller-mode
        # master epoch) is not taken over; a deposed master that still registers as id 0 (cut off from
        # the controllers, not from this name server) must not steer producers away from the new one.
        holder = addrs.get(broker_id)
        live_holder = self.broker_live_table.get(holder) if holder and holder != broker_addr else None
        if live_holder is not None and live_holder.data_version.state_version > body.data_version.state_version:
            log.warning("registration of %s as %s id %d ignored: %s holds the id at state version %d (this one %d)",
                        broker_addr, broker_name, broker_id, holder, live_holder.data_version.state_version,
                        body.data_version.state_version)
            self.broker_live_table.pop(broker_addr, None)
            return "", ""
        register_first = register_first or addrs.get(broker_id) != broker_addr
        addrs[broker_id] = broker_addr
        prev = self.broker_live_table.get(broker_addr)
        added: list[str] = []
        removed: list[str] = []
        if broker_id == MASTER_ID and (register_first or prev is None or prev.data_version != body.data_version):
            added, removed = self._update_topics(broker_name, body.topics)
        elif acting_master is not None and broker_id == min(addrs):  # merged at every registration: cheap
            added, removed = self._update_topics(broker_name, body.topics, merge=True,
                                                 perm_mask=~Perm.WRITE if acting_master else -1)
        self.broker_live_table[broker_addr] = BrokerLive(
            now, body.data_version, conn, ha_server_addr, broker_name, cluster, broker_id
        )
        if body.filter_servers:
            self.filter_server_table[broker_addr] = list(body.filter_servers)
        else:
            self.filter_server_table.pop(broker_addr, None)
        if prev is None:
            log.info("new broker registered: %s %s id %d at %s (%d topics)", cluster, broker_name,
                     broker_id, broker_addr, len(body.topics))
        elif added or removed:
            log.info("broker %s topics changed: added %s, removed %s", broker_name, _short(added), _short(removed))
        ha, master = "", ""
        if broker_id != MASTER_ID:
            master = addrs.get(MASTER_ID, "")
            live = self.broker_live_table.get(master) if master else None
            if live is not None:
                ha = live.ha_server_addr
        return ha, master

    def _update_topics(
        self, broker_name: str, topics: list[TopicConfigData], merge: bool = False, perm_mask: int = -1
    ) -> tuple[list[str], list[str]]:
        """Replace this broker's queue data with its current topic table (dropping topics it lost unless
        ``merge``); ``perm_mask`` applies to every permission."""
        names = set()
        added = []
        for t in topics:
            names.add(t.topic)
            qd = {
                "brokerName": broker_name,
                "perm": t.perm & perm_mask,
                "readQueueNums": t.read_queue_nums,
                "topicSysFlag": t.topic_sys_flag,
                "writeQueueNums": t.write_queue_nums,
            }
            per_broker = self.topic_queue_table.setdefault(t.topic, {})
            old = per_broker.get(broker_name)
            if old != qd:
                if old is None:
                    added.append(t.topic)
                per_broker[broker_name] = qd
        if merge:
            return added, []
        removed = [t for t, qds in self.topic_queue_table.items() if broker_name in qds and t not in names]
        for topic in removed:
            self._remove_topic_of_broker(topic, broker_name)
        return added, removed

    def _remove_topic_of_broker(self, topic: str, broker_name: str) -> None:
        qds = self.topic_queue_table.get(topic)
        if qds is None:
            return
        qds.pop(broker_name, None)
        if not qds:
            del self.topic_queue_table[topic]

    def unregister_broker(self, cluster: str, broker_addr: str, broker_name: str, broker_id: int) -> bool:
        """Forget one broker address (UNREGISTER_BROKER); True if it was known."""
        live = self.broker_live_table.pop(broker_addr, None)
        self.filter_server_table.pop(broker_addr, None)
        removed_name = False
        bd = self.broker_addr_table.get(broker_name)
        if bd is not None:
            addrs = bd["brokerAddrs"]
            if addrs.get(broker_id) == broker_addr:
                del addrs[broker_id]
            if not addrs:
                del self.broker_addr_table[broker_name]
                removed_name = True
        if removed_name:
            names = self.cluster_addr_table.get(cluster)
            if names is not None:
                names.discard(broker_name)
                if not names:
                    del self.cluster_addr_table[cluster]
            for topic in [t for t, qds in self.topic_queue_table.items() if broker_name in qds]:
                self._remove_topic_of_broker(topic, broker_name)
        if live is not None or removed_name:
            log.info("broker unregistered: %s %s id %d at %s", cluster, broker_name, broker_id, broker_addr)
        return live is not None

    def remove_broker_addr(self, broker_addr: str, reason: str) -> None:
        """Drop a broker address whose connection closed or whose registration expired."""
        live = self.broker_live_table.get(broker_addr)
        name, cluster, bid = None, None, None
        if live is not None:
            name, cluster, bid = live.broker_name, live.cluster, live.broker_id
        else:
            for bname, bd in self.broker_addr_table.items():
                for i, a in bd["brokerAddrs"].items():
                    if a == broker_addr:
                        name, cluster, bid = bname, bd["cluster"], i
        if name is None or cluster is None or bid is None:
            self.broker_live_table.pop(broker_addr, None)
            return
        log.info("dropping broker %s at %s: %s", name, broker_addr, reason)
        self.unregister_broker(cluster, broker_addr, name, bid)

    def scan_not_active(self, now: float, expired_after: float) -> list[str]:
        """Drop brokers not heard from for ``expired_after`` seconds; returns their addresses."""
        dead = [addr for addr, live in self.broker_live_table.items() if live.last_update + expired_after < now]
        for addr in dead:
            self.remove_broker_addr(addr, f"no registration for {expired_after:g}s")
        return dead

    def on_connection_closed(self, conn: Any) -> list[str]:
        """Drop every broker that registered over ``conn``."""
        addrs = [addr for addr, live in self.broker_live_table.items() if live.conn is conn]
        for addr in addrs:
            self.remove_broker_addr(addr, "connection closed")
        return addrs

    # ------------------------------------------------------------------ queries

    def is_data_version_changed(self, broker_addr: str, version: DataVersion, now: float) -> tuple[bool, Any]:
        """QUERY_DATA_VERSION: (changed?, the version we hold as JSON or None); refreshes liveness."""
        live = self.broker_live_table.get(broker_addr)
        if live is None:
            return True, None
        live.last_update = now
        return live.data_version != version, live.data_version.to_json()

    def pickup_route(self, topic: str, order_conf: str | None = None) -> dict[str, Any] | None:
        """TopicRouteData of ``topic`` as a JSON-ready dict, or None when no broker serves it."""
        qds = self.topic_queue_table.get(topic)
        if not qds:
            return None
        broker_datas = []
        filter_table: dict[str, list[str]] = {}
        for name in sorted(qds):
            bd = self.broker_addr_table.get(name)
            if bd is None:
                continue
            addrs = {str(i): a for i, a in sorted(bd["brokerAddrs"].items())}
            broker_datas.append({"brokerAddrs": addrs, "brokerName": name, "cluster": bd["cluster"]})
            for a in bd["brokerAddrs"].values():
                fs = self.filter_server_table.get(a)
                if fs:
                    filter_table[a] = fs
        if not broker_datas:
            return None
        route: dict[str, Any] = {
            "brokerDatas": broker_datas,
            "filterServerTable": filter_table,
            "queueDatas": [qds[n] for n in sorted(qds)],
        }
        if order_conf:
            route["orderTopicConf"] = order_conf
        return route

    def cluster_info(self) -> dict[str, Any]:
        return {
            "brokerAddrTable": {
                name: {
                    "brokerAddrs": {str(i): a for i, a in sorted(bd["brokerAddrs"].items())},
                    "brokerName": name,
                    "cluster": bd["cluster"],
                }
                for name, bd in self.broker_addr_table.items()
            },
            "clusterAddrTable": {c: sorted(names) for c, names in self.cluster_addr_table.items()},
        }

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queue_table)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr_table.get(cluster, set())
        return sorted(t for t, qds in self.topic_queue_table.items() if any(n in names for n in qds))

    def delete_topic(self, topic: str, cluster: str | None = None) -> bool:
        """DELETE_TOPIC_IN_NAMESRV: the whole topic, or only its queues on ``cluster``'s brokers."""
        qds = self.topic_queue_table.get(topic)
        if qds is None:
            return False
        if not cluster:
            del self.topic_queue_table[topic]
        else:
            for name in list(self.cluster_addr_table.get(cluster, ())):
                qds.pop(name, None)
            if not qds:
                del self.topic_queue_table[topic]
        log.info("topic deleted from routes: %s%s", topic, f" (cluster {cluster})" if cluster else "")
        return True
