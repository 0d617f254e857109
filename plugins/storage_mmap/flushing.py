"""The flush policy a store runs when its owner attached none (tests, benches, embedding).

A broker attaches the policy its ``rmq.flush`` plugin built; this one exists so a store
used on its own still flushes, and it stays deliberately small rather than importing the
flush plugin (a plugin never imports another). ``flushDiskType = SYNC_FLUSH`` makes it
synchronous: a put's ``wait_flushed`` asks for a flush and awaits ``store.durable``, and
every put waiting when a flush starts is covered by it (group commit). Otherwise it
flushes every ``flushIntervalCommitLog`` ms.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    from rmq.kernel.hookspecs.flush import Flushable

log = logging.getLogger("rmq.store")


class DefaultFlushPolicy:
    """See the module docstring; ``FlushPolicy`` by structure."""

    def __init__(self, store: Flushable, config: Any) -> None:
        self.store = store
        self.synchronous = str(config.flushDiskType).upper() == "SYNC_FLUSH"
        self.interval = max(int(config.flushIntervalCommitLog), 1) / 1000
        self.timeout = max(int(config.syncFlushTimeout), 1) / 1000
        self.rounds = 0
        self._kick: Any = None
        self._tg: Any = None

    async def __aenter__(self) -> DefaultFlushPolicy:
        self._kick = anyio.Event()
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self._loop)
        return self

    async def __aexit__(self, *exc: object) -> None:
        tg, self._tg = self._tg, None
        if tg is None:
            return
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)
        with anyio.CancelScope(shield=True):
            await self._flush()

    def wake(self) -> None:
        if self.synchronous and self._kick is not None:
            self._kick.set()

    async def wait_flushed(self, end_offset: int) -> bool:
        durable = self.store.durable
        if durable.value >= end_offset:
            return True
        if self._kick is not None:
            self._kick.set()
        return await durable.wait_for(end_offset, self.timeout)

    async def _flush(self) -> None:
        try:
            flushed = await anyio.to_thread.run_sync(self.store.flush, 0)
        except OSError as e:  # waiters time out (FLUSH_DISK_TIMEOUT); the next round tries again
            log.error("commitlog flush failed: %s", e)
            return
        self.rounds += 1
        self.store.durable.advance(flushed)

    async def _loop(self) -> None:
        while True:
            with anyio.move_on_after(self.interval):
                await self._kick.wait()
            self._kick = anyio.Event()
            if self.store.flushed_offset < self.store.max_phy_offset:
                await self._flush()
