"""Start/stop plumbing shared by every client object (async context manager or start/shutdown)."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from typing import Any, Self

import anyio
from anyio.abc import TaskGroup

from rmq.client.errors import ClientStateError
from rmq.client.instance import ClientInstance
from rmq.client.options import ClientOptions

log = logging.getLogger("rmq.client")


class ClientBase:
    """Owns a ClientInstance and a task group for the object's own background work.

    ``start()`` and ``shutdown()`` must run in the same task (anyio task groups are
    scoped); ``async with`` guarantees that. The blocking facade hosts the whole
    ``async with`` in one task of its event-loop thread.
    """

    _options: ClientOptions

    def __init__(self, namesrv_addr: str | list[str] | None, options: ClientOptions, kernel: Any = None) -> None:
        self._namesrv_addr = namesrv_addr
        self._options = options
        self._kernel = kernel
        self._instance: ClientInstance | None = None
        self._tg: TaskGroup | None = None
        self._stack: AsyncExitStack | None = None
        self._state = "new"

    @property
    def client_id(self) -> str:
        return self.instance.client_id

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise ClientStateError(f"{type(self).__name__} is not started: use 'async with' or await start()")
        return self._instance

    @property
    def started(self) -> bool:
        return self._state == "running"

    def _check_running(self) -> None:
        if self._state != "running":
            raise ClientStateError(f"{type(self).__name__} is {self._state}, not running")

    async def start(self) -> None:
        if self._state == "running":
            return
        if self._state != "new":
            raise ClientStateError(f"{type(self).__name__} cannot be restarted once shut down")
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            self._instance = ClientInstance(
                self._namesrv_addr, self._options, kernel=self._kernel, name=type(self).__name__
            )
            await stack.enter_async_context(self._instance)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            self._state = "running"
            await self._on_start()
        except BaseException:
            self._state = "failed"
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
            await stack.aclose()
            raise
        self._stack = stack

    async def shutdown(self) -> None:
        if self._state != "running":
            return
        self._state = "stopping"
        try:
            with anyio.CancelScope(shield=True):
                try:
                    await self._on_shutdown()
                except Exception:
                    log.exception("%s: clean shutdown failed", type(self).__name__)
        finally:
            self._state = "stopped"
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
            stack, self._stack = self._stack, None
            if stack is not None:  # not shielded: task groups must exit in their own scope nesting
                await stack.aclose()

    async def _on_start(self) -> None:
        """Subclass start-up, after the instance and task group exist."""

    async def _on_shutdown(self) -> None:
        """Subclass clean-up, before the task group is cancelled (commit offsets, unregister)."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()
