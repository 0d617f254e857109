"""The broker's topic table (RocketMQ's TopicConfigManager) and ``config/topics.json``.

System topics are created at start; user topics by admin (code 17), by the first
send through an inheritable template (``TBW102``, reference §5.2) and on demand
for ``%RETRY%``/``%DLQ%`` groups. Every change bumps the data version, persists,
and asks the broker to re-register with the name servers.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from rmq.plugins.broker.configfile import ConfigFile, DataVersion, PersistedTable, dumps

if TYPE_CHECKING:
    from rmq.kernel.config import BrokerConfig

log = logging.getLogger("rmq.broker")

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1

AUTO_CREATE_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SCHEDULE_QUEUE_NUMS = 18
MAX_TOPIC_LENGTH = 127

NOT_ALLOWED_SEND = frozenset((SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC))
_VALID = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def validate_topic(topic: str) -> str | None:
    """None when ``topic`` is a legal name, else the reason (used as the response remark)."""
    if not topic or not topic.strip():
        return "The specified topic is blank."
    n = len(topic.encode("utf-8"))
    if n > MAX_TOPIC_LENGTH:
        return f"The specified topic is longer than topic max length {MAX_TOPIC_LENGTH}: {n} bytes."
    if not _VALID.match(topic):
        return (
            f"The specified topic[{topic}] contains illegal characters, allowing only "
            "^[%|a-zA-Z0-9_-]+$"
        )
    return None


@attrs.define(slots=True)
class TopicConfig:
    topicName: str
    readQueueNums: int = 16
    writeQueueNums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: int = 0
    order: bool = False

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
        )


class TopicConfigManager(PersistedTable):
    """Topic name -> TopicConfig, persisted; ``on_change`` runs after every mutation (re-register)."""

    def __init__(self, config: BrokerConfig, config_dir: Path) -> None:
        self.config = config
        self.file = ConfigFile(config_dir / "topics.json")
        self.table: dict[str, TopicConfig] = {}
        self.data_version = DataVersion()
        self.system_topics: set[str] = set()
        self.on_change: Callable[[], None] = lambda: None

    # ------------------------------------------------------------------ start-up

    def load(self) -> None:
        cfg = self.config
        perm_rw = PERM_READ | PERM_WRITE

        def system(name: str, queues: int, perm: int = perm_rw) -> None:
            self.table[name] = TopicConfig(name, queues, queues, perm)
            self.system_topics.add(name)

        system(SELF_TEST_TOPIC, 1)
        if cfg.autoCreateTopicEnable:
            system(AUTO_CREATE_TOPIC, cfg.defaultTopicQueueNums, PERM_INHERIT | perm_rw)
        system(cfg.brokerClusterName, 16, PERM_INHERIT | (perm_rw if cfg.clusterTopicEnable else 0))
        system(cfg.brokerName, 1, PERM_INHERIT | (perm_rw if cfg.brokerTopicEnable else 0))
        system(OFFSET_MOVED_EVENT, 1)
        system(SCHEDULE_TOPIC, SCHEDULE_QUEUE_NUMS)
        doc = self.file.load()
        if isinstance(doc, dict):
            for name, tc in (doc.get("topicConfigTable") or {}).items():
                if isinstance(tc, dict):
                    self.table[str(name)] = TopicConfig.from_json(str(name), tc)
            self.data_version = DataVersion.from_json(doc.get("dataVersion"))
        if not cfg.autoCreateTopicEnable and self.table.pop(AUTO_CREATE_TOPIC, None) is not None:
            log.info("autoCreateTopicEnable=false: dropped persisted %s", AUTO_CREATE_TOPIC)
        self.data_version.next(_now_ms())
        log.info("topic table loaded: %d topics", len(self.table))

    # ------------------------------------------------------------------ persistence

    def encode(self, pretty: bool = False) -> str:
        return dumps(
            {
                "dataVersion": self.data_version.to_json(),
                "topicConfigTable": {n: tc.to_json() for n, tc in self.table.items()},
            },
            pretty=pretty,
        )

    def _changed(self) -> None:
        self.data_version.next(_now_ms())
        self.persist()
        self.on_change()

    # ------------------------------------------------------------------ queries and changes

    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def update(self, tc: TopicConfig) -> None:
        """Create or replace (admin code 17)."""
        old = self.table.get(tc.topicName)
        self.table[tc.topicName] = tc
        log.info("topic %s: %s", "updated" if old else "created", tc)
        self._changed()

    def delete(self, topic: str) -> bool:
        if self.table.pop(topic, None) is None:
            return False
        log.info("topic deleted: %s", topic)
        self._changed()
        return True

    def create_in_send(
        self, topic: str, default_topic: str, client_queue_nums: int, topic_sys_flag: int, remote: str
    ) -> TopicConfig | None:
        """Auto-create from an inheritable template (reference §5.2); None when not allowed."""
        tc = self.table.get(topic)
        if tc is not None:
            return tc
        template = self.table.get(default_topic)
        if template is None or not template.perm & PERM_INHERIT:
            return None
        if default_topic == AUTO_CREATE_TOPIC and not self.config.autoCreateTopicEnable:
            return None
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
        tc = TopicConfig(topic, queue_nums, queue_nums, perm, "SINGLE_TAG", topic_sys_flag)
        self.table[topic] = tc
        log.info("topic created on demand: %s", tc)
        self._changed()
        return tc

    def register_body_table(self) -> dict[str, dict[str, Any]]:
        """The topic table as sent to name servers (broker permission applied like Java)."""
        perm_cap = self.config.brokerPermission
        out = {}
        for name, tc in self.table.items():
            d = tc.to_json()
            if not perm_cap & PERM_WRITE or not perm_cap & PERM_READ:
                d["perm"] = tc.perm & perm_cap
            out[name] = d
        return out


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
