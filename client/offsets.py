"""Offset stores: where a consumer group's progress lives.

CLUSTERING keeps it on the broker (RemoteOffsetStore: in memory, flushed every
``persist_interval`` and at shutdown, also piggy-backed on pulls). BROADCASTING keeps
it in a local JSON file, one per client instance name and group.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import anyio

from rmq.client.instance import ClientInstance
from rmq.client.route import json_int
from rmq.kernel.model import MessageQueue
from rmq.protocol import jsonbody
from rmq.protocol.command import RemotingError
from rmq.protocol.names import printable

log = logging.getLogger("rmq.client.offsets")


class OffsetStore:
    """In-memory table of next offsets to consume, plus how to load and persist it."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.table: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        if increase_only:
            cur = self.table.get(mq)
            if cur is not None and cur >= offset:
                return
        self.table[mq] = offset

    def get(self, mq: MessageQueue) -> int | None:
        return self.table.get(mq)

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)

    async def load(self) -> None:
        """Read persisted state (local store) — the remote store has nothing to preload."""

    async def read_stored(self, mq: MessageQueue) -> int | None:
        """The persisted offset (None: none stored); refreshes the memory table."""
        raise NotImplementedError

    async def persist(self, mqs: Iterable[MessageQueue], *, sync: bool = False) -> None:
        raise NotImplementedError


class RemoteOffsetStore(OffsetStore):
    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__(group)
        self.instance = instance
        self._persisted: dict[MessageQueue, int] = {}

    async def read_stored(self, mq: MessageQueue) -> int | None:
        off = await self.instance.query_consumer_offset(self.group, mq)
        if off is not None:
            self.table[mq] = off
            self._persisted[mq] = off
        return off

    async def persist(self, mqs: Iterable[MessageQueue], *, sync: bool = False) -> None:
        for mq in list(mqs):
            off = self.table.get(mq)
            if off is None or (not sync and self._persisted.get(mq) == off):
                continue
            try:
                await self.instance.update_consumer_offset(self.group, mq, off, oneway=not sync)
                self._persisted[mq] = off
            except (RemotingError, OSError, Exception) as exc:  # noqa: BLE001 - logged, retried next round
                log.info("persisting offset %d of %s failed: %s", off, mq, exc)

    def remove(self, mq: MessageQueue) -> None:
        super().remove(mq)
        self._persisted.pop(mq, None)


def _text(value: object) -> str:
    if type(value) is not str:
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


class LocalFileOffsetStore(OffsetStore):
    """``<dir>/<ip>@<instance>/<group>/offsets.json`` (override the dir with ``offset_store_dir``)."""

    def __init__(self, directory: str | os.PathLike[str], client_key: str, group: str) -> None:
        super().__init__(group)
        self.path = Path(directory) / client_key.replace(os.sep, "_") / group / "offsets.json"
        self._loaded: dict[MessageQueue, int] = {}

    def _read_file(self) -> dict[MessageQueue, int]:
        for p in (self.path, self.path.with_suffix(".json.bak")):
            try:
                doc = jsonbody.loads(p.read_bytes())
                return {
                    MessageQueue(_text(e["topic"]), _text(e["brokerName"]), json_int(e["queueId"], "queueId")):
                    json_int(e["offset"], "offset", -(1 << 63), (1 << 63) - 1)
                    for e in doc.get("offsets", [])
                }
            except FileNotFoundError:
                continue
            except (ValueError, KeyError, TypeError, AttributeError) as exc:  # strict JSON, then the shape
                log.warning("offset file %s is corrupt (%s); trying the backup", p, printable(repr(exc)))
                continue
        return {}

    async def load(self) -> None:
        self._loaded = await anyio.to_thread.run_sync(self._read_file)
        for mq, off in self._loaded.items():
            self.table.setdefault(mq, off)

    async def read_stored(self, mq: MessageQueue) -> int | None:
        off = self._loaded.get(mq)
        if off is not None:
            self.table[mq] = off
        return off

    def _write(self, table: dict[MessageQueue, int]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "group": self.group,
            "offsets": [
                {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id, "offset": off}
                for mq, off in sorted(table.items())
            ],
        }
        if self.path.exists():
            os.replace(self.path, self.path.with_suffix(".json.bak"))
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".offsets.")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, self.path)

    async def persist(self, mqs: Iterable[MessageQueue], *, sync: bool = False) -> None:
        for mq in mqs:
            if mq in self.table:
                self._loaded[mq] = self.table[mq]
        snapshot = dict(self._loaded)
        try:
            await anyio.to_thread.run_sync(self._write, snapshot)
        except OSError as exc:
            log.warning("writing %s failed: %s", self.path, exc)
