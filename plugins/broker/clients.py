"""Clients known to the broker: heartbeat decoding, consumer groups, producer groups.

HEART_BEAT bodies differ per client (reference §3.6): Java and client A send enum
names, C++ 1.2.3 sends integers, a string ``subVersion``, omits empty arrays and
fills ``codeSet`` with ``atoi(tag)``. Everything is normalised here, and tag hashes
are always recomputed from the tag strings.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from rmq.protocol.common import tags_code
from rmq.protocol.jsonbody import loads
from rmq.protocol.names import printable, require_group, require_topic

log = logging.getLogger("rmq.broker")

CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")  # POP: RocketMQ 5 clients
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


def parse_tags(expression: str) -> list[str]:
    """Tag names of a TAG expression as clients compute tagsSet ("*" names none)."""
    if expression.strip() == "*":
        return []
    return sorted({t.strip() for t in expression.split("||") if t.strip()})


def _enum(value: Any, names: tuple[str, ...], default: str) -> str:
    """An enum given by name (Java, client A) or ordinal (C++), as its name."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return names[value] if 0 <= value < len(names) else default
    if isinstance(value, str):
        if value.isdigit():
            i = int(value)
            return names[i] if i < len(names) else default
        return value if value in names else default
    return default


@attrs.define(slots=True)
class SubscriptionData:
    topic: str
    subString: str = "*"
    tagsSet: list[str] = attrs.field(factory=list)
    codeSet: list[int] = attrs.field(factory=list)
    subVersion: int = 0
    expressionType: str = "TAG"
    classFilterMode: bool = False

    @classmethod
    def build(cls, topic: str, sub_string: str | None, expression_type: str | None, sub_version: int) -> SubscriptionData:
        """From a pull's subscription fields (tags and hashes computed as the client would)."""
        etype = (expression_type or "TAG").upper()
        sub = sub_string if sub_string is not None and sub_string.strip() else "*"
        tags: list[str] = []
        if etype == "TAG":
            tags = parse_tags(sub)
        return cls(topic, sub, tags, [tags_code(t) for t in tags], sub_version, etype)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SubscriptionData:
        tags = [str(t) for t in (d.get("tagsSet") or []) if str(t)]
        try:
            version = int(d.get("subVersion") or 0)
        except (TypeError, ValueError):
            version = 0
        etype = str(d.get("expressionType") or "TAG").upper()
        sub = d.get("subString")
        return cls(
            topic=str(d.get("topic") or ""),
            subString="*" if sub is None else str(sub),
            tagsSet=tags,
            codeSet=[tags_code(t) for t in tags],  # never trust the client's codes (C++ sends atoi)
            subVersion=version,
            expressionType=etype,
            classFilterMode=bool(d.get("classFilterMode", False)),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": self.classFilterMode,
            "codeSet": self.codeSet,
            "expressionType": self.expressionType,
            "subString": self.subString,
            "subVersion": self.subVersion,
            "tagsSet": self.tagsSet,
            "topic": self.topic,
        }


@attrs.define(slots=True)
class ConsumerData:
    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: list[SubscriptionData]
    unit_mode: bool = False


@attrs.define(slots=True)
class HeartbeatData:
    client_id: str
    producer_groups: list[str]
    consumers: list[ConsumerData]


MAX_HEARTBEAT_GROUPS = 1024  # producer + consumer groups in one heartbeat
MAX_SUBSCRIPTIONS = 1024  # topics one consumer group subscribes in one heartbeat
MAX_CLIENT_ID = 255


def parse_heartbeat(body: bytes) -> HeartbeatData:
    """Decode any client's HeartbeatData JSON; raises ValueError when it is not one.

    Every name is checked here, before the broker registers anything: a group or topic
    name becomes a retry topic, a directory and a log line later.
    """
    doc = loads(body)
    if not isinstance(doc, dict):
        raise ValueError("heartbeat body is not a JSON object")
    client_id = str(doc.get("clientID") or doc.get("clientId") or "")
    if len(client_id) > MAX_CLIENT_ID or not client_id.isprintable():
        raise ValueError(f"clientID {printable(client_id, 60)} is not printable or longer than {MAX_CLIENT_ID}")
    producer_set = doc.get("producerDataSet") or []
    consumer_set = doc.get("consumerDataSet") or []
    if not isinstance(producer_set, list) or not isinstance(consumer_set, list):
        raise ValueError("producerDataSet and consumerDataSet must be arrays")
    if len(producer_set) + len(consumer_set) > MAX_HEARTBEAT_GROUPS:
        raise ValueError(f"more than {MAX_HEARTBEAT_GROUPS} groups in one heartbeat")
    producers = [
        require_group(str(p.get("groupName"))) for p in producer_set if isinstance(p, dict) and p.get("groupName")
    ]
    consumers = []
    for c in consumer_set:
        if not isinstance(c, dict) or not c.get("groupName"):
            continue
        raw_subs = c.get("subscriptionDataSet") or []
        if not isinstance(raw_subs, list) or len(raw_subs) > MAX_SUBSCRIPTIONS:
            raise ValueError(f"subscriptionDataSet must be an array of at most {MAX_SUBSCRIPTIONS}")
        subs = [SubscriptionData.from_json(s) for s in raw_subs if isinstance(s, dict)]
        for sub in subs:
            if sub.topic:
                require_topic(sub.topic)
        consumers.append(
            ConsumerData(
                group=require_group(str(c["groupName"])),
                consume_type=_enum(c.get("consumeType"), CONSUME_TYPES, "CONSUME_PASSIVELY"),
                message_model=_enum(c.get("messageModel"), MESSAGE_MODELS, "CLUSTERING"),
                consume_from_where=_enum(c.get("consumeFromWhere"), CONSUME_FROM_WHERE, CONSUME_FROM_WHERE[0]),
                subscriptions=[s for s in subs if s.topic],
                unit_mode=bool(c.get("unitMode", False)),
            )
        )
    return HeartbeatData(client_id, producers, consumers)


@attrs.define(slots=True, eq=False)
class ClientChannel:
    """One client connection as a member of a group."""

    conn: Any
    client_id: str
    language: str
    version: int
    last_update: float

    def to_json(self) -> dict[str, Any]:
        host, port = self.conn.remote_addr[:2]
        return {"clientAddr": f"{host}:{port}", "clientId": self.client_id, "language": self.language,
                "version": self.version}


@attrs.define(slots=True, eq=False)
class ConsumerGroupInfo:
    group: str
    consume_type: str
    message_model: str
    consume_from_where: str
    channels: dict[Any, ClientChannel] = attrs.field(factory=dict)  # keyed by connection
    subscriptions: dict[str, SubscriptionData] = attrs.field(factory=dict)

    def client_ids(self) -> list[str]:
        return sorted({ch.client_id for ch in self.channels.values()})

    def update_channel(self, ch: ClientChannel) -> bool:
        """True when the connection is new to the group."""
        old = self.channels.get(ch.conn)
        if old is None:
            self.channels[ch.conn] = ch
            return True
        if old.client_id != ch.client_id:
            log.warning("client id of %s changed from %s to %s in group %s", ch.conn.remote_addr,
                        old.client_id, ch.client_id, self.group)
            old.client_id = ch.client_id
        old.last_update = ch.last_update
        return False

    def update_subscriptions(self, subs: list[SubscriptionData]) -> bool:
        """True when topics were added or removed (a newer subVersion just replaces, as Java)."""
        changed = False
        topics = set()
        for sub in subs:
            topics.add(sub.topic)
            old = self.subscriptions.get(sub.topic)
            if old is None:
                self.subscriptions[sub.topic] = sub
                changed = True
            elif sub.subVersion > old.subVersion or (
                sub.subVersion == old.subVersion and sub.subString != old.subString
            ):
                self.subscriptions[sub.topic] = sub
        for topic in [t for t in self.subscriptions if t not in topics]:
            del self.subscriptions[topic]
            changed = True
        return changed


class ConsumerManager:
    def __init__(self) -> None:
        self.groups: dict[str, ConsumerGroupInfo] = {}

    def get(self, group: str) -> ConsumerGroupInfo | None:
        return self.groups.get(group)

    def register(self, data: ConsumerData, ch: ClientChannel) -> bool:
        """Add/refresh a member and its subscriptions; True when the group's membership or topics changed."""
        info = self.groups.get(data.group)
        if info is None:
            info = self.groups[data.group] = ConsumerGroupInfo(
                data.group, data.consume_type, data.message_model, data.consume_from_where
            )
        else:
            info.consume_type = data.consume_type
            info.message_model = data.message_model
            info.consume_from_where = data.consume_from_where
        r1 = info.update_channel(ch)
        r2 = info.update_subscriptions(data.subscriptions)
        if r1:
            log.info("consumer joined group %s: %s (%s) from %s:%d", data.group, ch.client_id,
                     data.message_model, *ch.conn.remote_addr[:2])
        return r1 or r2

    def unregister(self, group: str, conn: Any) -> bool:
        info = self.groups.get(group)
        if info is None or info.channels.pop(conn, None) is None:
            return False
        log.info("consumer left group %s from %s:%d", group, *conn.remote_addr[:2])
        if not info.channels:
            del self.groups[group]
            log.info("consumer group %s has no member left", group)
        return True

    def remove_connection(self, conn: Any) -> list[str]:
        """Drop ``conn`` from every group; returns the groups it left."""
        return [g for g in list(self.groups) if self.unregister(g, conn)]

    def expired(self, now: float, timeout: float) -> list[Any]:
        """Connections whose last heartbeat is older than ``timeout`` seconds."""
        return list({ch.conn for info in self.groups.values() for ch in info.channels.values()
                     if ch.last_update + timeout < now})

    def groups_of_topic(self, topic: str) -> set[str]:
        return {g for g, info in self.groups.items() if topic in info.subscriptions}


class ProducerManager:
    def __init__(self) -> None:
        self.groups: dict[str, dict[Any, ClientChannel]] = {}

    def register(self, group: str, ch: ClientChannel) -> None:
        chans = self.groups.setdefault(group, {})
        old = chans.get(ch.conn)
        if old is None:
            chans[ch.conn] = ch
            log.info("producer joined group %s: %s from %s:%d", group, ch.client_id, *ch.conn.remote_addr[:2])
        else:
            old.last_update = ch.last_update

    def unregister(self, group: str, conn: Any) -> bool:
        chans = self.groups.get(group)
        if chans is None or chans.pop(conn, None) is None:
            return False
        if not chans:
            del self.groups[group]
        return True

    def remove_connection(self, conn: Any) -> None:
        for g in list(self.groups):
            self.unregister(g, conn)

    def channel_of(self, client_id: str) -> Any:
        """The live connection of a producer by its client id (a reply goes back through it)."""
        for chans in self.groups.values():
            for ch in chans.values():
                if ch.client_id == client_id and not ch.conn.closed:
                    return ch.conn
        return None

    def expired(self, now: float, timeout: float) -> list[Any]:
        return list({ch.conn for chans in self.groups.values() for ch in chans.values()
                     if ch.last_update + timeout < now})
