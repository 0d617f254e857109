"""TCP remoting client: one pooled connection per "host:port", reopened on demand."""

from __future__ import annotations

import itertools
import logging
import time
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from rmq.kernel import RateLimitedLog
from rmq.plugins.remoting_tcp.aioconn import AsyncioConnection
from rmq.plugins.remoting_tcp.connection import TcpConnection
from rmq.protocol.command import RemotingCommand, RemotingConnectError, RemotingTimeoutError

if TYPE_CHECKING:
    from rmq.kernel import RemotingConfig, RequestHandler

log = logging.getLogger("rmq.remoting")


def _on_asyncio() -> bool:
    """True when running on an asyncio loop (uvloop included); other anyio backends take streams."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def split_addr(addr: str) -> tuple[str, int]:
    """"host:port" or "[v6]:port" → (host, port), with a clear error for anything else."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"remoting address {addr!r} is not host:port")
    return host.strip("[]"), int(port)


class TcpRemotingClient:
    """Satisfies ``rmq.kernel.hookspecs.remoting.RemotingClient``.

    Connection reader tasks need a task group: ``async with client:`` gives the
    client its own; otherwise the running kernel's task group is used.
    """

    def __init__(
        self,
        config: RemotingConfig,
        handler: RequestHandler | None = None,
        *,
        kernel: Any = None,
    ) -> None:
        self.config = config
        self._handler = handler
        self._kernel = kernel
        self._conns: dict[str, TcpConnection | AsyncioConnection] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._ids = itertools.count(1)
        self._tg: TaskGroup | None = None
        self._stack: AsyncExitStack | None = None
        self._closed = False
        self._rlog = RateLimitedLog(log)  # shared by this client's connections

    async def __aenter__(self) -> TcpRemotingClient:
        stack = AsyncExitStack()
        self._tg = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _task_group(self) -> TaskGroup:
        if self._tg is not None:
            return self._tg
        if self._kernel is not None:
            try:
                tg: TaskGroup = self._kernel.task_group
                return tg
            except RuntimeError:
                pass
        raise RuntimeError("TcpRemotingClient needs 'async with client:' or a running kernel")

    async def connection(self, addr: str, connect_timeout: float | None = None) -> TcpConnection:
        """The live connection to ``addr``, connecting (once, whatever the concurrency) if needed."""
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return conn
        if self._closed:
            raise RemotingConnectError(f"client is closed; cannot connect to {addr}")
        lock = self._locks.get(addr)
        if lock is None:
            lock = self._locks[addr] = anyio.Lock()
        async with lock:
            conn = self._conns.get(addr)
            if conn is not None and not conn.closed:
                return conn
            conn = await self._connect(addr, connect_timeout)
            self._conns[addr] = conn
            return conn

    async def _connect(self, addr: str, connect_timeout: float | None) -> TcpConnection:
        host, port = split_addr(addr)
        cfg = self.config
        tg = self._task_group()
        limit = cfg.connect_timeout if connect_timeout is None else min(connect_timeout, cfg.connect_timeout)
        local = cfg.local_host or None
        if cfg.tls_client is None and _on_asyncio():
            return await self._connect_protocol(addr, host, port, limit)  # type: ignore[return-value]
        try:
            with anyio.fail_after(limit):
                if cfg.tls_client is not None:
                    stream = await anyio.connect_tcp(host, port, ssl_context=cfg.tls_client, tls_standard_compatible=False,
                                                     local_host=local)
                else:
                    stream = await anyio.connect_tcp(host, port, local_host=local)
        except TimeoutError:
            raise RemotingConnectError(f"connect to {addr} timed out after {limit:g}s") from None
        except OSError as exc:  # ssl.SSLError included
            raise RemotingConnectError(f"connect to {addr} failed: {exc}") from None
        except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:  # the server closed during the TLS handshake
            cause = exc.__cause__ or exc
            raise RemotingConnectError(f"TLS handshake with {addr} failed: {cause!r}") from None
        conn = TcpConnection.for_config(stream, handler=self._handler, config=cfg, conn_id=next(self._ids),
                                        rlog=self._rlog)
        conn.on_close(lambda c: self._forget(addr, c))
        tg.start_soon(conn.run)
        log.debug("%s: connected #%d to %s", cfg.name, conn.id, addr)
        return conn

    async def _connect_protocol(self, addr: str, host: str, port: int, limit: float) -> AsyncioConnection:
        """On asyncio, the server's ``asyncio.Protocol`` connection serves the client side too: no
        reader task, no anyio stream under each request (a write is ``transport.write`` of the
        frames queued in one loop turn; a response wakes its waiter straight from ``data_received``).
        What the broker asks of a client (rebalance notices, offset resets, running info) is
        served by the client's handler exactly as on the anyio connection."""
        import asyncio

        cfg = self.config
        loop = asyncio.get_running_loop()
        conn_id = next(self._ids)
        try:
            _transport, conn = await asyncio.wait_for(loop.create_connection(
                lambda: AsyncioConnection.for_config(handler=self._handler, config=cfg, conn_id=conn_id,
                                                     rlog=self._rlog), host, port,
                local_addr=(cfg.local_host, 0) if cfg.local_host else None), limit)
        except TimeoutError:
            raise RemotingConnectError(f"connect to {addr} timed out after {limit:g}s") from None
        except OSError as exc:
            raise RemotingConnectError(f"connect to {addr} failed: {exc}") from None
        conn.write_through = True
        conn.on_close(lambda c: self._forget(addr, c))
        log.debug("%s: connected #%d to %s (asyncio protocol)", cfg.name, conn.id, addr)
        return conn

    def _forget(self, addr: str, conn: Any) -> None:
        if self._conns.get(addr) is conn:
            del self._conns[addr]

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:  # noqa: ASYNC109
        """Request/response; ``timeout`` covers connecting and waiting, as Java's invokeSync."""
        conn = self._conns.get(addr)
        if conn is not None and not conn.closed:
            return await conn.send_request(cmd, timeout)
        start = time.monotonic()
        conn = await self.connection(addr, timeout)
        remaining = timeout - (time.monotonic() - start)
        try:
            if remaining <= 0:
                raise RemotingTimeoutError("connect used the whole budget")
            return await conn.send_request(cmd, remaining)
        except RemotingTimeoutError:
            raise RemotingTimeoutError(
                f"request code {cmd.code} (opaque {cmd.opaque}) to {addr} got no response in {timeout:g}s"
                " (including connect)"
            ) from None

    def start_request(self, addr: str, cmd: RemotingCommand, timeout: float, on_done: Any) -> bool:
        """Send on the live asyncio connection to ``addr`` with ``on_done(response, error)`` run on the
        outcome (see ``AsyncioConnection.request_callback``); False, nothing sent: no such connection."""
        conn = self._conns.get(addr)
        if type(conn) is not AsyncioConnection or conn.closed:
            return False
        conn.request_callback(cmd, timeout, on_done)
        return True

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.connection(addr)
        await conn.send_oneway(cmd)

    def connections(self) -> list[TcpConnection]:
        return [c for c in self._conns.values() if not c.closed]

    async def close_connection(self, addr: str) -> None:
        """Drop the pooled connection to ``addr`` (the next call reconnects)."""
        conn = self._conns.pop(addr, None)
        if conn is not None:
            await conn.aclose()

    async def aclose(self) -> None:
        self._closed = True
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            await conn.aclose()
        stack, self._stack = self._stack, None
        if stack is not None:
            tg, self._tg = self._tg, None
            if tg is not None:
                tg.cancel_scope.cancel()
            await stack.aclose()
