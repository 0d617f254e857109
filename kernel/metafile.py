"""RocketMQ's JSON metadata files (topics.json, consumerOffset.json, ...): shape, persist protocol.

Part of the plugin author's kit: any plugin that keeps state beside the store (the broker's
tables, delay offsets, transaction or HA bookkeeping) writes it this way, so no plugin has
to import another to persist.

RocketMQ writes them with fastjson: sorted keys, integer map keys unquoted
(``{0:12}``). We write the same shape and read both quoted and unquoted keys, so a
store directory moves between a Java broker and rmq in either direction.

Persist protocol (as RocketMQ): write ``<f>.tmp``, keep the previous content as
``<f>.bak``, move tmp over ``<f>``. Load: a missing, empty or unparsable ``<f>``
falls back to ``<f>.bak``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rmq.protocol.jsonbody import loads

log = logging.getLogger("rmq.metafile")

_QUOTED_INT_KEY = re.compile(r'"(-?\d+)"(\s*:)')


def dumps(obj: Any, pretty: bool = False, int_keys: bool = False) -> str:
    """fastjson's shape: sorted keys; ``int_keys`` unquotes all-digit map keys (only for files whose
    only such keys are integer maps: consumerOffset.json, delayOffset.json)."""
    if pretty:
        text = json.dumps(obj, sort_keys=True, indent="\t", separators=(",", ":"))
    else:
        text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    if int_keys:
        text = _QUOTED_INT_KEY.sub(r"\1\2", text)
    return text


class ConfigFile:
    """One metadata file with RocketMQ's .tmp/.bak protocol."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.bak = path.with_name(path.name + ".bak")
        self.tmp = path.with_name(path.name + ".tmp")

    def load(self) -> Any | None:
        """The parsed document, from the file or its backup; None when neither is usable."""
        for candidate in (self.path, self.bak):
            try:
                text = candidate.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            except OSError as e:
                log.warning("cannot read %s: %s", candidate, e)
                continue
            if not text.strip():
                continue
            try:
                doc = loads(text)
            except ValueError as e:
                log.warning("cannot parse %s: %s", candidate, e)
                continue
            if candidate is self.bak:
                log.warning("loaded %s from its backup %s", self.path.name, candidate)
            return doc
        return None

    def edit(self, change: Callable[[str], str]) -> None:
        """Blocking: rewrite the file with ``change`` applied to its text (a user's config file a runtime
        change is written back to, as RocketMQ rewrites its properties file); OSError when it cannot."""
        self.write(change(self.path.read_text(encoding="utf-8")))

    def write(self, text: str) -> None:
        """Blocking write (call from a worker thread for periodic flushes)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if self.path.exists():
            try:
                shutil.copyfile(self.path, self.bak)
            except OSError as e:
                log.warning("cannot back up %s: %s", self.path, e)
        os.replace(self.tmp, self.path)


class PersistedTable:
    """A metadata table kept in one ``ConfigFile``: changes mark it dirty; persisting writes once.

    Subclasses set ``file`` and implement ``encode``; the periodic flusher writes
    ``snapshot()`` (None when nothing changed) from a worker thread.
    """

    file: ConfigFile
    dirty: bool = False

    def encode(self, pretty: bool = False) -> str:
        raise NotImplementedError

    def snapshot(self) -> str | None:
        """The file content to write if anything changed since the last snapshot, else None."""
        if not self.dirty:
            return None
        self.dirty = False
        return self.encode(pretty=True)

    def persist(self) -> None:
        """Write now (shutdown, or right after a change that must not be lost)."""
        self.dirty = True
        text = self.snapshot()
        if text is not None:
            try:
                self.file.write(text)
            except OSError as e:
                log.error("cannot persist %s: %s", self.file.path, e)


class DataVersion:
    """RocketMQ's ``{"counter":N,"timestamp":ms}``: bumped on every metadata change."""

    __slots__ = ("counter", "timestamp")

    def __init__(self, counter: int = 0, timestamp: int = 0) -> None:
        self.counter = counter
        self.timestamp = timestamp

    def next(self, now_ms: int) -> None:
        self.counter += 1
        self.timestamp = now_ms

    def to_json(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, d: Any) -> DataVersion:
        if not isinstance(d, dict):
            return cls()
        return cls(int(d.get("counter", 0) or 0), int(d.get("timestamp", 0) or 0))
