"""TCP remoting server: one listener, one ``TcpConnection`` task per accepted socket."""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup, TaskStatus

from rmq.plugins.remoting_tcp.connection import TcpConnection

if TYPE_CHECKING:
    from rmq.kernel.hookspecs.remoting import Connection, RemotingConfig, RequestHandler

log = logging.getLogger("rmq.remoting")


class TcpRemotingServer:
    """Satisfies ``rmq.kernel.hookspecs.remoting.RemotingServer``.

    ``serve`` runs in the caller's task group and event loop (uvloop if the caller
    started one); cancelling it or calling ``aclose`` closes every connection.
    """

    def __init__(self, config: RemotingConfig, handler: RequestHandler) -> None:
        self.config = config
        self._handler = handler
        self._port = 0
        self._conns: dict[int, TcpConnection] = {}
        self._ids = itertools.count(1)
        self._tg: TaskGroup | None = None
        self._closing = False

    @property
    def port(self) -> int:
        return self._port

    def connections(self) -> list[Connection]:
        return [c for c in self._conns.values() if not c.closed]

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        cfg = self.config
        listener = await anyio.create_tcp_listener(local_host=cfg.host or None, local_port=cfg.port)
        try:
            self._port = int(listener.extra(SocketAttribute.local_port))
        except anyio.TypedAttributeLookupError:  # a multi-listener (dual stack) when host is empty
            self._port = int(listener.listeners[0].extra(SocketAttribute.local_port))  # type: ignore[attr-defined]
        async with listener, anyio.create_task_group() as tg:
            self._tg = tg
            if self._closing:
                tg.cancel_scope.cancel()
            log.debug("%s: listening on %s:%d", cfg.name, cfg.host, self._port)
            task_status.started(self._port)
            try:
                await listener.serve(self._on_accept, task_group=tg)
            finally:
                tg.cancel_scope.cancel()

    async def _on_accept(self, stream: SocketStream) -> None:
        cfg = self.config
        conn = TcpConnection(
            stream,
            self._handler,
            conn_id=next(self._ids),
            max_frame_size=cfg.max_frame_size,
            idle_timeout=cfg.idle_timeout,
            name=cfg.name,
        )
        self._conns[conn.id] = conn
        log.debug("%s: connection #%d from %s", cfg.name, conn.id, conn.peer)
        try:
            await conn.run()
        finally:
            self._conns.pop(conn.id, None)

    async def aclose(self) -> None:
        self._closing = True
        for conn in list(self._conns.values()):
            await conn.aclose()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()
