"""Start/stop plumbing shared by every client object (async context manager or start/shutdown)."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from typing import Any, Self

import anyio
from anyio.abc import TaskGroup

from rmq.client.errors import ClientStateError
from rmq.client.instance import ClientInstance
from rmq.client.options import ClientOptions

log = logging.getLogger("rmq.client")


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class ClientBase:
    """Owns a ClientInstance and a task group for the object's background work.

    On asyncio the background work lives in a host task of its own, so objects can be
    started and shut down in any order and from any task (a consumer may leave while
    one started later keeps running). Elsewhere (trio) ``start``/``shutdown`` nest like
    task groups: shut down in reverse start order, from the starting task.
    """

    def __init__(self, namesrv_addr: str | list[str] | None, options: ClientOptions, kernel: Any = None) -> None:
        self._namesrv_addr = namesrv_addr
        self._options = options
        self._kernel = kernel
        self._instance: ClientInstance | None = None
        self._tg: TaskGroup | None = None
        self._stack: AsyncExitStack | None = None
        self._state = "new"
        self._host: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None

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

    async def _enter(self, stack: AsyncExitStack) -> None:
        self._instance = ClientInstance(self._namesrv_addr, self._options, kernel=self._kernel, name=type(self).__name__)
        await stack.enter_async_context(self._instance)
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        self._state = "running"
        await self._on_start()

    async def start(self) -> None:
        if self._state == "running":
            return
        if self._state != "new":
            raise ClientStateError(f"{type(self).__name__} cannot be restarted once shut down")
        self._state = "starting"
        if _on_asyncio():
            await self._start_hosted()
            return
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            await self._enter(stack)
        except BaseException:
            self._state = "failed"
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
            await stack.aclose()
            raise
        self._stack = stack

    async def _start_hosted(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        self._stop = asyncio.Event()

        async def host() -> None:
            try:
                async with AsyncExitStack() as stack:
                    try:
                        await self._enter(stack)
                    except BaseException as exc:
                        self._state = "failed"
                        if self._tg is not None:
                            self._tg.cancel_scope.cancel()
                        if not ready.done():
                            ready.set_exception(exc)
                        return
                    ready.set_result(None)
                    assert self._stop is not None
                    await self._stop.wait()
                    await self._graceful()
                    assert self._tg is not None
                    self._tg.cancel_scope.cancel()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                    return
                log.exception("%s: background host task failed", type(self).__name__)
            finally:
                if self._state != "failed":
                    self._state = "stopped"

        self._host = loop.create_task(host(), name=f"rmq-{type(self).__name__}")
        try:
            await asyncio.shield(ready)
        except BaseException:
            if not ready.done():  # we were cancelled while starting: stop the host
                self._stop.set()
                await asyncio.shield(self._host)
            raise

    async def _graceful(self) -> None:
        self._state = "stopping"
        with anyio.CancelScope(shield=True):
            try:
                await self._on_shutdown()
            except Exception:
                log.exception("%s: clean shutdown failed", type(self).__name__)

    async def shutdown(self) -> None:
        if self._host is not None:
            if self._stop is not None:
                self._stop.set()
            host, self._host = self._host, None
            await asyncio.shield(host)
            return
        if self._state != "running":
            return
        try:
            await self._graceful()
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
