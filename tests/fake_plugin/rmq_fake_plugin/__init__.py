"""Plugins a third party could publish; each proves one extension point needs no kernel change."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from rmq.kernel.hookspecs.allocation import StrategyRegistry
from rmq.kernel.markers import hookimpl
from rmq.kernel.model import DispatchRequest, MessageQueue, MessageRecord, PutResult


class ReverseStrategy:
    """Like averagely, but over the queues in reverse order: easy to tell apart in a test."""

    name = "fake_reverse"

    def allocate(
        self, group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
    ) -> list[MessageQueue]:
        if current_cid not in cid_all:
            return []
        i, n = cid_all.index(current_cid), len(cid_all)
        return [mq for k, mq in enumerate(reversed(mq_all)) if k % n == i]


class ReverseAllocationPlugin:
    def __init__(self, options: dict[str, Any]) -> None:
        if options:
            raise ValueError(f"takes no options, got {sorted(options)}")

    @hookimpl
    def rmq_allocation_register_strategies(self, registry: StrategyRegistry) -> None:
        registry.register("fake_reverse", ReverseStrategy)


class CountingStore:
    """Wraps whatever store the next plugin built; counts puts into a JSON file at close."""

    def __init__(self, inner: Any, report: Path) -> None:
        self._inner = inner
        self._report = report
        self.puts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> CountingStore:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._inner.__aexit__(*exc)
        self._report.write_text(json.dumps({"puts": self.puts, "inner": type(self._inner).__name__}))

    async def put_message(self, msg: MessageRecord) -> PutResult:
        self.puts += 1
        return await self._inner.put_message(msg)

    async def put_messages(self, batch: Sequence[MessageRecord]) -> PutResult:
        self.puts += len(batch)
        return await self._inner.put_messages(batch)


class CountingStorePlugin:
    """A storage *wrapper*: selected alongside a real store, it decorates that store."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.report_name = str(options.pop("report", "counting-store.json"))
        if options:
            raise ValueError(f"unknown options {sorted(options)}")

    @hookimpl(wrapper=True)
    def rmq_storage_make_store(self, kernel: Any, config: Any) -> Any:
        inner = yield
        if inner is None:
            return None
        return CountingStore(inner, config.store_root() / self.report_name)


class AuditDispatcher:
    def __init__(self, path: Path) -> None:
        self.path = path

    def dispatch(self, requests: Sequence[DispatchRequest]) -> None:
        with self.path.open("a") as f:
            for r in requests:
                f.write(f"{r.topic} {r.queue_id} {r.consume_queue_offset} {r.commit_log_offset}\n")


class AuditDispatchPlugin:
    """A third-party dispatcher: appends one line per stored message to a file in the store."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.file = str(options.pop("file", "audit.log"))
        if options:
            raise ValueError(f"unknown options {sorted(options)}")

    @hookimpl
    def rmq_dispatch_make_dispatchers(self, kernel: Any, store: Any) -> list[AuditDispatcher]:
        return [AuditDispatcher(kernel.config.broker.store_root() / self.file)]


class BrokerNotesPlugin:
    """A broker extension: runs inside the broker role (store open) through ``rmq_broker_lifespan``.

    Writes what it saw of the ``BrokerContext`` at start and at stop to a JSON file in the
    broker's config directory — proof that an extension needs neither the broker plugin's
    code nor a poll for it.
    """

    def __init__(self, options: dict[str, Any]) -> None:
        self.file = str(options.pop("file", "fake-notes.json"))
        if options:
            raise ValueError(f"unknown options {sorted(options)}")

    @hookimpl
    def rmq_broker_lifespan(self, kernel: Any, broker: Any) -> Any:
        return self._run(broker)

    @asynccontextmanager
    async def _run(self, broker: Any) -> AsyncIterator[None]:
        path = Path(broker.config_dir) / self.file
        notes = {"addr": broker.broker_addr, "slave": broker.is_slave, "levels": len(broker.delay_levels),
                 "max_at_start": broker.store.max_phy_offset}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(notes))
        try:
            yield
        finally:
            notes["max_at_stop"] = broker.store.max_phy_offset  # the store is still open here
            path.write_text(json.dumps(notes))


class RoleJournalPlugin:
    """A master-only service of a third party, through ``rmq_role_lifespan`` (entry point only).

    Appends one JSON line per enter and exit ({"event", "role", "max_offset"}) to a file in the
    broker's config directory, and runs a heartbeat task while entered that bumps "beats" in a
    second file: proof that the kernel starts it on promotion, stops it (task included) on
    demotion, and does so for a plugin it knows only by name.
    """

    def __init__(self, options: dict[str, Any]) -> None:
        self.file = str(options.pop("file", "role-journal.jsonl"))
        self.roles = [str(r) for r in options.pop("roles", ["MASTER"])]
        if options:
            raise ValueError(f"unknown options {sorted(options)}")

    @hookimpl
    def rmq_role_lifespan(self, kernel: Any, role: str, broker: Any) -> Any:
        return self.role_journal(kernel, role, broker) if role in self.roles else None

    @asynccontextmanager
    async def role_journal(self, kernel: Any, role: str, broker: Any) -> AsyncIterator[None]:
        import anyio

        path = Path(broker.config_dir) / self.file
        path.parent.mkdir(parents=True, exist_ok=True)
        beats = path.with_suffix(".beats")
        running = {"on": True}

        def note(event: str) -> None:
            with path.open("a") as f:
                f.write(json.dumps({"event": event, "role": role, "max_offset": broker.store.max_phy_offset}) + "\n")

        async def beat() -> None:
            n = 0
            while running["on"]:
                n += 1
                beats.write_text(json.dumps({"role": role, "beats": n}))
                await anyio.sleep(0.1)

        note("enter")
        try:
            async with kernel.background(beat):
                yield
        finally:
            running["on"] = False
            note("exit")


class AsyncHookPlugin:
    """Wrong on purpose: an async hookimpl must be refused at start-up."""

    def __init__(self, options: dict[str, Any]) -> None:
        pass

    @hookimpl
    async def rmq_configure(self, kernel: Any) -> None:  # pragma: no cover - refused before use
        pass


class MisspelledHookPlugin:
    """Wrong on purpose: an impl matching no spec must be refused at start-up."""

    def __init__(self, options: dict[str, Any]) -> None:
        pass

    @hookimpl
    def rmq_storage_make_stor(self, kernel: Any, config: Any) -> None:  # pragma: no cover
        pass


class StalledFlushPolicy:
    """A disk that never confirms a flush: durable sends must be answered FLUSH_DISK_TIMEOUT after
    syncFlushTimeout, never sooner and never as a success (the message stays stored)."""

    synchronous = True

    def __init__(self, store: Any, config: Any) -> None:
        self.store = store
        self.timeout = max(int(config.syncFlushTimeout), 1) / 1000
        self.asked = 0

    async def __aenter__(self) -> StalledFlushPolicy:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    async def wait_flushed(self, end_offset: int) -> bool:
        self.asked += 1
        return await self.store.durable.wait_for(end_offset, self.timeout)

    def want_flushed(self, end_offset: int) -> bool:
        self.asked += 1
        return self.store.durable.value < end_offset

    def wake(self) -> None:
        pass


class StalledFlushPlugin:
    """``[plugins] flush = ["stalled"]``: a third party's flush policy (see ``StalledFlushPolicy``)."""

    def __init__(self, options: dict[str, Any]) -> None:
        if options:
            raise ValueError(f"unknown options {sorted(options)}")

    @hookimpl
    def rmq_flush_make_policy(self, kernel: Any, store: Any, config: Any) -> Any:
        return StalledFlushPolicy(store, config)
