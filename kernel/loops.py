"""Services that run loops of their own between ``__aenter__`` and ``__aexit__`` (a flush policy, the HA
service): one way to start them in a task group of their own and to stop them, instead of each class
driving a task group's enter and exit by hand."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio

__all__ = ["OwnLoops"]


class OwnLoops:
    """Mixin: ``await self.start_loops(f, g)`` runs ``f()`` and ``g()`` until ``await self.stop_loops()``,
    which cancels and awaits them and says whether they ran (an exit without an enter does nothing)."""

    _tg: Any = None

    async def start_loops(self, *loops: Callable[[], Awaitable[Any]]) -> None:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        for loop in loops:
            self._tg.start_soon(loop)

    async def stop_loops(self) -> bool:
        tg, self._tg = self._tg, None
        if tg is None:
            return False
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)
        return True
