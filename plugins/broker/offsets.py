"""Committed consumer offsets (RocketMQ's ConsumerOffsetManager) and ``config/consumerOffset.json``.

Shape: ``{"offsetTable":{"<topic>@<group>":{0:120,1:98}}}``; the stored value is the
next offset to consume. Flushed every flushConsumerOffsetInterval when dirty and at
shutdown.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rmq.kernel import ConfigFile, PersistedTable, dumps
from rmq.plugins.broker.tables import entries
from rmq.protocol.names import printable, require_group, require_topic, validate_group, validate_topic

log = logging.getLogger("rmq.broker")

TOPIC_GROUP_SEP = "@"


class ConsumerOffsetManager(PersistedTable):
    def __init__(self, config_dir: Path) -> None:
        self.file = ConfigFile(config_dir / "consumerOffset.json")
        self.table: dict[str, dict[int, int]] = {}
        self.dirty = False

    def load(self) -> None:
        doc = self.file.load()
        if isinstance(doc, dict):
            self.table.update(self._parse(doc, str(self.file.path)))
        log.info("consumer offsets loaded: %d topic@group entries", len(self.table))

    @staticmethod
    def _parse(doc: dict[str, Any], where: str) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for key, queues in entries(doc, "offsetTable", where).items():
            topic, _, group = str(key).partition(TOPIC_GROUP_SEP)
            if validate_topic(topic) or validate_group(group) or not isinstance(queues, dict):
                log.warning("%s: skipping entry %s", where, printable(key, 80))
                continue
            try:
                out[key] = {int(q): int(o) for q, o in queues.items()}
            except (TypeError, ValueError) as e:
                log.warning("%s: skipping entry %s: %s", where, printable(key, 80), e)
        return out

    def adopt(self, doc: dict[str, Any], where: str) -> None:
        """A slave takes its master's offsets: the master's keys overwrite, the slave's others stay."""
        table = self._parse(doc, where)
        for key, queues in table.items():
            if self.table.get(key) != queues:
                self.table[key] = queues
                self.dirty = True

    def encode(self, pretty: bool = False) -> str:
        return dumps(
            {"offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in self.table.items()}},
            pretty=pretty,
            int_keys=True,
        )

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = topic + TOPIC_GROUP_SEP + group
        queues = self.table.get(key)
        if queues is None:
            require_topic(topic)  # a new key: both names end up in consumerOffset.json and log lines
            require_group(group)
            queues = self.table[key] = {}
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self.dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """Committed offset, or -1 when none."""
        queues = self.table.get(topic + TOPIC_GROUP_SEP + group)
        if queues is None:
            return -1
        return queues.get(queue_id, -1)

    def topics_of_group(self, group: str) -> set[str]:
        return {t for t, g in self._pairs() if g == group}

    def groups_of_topic(self, topic: str) -> set[str]:
        return {g for t, g in self._pairs() if t == topic}

    def _pairs(self) -> list[tuple[str, str]]:
        """(topic, group) of every key ("topic@group")."""
        out = []
        for key in self.table:
            t, _, g = key.partition(TOPIC_GROUP_SEP)
            out.append((t, g))
        return out

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.table.get(topic + TOPIC_GROUP_SEP + group, {}))

    def delete_topic(self, topic: str) -> None:
        for key in [k for k in self.table if k.partition(TOPIC_GROUP_SEP)[0] == topic]:
            del self.table[key]
            self.dirty = True

    def delete_group(self, group: str) -> None:
        for key in [k for k in self.table if k.partition(TOPIC_GROUP_SEP)[2] == group]:
            del self.table[key]
            self.dirty = True
