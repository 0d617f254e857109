"""The broker's tables of named configs (topics, subscription groups, offsets): reading their persisted
documents, putting and deleting entries."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from rmq.kernel import ConfigFile, DataVersion, PersistedTable

if TYPE_CHECKING:
    from rmq.roles import BrokerConfig

log = logging.getLogger("rmq.broker")

C = TypeVar("C")


def entries(doc: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """The ``key`` object of a persisted or synced table document ({} when absent; logged and {} when
    it is not an object: the entries are checked one by one by the caller)."""
    table = doc.get(key) or {}
    if not isinstance(table, dict):
        log.warning("%s: %s is not an object", where, key)
        return {}
    return table


class ConfigTable(PersistedTable, Generic[C]):
    """Name -> config, persisted. ``_put`` and ``delete`` log the change (``kind`` names the entries) and
    call the subclass's ``_changed`` (bump the data version; persist now or mark dirty)."""

    kind: ClassVar[str]

    def __init__(self, config: BrokerConfig, file: ConfigFile) -> None:
        self.config = config
        self.file = file
        self.table: dict[str, C] = {}
        self.data_version = DataVersion()
        self.dirty = False

    def _changed(self) -> None:
        raise NotImplementedError

    def _put(self, name: str, config: C) -> None:
        old = self.table.get(name)
        self.table[name] = config
        log.info("%s %s: %s", self.kind, "updated" if old else "created", config)
        self._changed()

    def delete(self, name: str) -> bool:
        """Remove ``name``; False when there was none."""
        if self.table.pop(name, None) is None:
            return False
        log.info("%s deleted: %s", self.kind, name)
        self._changed()
        return True
