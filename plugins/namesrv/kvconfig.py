"""The NameServer's namespaced key/value store (PUT/GET/DELETE_KV_CONFIG, order-topic config).

Persisted, as RocketMQ's NameServer does, to ``kvConfigPath`` in its ``kvConfig.json`` shape
(``{"configTable":{ns:{k:v}}}``) with the .tmp/.bak protocol; every write is on disk before
the request is answered. A file that does not parse stops the start (RocketMQ's load fails the
same way) rather than silently serving an empty table over the operator's data.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from rmq.kernel import ConfigError

log = logging.getLogger("rmq.namesrv")

NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class KVConfigManager:
    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path).expanduser() if path else None
        self.table: dict[str, dict[str, str]] = {}

    def load(self) -> None:
        """Read the file (or its .bak when a crash left only that); ConfigError if it is corrupt."""
        if self.path is None:
            return
        for candidate in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                text = candidate.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            except OSError as e:
                raise ConfigError(f"namesrv.kvConfigPath: cannot read {candidate}: {e.strerror or e}") from None
            if not text.strip():
                return  # RocketMQ reads an empty file as no configuration
            try:
                self.table = _parse(json.loads(text))
            except ValueError as e:
                raise ConfigError(f"namesrv.kvConfigPath: {candidate} is not a KV config file ({e}); "
                                  "repair or remove it") from None
            log.info("loaded %d KV namespaces from %s", len(self.table), candidate)
            return

    def persist(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"configTable": self.table}, indent="\t", sort_keys=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        if self.path.exists():
            os.replace(self.path, self.path.with_name(self.path.name + ".bak"))
        os.replace(tmp, self.path)

    def put(self, namespace: str, key: str, value: str) -> None:
        self.table.setdefault(namespace, {})[key] = value
        log.info("KV config put: %s %s=%s", namespace, key, value)
        self.persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        kv = self.table.get(namespace)
        if kv is not None and kv.pop(key, None) is not None:
            if not kv:
                del self.table[namespace]
            log.info("KV config deleted: %s %s", namespace, key)
            self.persist()

    def namespace(self, namespace: str) -> dict[str, str] | None:
        kv = self.table.get(namespace)
        return dict(kv) if kv else None


def _parse(doc: Any) -> dict[str, dict[str, str]]:
    """``{"configTable": {namespace: {key: value}}}`` -> the table; ValueError naming what is off."""
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    table = doc.get("configTable") or {}
    if not isinstance(table, dict) or not all(isinstance(kv, dict) for kv in table.values()):
        raise ValueError("configTable is not an object of objects")
    return {str(ns): {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items()}
