"""The broker's topic table (RocketMQ's TopicConfigManager) and ``config/topics.json``.

System topics are created at start; user topics by admin (code 17), by the first
send through an inheritable template (``TBW102``, reference §5.2) and on demand
for ``%RETRY%``/``%DLQ%`` groups. Every change bumps the data version, persists,
and asks the broker to re-register with the name servers.

Bounds (issue #26): a client can make topics exist only by auto-creation, and that stops
once the table holds ``max_auto_created`` topics (``[plugin.processors.broker]
max_auto_created_topics``; RocketMQ has no such limit, so the default is a generous
10,000); the refusal is TOPIC_NOT_EXIST with a remark naming the limit. Admin creation is
not limited. :meth:`TopicConfigManager.queue_problem` is the store's guard: no put may make
a consume queue outside a topic's queues, nor for a topic the broker does not know.

A slave also serves what it *holds* (issue #27): replication brings a topic's messages and
consume queues before the metadata sync brings its config (a topic auto-created on the master
a moment before it died). :meth:`TopicConfigManager.hold_stored` keeps a read-only config for
each such topic (as many queues as the store holds), answered by :meth:`readable` and
registered with the name servers, never persisted: the master's table replaces it on sync.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from rmq.kernel import ConfigError, ConfigFile, DataVersion, dumps
from rmq.plugins.broker.tables import ConfigTable, entries
from rmq.protocol.codes import ResponseCode
from rmq.protocol.common import Perm
from rmq.protocol.jsonbody import loads
from rmq.protocol.names import (
    AUTO_CREATE_TOPIC,
    BENCHMARK_TOPIC,
    NOT_ALLOWED_SEND_TOPICS,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    SYSTEM_TOPICS,
    InvalidNameError,
    printable,
    require_topic,
    validate_topic,
)

if TYPE_CHECKING:
    from rmq.roles import BrokerConfig

log = logging.getLogger("rmq.broker")

PERM_READ, PERM_WRITE, PERM_INHERIT = Perm.READ, Perm.WRITE, Perm.INHERIT
SCHEDULE_QUEUE_NUMS = 18
MAX_QUEUE_NUMS = 1024  # per topic, read or write: more is a typo or an attack (RocketMQ sets no cap)
MAX_AUTO_CREATED = 10_000  # default bound of the topic table for auto-creation (RocketMQ sets none)
SPLIT_METADATA_SIZE = 2000  # RocketMQ 5.3's splitMetadataSize: topics per GET_ALL_TOPIC_CONFIG page
HOLD_REFRESH_S = 0.1  # a read of an unknown topic rescans the store's queues at most this often
# stored topics a slave never serves from its queues alone: the broker's own parking topics
_NOT_HELD = frozenset((SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"))


class AutoCreateLimitError(InvalidNameError):
    """A topic or group would be auto-created beyond its table's bound: answered with ``code`` and the
    message (a refusal on purpose, as a bad name is), never a crash."""

NOT_ALLOWED_SEND = NOT_ALLOWED_SEND_TOPICS


@attrs.define(slots=True)
class TopicConfig:
    topicName: str
    readQueueNums: int = 16
    writeQueueNums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: int = 0
    order: bool = False
    attributes: dict[str, str] = attrs.field(factory=dict)  # RocketMQ 5: {"message.type": "FIFO"...}

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.readQueueNums,
            "topicFilterType": self.topicFilterType,
            "topicName": self.topicName,
            "topicSysFlag": self.topicSysFlag,
            "writeQueueNums": self.writeQueueNums,
            **({"attributes": dict(self.attributes)} if self.attributes else {}),
        }

    @classmethod
    def from_json(cls, name: str, d: dict[str, Any]) -> TopicConfig:
        return cls(
            topicName=str(d.get("topicName") or name),
            readQueueNums=int(d.get("readQueueNums", 16)),
            writeQueueNums=int(d.get("writeQueueNums", 16)),
            perm=int(d.get("perm", PERM_READ | PERM_WRITE)),
            topicFilterType=str(d.get("topicFilterType") or "SINGLE_TAG"),
            topicSysFlag=int(d.get("topicSysFlag", 0) or 0),
            order=bool(d.get("order", False)),
            attributes={str(k): str(v) for k, v in (d.get("attributes") or {}).items()}
            if isinstance(d.get("attributes"), dict) else {},
        )

    @property
    def message_type(self) -> str:
        """RocketMQ 5's topic message type: NORMAL (no attribute), FIFO, DELAY, TRANSACTION or MIXED."""
        return self.attributes.get("message.type", "NORMAL")


class TopicConfigManager(ConfigTable[TopicConfig]):
    """Topic name -> TopicConfig, persisted; ``on_change`` runs after every mutation (re-register)."""

    kind = "topic"

    def __init__(self, config: BrokerConfig, config_dir: Path) -> None:
        super().__init__(config, ConfigFile(config_dir / "topics.json"))
        self.system_topics: set[str] = set()
        self.on_change: Callable[[], None] = lambda: None
        self.max_auto_created = MAX_AUTO_CREATED  # the broker plugin sets max_auto_created_topics
        self.held: dict[str, TopicConfig] = {}  # a slave's read-only topics known from its queues only
        self._held_scan = 0.0

    # ------------------------------------------------------------------ start-up

    def load(self) -> None:
        cfg = self.config
        perm_rw = PERM_READ | PERM_WRITE

        def system(name: str, queues: int, perm: int = perm_rw) -> None:
            self.table[name] = TopicConfig(name, queues, queues, perm)
            self.system_topics.add(name)

        system(SELF_TEST_TOPIC, 1)
        system(BENCHMARK_TOPIC, 1024)  # RocketMQ's brokers all carry it (its benchmark tools' topic)
        if cfg.autoCreateTopicEnable:
            system(AUTO_CREATE_TOPIC, cfg.defaultTopicQueueNums, PERM_INHERIT | perm_rw)
        system(cfg.brokerClusterName, 16, PERM_INHERIT | (perm_rw if cfg.clusterTopicEnable else 0))
        system(cfg.brokerName, 1, PERM_INHERIT | (perm_rw if cfg.brokerTopicEnable else 0))
        system(OFFSET_MOVED_EVENT, 1)
        system(SCHEDULE_TOPIC, SCHEDULE_QUEUE_NUMS)
        system(f"{cfg.brokerClusterName}_REPLY_TOPIC", 1)  # request-reply: replies land here (4.4+)
        if cfg.traceTopicEnable:  # as RocketMQ: one queue, where clients' message traces go
            problem = validate_topic(cfg.msgTraceTopicName)
            if problem:
                raise ConfigError(f"broker.msgTraceTopicName: {problem}")
            system(cfg.msgTraceTopicName, 1)
        doc = self.file.load()
        if isinstance(doc, dict):
            self.table.update(self._parse(doc, str(self.file.path)))
            self.data_version = DataVersion.from_json(doc.get("dataVersion"))
        if not cfg.autoCreateTopicEnable and self.table.pop(AUTO_CREATE_TOPIC, None) is not None:
            log.info("autoCreateTopicEnable=false: dropped persisted %s", AUTO_CREATE_TOPIC)
        self.data_version.next(_now_ms())
        log.info("topic table loaded: %d topics", len(self.table))

    @staticmethod
    def _parse(doc: dict[str, Any], where: str) -> dict[str, TopicConfig]:
        out: dict[str, TopicConfig] = {}
        for name, tc in entries(doc, "topicConfigTable", where).items():
            reason = validate_topic(name)
            if reason is not None or not isinstance(tc, dict):
                log.warning("%s: skipping topic entry: %s", where, reason or "not an object")
                continue
            try:
                out[name] = TopicConfig.from_json(name, tc)
            except (TypeError, ValueError) as e:
                log.warning("%s: skipping topic %s: %s", where, name, e)
        return out

    # ------------------------------------------------------------------ persistence

    def encode(self, pretty: bool = False, names: list[str] | None = None) -> str:
        """The table as ``topics.json`` and GET_ALL_TOPIC_CONFIG hold it (``names``: only those)."""
        table = self.table
        return dumps(
            {
                "dataVersion": self.data_version.to_json(),
                "topicConfigTable": {n: table[n].to_json() for n in (table if names is None else names)},
            },
            pretty=pretty,
        )

    def page(self, data_version: str, topic_seq: int, max_topic_num: int) -> str:
        """RocketMQ 5.3's split metadata: topics ``[topic_seq, topic_seq + max_topic_num)`` in name
        order (from 0 when ``data_version`` is not this table's), at most SPLIT_METADATA_SIZE."""
        try:
            same = DataVersion.from_json(loads(data_version)).to_json() == self.data_version.to_json()
        except (ValueError, TypeError):
            same = False
        begin = max(topic_seq, 0) if same else 0
        return self.encode(names=sorted(self.table)[begin:begin + max(0, min(max_topic_num, SPLIT_METADATA_SIZE))])

    def _changed(self) -> None:
        self.data_version.next(_now_ms())
        self.persist()
        self.on_change()

    # ------------------------------------------------------------------ queries and changes

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def readable(self, topic: str, stored: Callable[[], dict[str, int]] | None = None) -> TopicConfig | None:
        """The config a read (pull, stats) uses: the table's, else a held one. ``stored`` (a slave's
        ``store.topic_queues``) lets a miss rescan the store, at most every ``HOLD_REFRESH_S``, so a
        topic whose first messages just arrived is served before the periodic scan sees it."""
        tc = self.table.get(topic)
        if tc is not None:
            return tc
        tc = self.held.get(topic)
        if tc is None and stored is not None and time.monotonic() - self._held_scan >= HOLD_REFRESH_S:
            self.hold_stored(stored())
            tc = self.held.get(topic)
        return tc

    def hold_stored(self, stored: dict[str, int]) -> bool:
        """A slave's held topics from ``stored`` (topic -> queues in its store): each topic with queues
        but no config here gets a read-only one with that many queues (RocketMQ 5 slaves register the
        topics they hold; our name server takes them from a slave whose master is gone). Returns whether the set changed; a new topic re-registers at once."""
        self._held_scan = time.monotonic()
        held = {}
        for name, queues in stored.items():
            if name in self.table or name in _NOT_HELD or name.startswith("rmq_sys_"):
                continue
            old = self.held.get(name)
            held[name] = old if old is not None and old.readQueueNums == queues else TopicConfig(
                name, queues, queues, PERM_READ)
        if held.keys() == self.held.keys() and all(held[n] is self.held[n] for n in held):
            return False
        grew = sorted(held.keys() - self.held.keys())
        self.held = held
        if grew:
            log.info("serving %d topics held in the store but not configured here (read-only): %s",
                     len(grew), ", ".join(grew[:10]) + (" ..." if len(grew) > 10 else ""))
        self.on_change()
        return True

    def update(self, tc: TopicConfig) -> None:
        """Create or replace (admin code 17)."""
        self._put(require_topic(tc.topicName), tc)

    def create_in_send(
        self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int, remote: str
    ) -> TopicConfig | None:
        """Auto-create from an inheritable template (reference §5.2); None when not allowed."""
        tc = self.table.get(topic)
        if tc is not None:
            return tc
        require_topic(topic)
        template = self.table.get(default_topic)
        if template is None or not template.perm & PERM_INHERIT:
            return None
        if default_topic == AUTO_CREATE_TOPIC and not self.config.autoCreateTopicEnable:
            return None
        self._room(topic)
        nums = max(0, min(client_queue_nums, template.writeQueueNums))
        tc = TopicConfig(
            topic, nums, nums, template.perm & ~PERM_INHERIT, template.topicFilterType, topic_sys_flag
        )
        self.table[topic] = tc
        log.info("topic auto-created from %s by %s: %s", default_topic, remote, tc)
        self._changed()
        return tc

    def create_in_send_back(self, topic: str, queue_nums: int, perm: int, topic_sys_flag: int = 0) -> TopicConfig:
        """%RETRY% / %DLQ% topics, created on demand whatever autoCreateTopicEnable says."""
        tc = self.table.get(topic)
        if tc is not None:
            return tc
        require_topic(topic)
        self._room(topic)
        tc = TopicConfig(topic, queue_nums, queue_nums, perm, "SINGLE_TAG", topic_sys_flag)
        self.table[topic] = tc
        log.info("topic created on demand: %s", tc)
        self._changed()
        return tc

    def _room(self, topic: str) -> None:
        """``AutoCreateLimitError`` (TOPIC_NOT_EXIST) when the table is at its auto-creation bound."""
        if len(self.table) >= self.max_auto_created:
            raise AutoCreateLimitError(
                f"topic[{printable(topic, 128)}] not exist and not auto-created: the broker holds "
                f"{len(self.table)} topics, the limit for auto-creation (max_auto_created_topics = "
                f"{self.max_auto_created}); create it as an admin or delete unused topics",
                ResponseCode.TOPIC_NOT_EXIST,
            )

    def queue_problem(self, topic: str, queue_id: int) -> str | None:
        """Why a put may not create consume queue ``topic``/``queue_id`` (None: it may): the store asks
        before a put opens a queue it does not have yet. A topic's queues are its configured read and
        write queue ids (the schedule topic's also one per delay level); a topic without a config here
        only queue 0 of RocketMQ's system topics, which the broker itself writes (half and op messages)."""
        tc = self.table.get(topic)
        if tc is not None:
            nums = max(tc.readQueueNums, tc.writeQueueNums, 1)
            if topic == SCHEDULE_TOPIC:
                nums = max(nums, len(self.config.delay_levels_ms()))
            if 0 <= queue_id < nums:
                return None
            return f"queueId[{queue_id}] is illegal, topic[{printable(topic, 128)}] has {nums} queues"
        if topic in SYSTEM_TOPICS and queue_id == 0:
            return None
        return f"topic[{printable(topic, 128)}] not exist: no consume queue is created for it"

    def register_body_table(self, slave: bool = False) -> dict[str, dict[str, Any]]:
        """The topic table as sent to name servers (broker permission applied like Java). A ``slave``
        sends its held topics too, and nothing writable: it never takes a send (RocketMQ's name server
        wipes the write permission of a slave acting for its master alike)."""
        perm_cap = self.config.brokerPermission
        if slave:
            perm_cap &= ~PERM_WRITE
        out = {}
        for name, tc in (self.held | self.table).items() if slave else self.table.items():
            d = tc.to_json()
            if not perm_cap & PERM_WRITE or not perm_cap & PERM_READ:
                d["perm"] = tc.perm & perm_cap
            out[name] = d
        return out


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
