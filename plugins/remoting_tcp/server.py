"""TCP remoting server: one accept loop per listening socket, one supervising task per accepted socket.

On asyncio (uvloop included) an accepted socket is served by an ``asyncio.Protocol``
(:class:`~rmq.plugins.remoting_tcp.aioconn.AsyncioConnection`: no reader task, one write
per loop iteration); on other anyio backends by the stream-based ``TcpConnection``.

The accept loop is the supervisor of the port (DESIGN rule 9): a socket reset while
still in the accept queue, a failed accept (EMFILE, ENFILE, ECONNABORTED…) or a
connection over ``max_connections`` costs that one connection and a rate-limited log
line, never the listener or the process. Accept errors that mean "out of resources"
back off briefly and keep accepting.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import socket
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import Listener, SocketAttribute, SocketStream, TaskGroup, TaskStatus

from rmq.kernel import RateLimitedLog
from rmq.plugins.remoting_tcp.aioconn import AsyncioConnection
from rmq.plugins.remoting_tcp.connection import TcpConnection
from rmq.protocol.names import printable
from rmq.protocol.ports import bind_error

if TYPE_CHECKING:
    from rmq.kernel import Connection, RemotingConfig, RequestHandler

log = logging.getLogger("rmq.remoting")

# accept() failures that mean the process or the kernel is out of something: wait, then retry
_EXHAUSTED = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))
_BACKOFF_MIN = 0.02
_BACKOFF_MAX = 1.0


class TcpRemotingServer:
    """Satisfies ``rmq.kernel.hookspecs.remoting.RemotingServer``.

    ``serve`` runs in the caller's task group and event loop (uvloop if the caller
    started one); cancelling it or calling ``aclose`` closes every connection.
    """

    def __init__(self, config: RemotingConfig, handler: RequestHandler) -> None:
        self.config = config
        self._handler = handler
        self._port = 0
        self._conns: dict[int, TcpConnection | AsyncioConnection] = {}
        self._held = 0  # accepted sockets not finished yet (set up or serving): what the limit counts
        self._ids = itertools.count(1)
        self._tg: TaskGroup | None = None
        self._closing = False
        self._rlog = RateLimitedLog(log)  # one per server: a storm from many peers still logs a few lines

    @property
    def port(self) -> int:
        return self._port

    def connections(self) -> list[Connection]:
        return [c for c in self._conns.values() if not c.closed]

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        cfg = self.config
        try:
            listener = await anyio.create_tcp_listener(local_host=cfg.host or None, local_port=cfg.port)
        except OSError as e:
            bind_error(e, cfg.key or f"{cfg.name} port", cfg.host, cfg.port)
        try:
            self._port = int(listener.extra(SocketAttribute.local_port))
        except anyio.TypedAttributeLookupError:  # a multi-listener (dual stack) when host is empty
            self._port = int(listener.listeners[0].extra(SocketAttribute.local_port))
        async with listener, anyio.create_task_group() as tg:
            self._tg = tg
            if self._closing:
                tg.cancel_scope.cancel()
            log.debug("%s: listening on %s:%d", cfg.name, cfg.host, self._port)
            task_status.started(self._port)
            try:
                async with anyio.create_task_group() as accepting:
                    for sub in getattr(listener, "listeners", None) or [listener]:
                        accepting.start_soon(self._accept_loop, sub, tg)
            finally:
                tg.cancel_scope.cancel()

    async def _accept_loop(self, listener: Listener[Any], tg: TaskGroup) -> None:
        """Accept until the listener closes; one connection's failure never ends the loop."""
        name = self.config.name
        backoff = _BACKOFF_MIN
        while True:
            try:
                stream = await self._accept(listener)
            except (anyio.ClosedResourceError, anyio.EndOfStream):
                return
            except (OSError, anyio.BrokenResourceError) as exc:
                cause = exc if isinstance(exc, OSError) else exc.__cause__
                code = getattr(cause, "errno", None)
                if code in _EXHAUSTED:
                    self._rlog.warning(
                        "accept-exhausted", "%s: accept failed (%s); retrying in %gs", name,
                        printable(str(cause)), backoff,
                    )
                    await anyio.sleep(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX)
                else:  # the peer reset it in the accept queue, or the setup of its socket failed
                    self._rlog.info("accept-failed", "%s: accepting a connection failed: %s", name,
                                    printable(repr(exc)))
                continue
            except Exception as exc:  # noqa: BLE001 - unknown: log, pause a little, keep the port open
                self._rlog.error("accept-error", "%s: accept failed unexpectedly: %s", name, printable(repr(exc)))
                await anyio.sleep(_BACKOFF_MIN)
                continue
            backoff = _BACKOFF_MIN
            if self._held >= self.config.max_connections:
                self._rlog.warning(
                    "connection-limit", "%s: %d connections held (maxConnections); closing a new one", name,
                    self._held,
                )
                if isinstance(stream, socket.socket):
                    stream.close()
                else:
                    await _close_quietly(stream)
                continue
            self._held += 1
            if isinstance(stream, socket.socket):
                tg.start_soon(self._on_accept_socket, stream)
            else:
                tg.start_soon(self._on_accept, stream)

    async def _accept(self, listener: Listener[Any]) -> socket.socket | SocketStream:
        """The next accepted socket: a bare one on asyncio (served by a protocol), else a stream."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another backend
            return await listener.accept()
        raw = listener.extra(SocketAttribute.raw_socket)
        if raw.fileno() < 0:
            raise anyio.ClosedResourceError
        sock, _addr = await loop.sock_accept(raw)
        return sock

    async def _on_accept_socket(self, sock: socket.socket) -> None:
        """Serve one accepted socket with an ``AsyncioConnection``; nothing raised here leaves this task."""
        cfg = self.config
        conn: AsyncioConnection | None = None
        attached = False  # once the transport owns the socket, only the transport closes it
        try:
            ctx = None
            if cfg.tls_server is not None:
                ctx = await self._tls_for(sock)
                if ctx is False:
                    return
            conn = AsyncioConnection.for_config(handler=self._handler, config=cfg, conn_id=next(self._ids),
                                                rlog=self._rlog)
            self._conns[conn.id] = conn
            if ctx is None:
                await asyncio.get_running_loop().connect_accepted_socket(lambda: conn, sock)  # type: ignore[arg-type,return-value]
            else:
                await asyncio.get_running_loop().connect_accepted_socket(  # type: ignore[arg-type]
                    lambda: conn, sock, ssl=ctx, ssl_handshake_timeout=cfg.connect_timeout * 3)  # type: ignore[return-value]
            attached = True
            log.debug("%s: connection #%d from %s", cfg.name, conn.id, conn.peer)
            await conn.wait_closed()
            await conn.served()  # the requests it read before closing, still held against max_connections
        except Exception as exc:  # noqa: BLE001 - supervisor: this connection only
            self._connection_failed(conn, exc)
        finally:
            if conn is not None:
                conn.abort()
            if not attached:
                sock.close()
            self._held -= 1
            if conn is not None:
                self._conns.pop(conn.id, None)

    async def _tls_for(self, sock: socket.socket) -> Any:
        """Peek at the first byte (RocketMQ's same-port rule): 0x16 opens a TLS handshake, anything
        else is plaintext. The SSL context, None for plaintext, or False: the connection is refused."""
        tls = self.config.tls_server
        name = self.config.name
        with anyio.move_on_after(self.config.idle_timeout):
            wait = getattr(anyio, "wait_readable", None) or anyio.wait_socket_readable  # anyio >= 4.7 renamed it
            await wait(sock)
        try:
            first = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            first = b""
        except OSError:
            return False
        if not first:
            return False  # closed, or silent for the idle timeout
        peer = _peer_of(sock)
        if first[0] == 0x16:
            if tls.mode == "disabled":
                return False
            ctx = await anyio.to_thread.run_sync(tls.context)
            if ctx is None:
                self._rlog.warning("tls-unavailable", "%s: TLS handshake from %s refused: no certificate", name, peer)
                return False
            return ctx
        if tls.mode == "enforcing":
            self._rlog.info("tls-enforcing", "%s: plaintext connection from %s refused (tls server.mode enforcing)",
                            name, peer)
            return False
        return None

    async def _on_accept(self, stream: SocketStream) -> None:
        """Set up and serve one accepted socket; nothing raised here leaves this task."""
        cfg = self.config
        conn: TcpConnection | None = None
        try:
            conn = TcpConnection.for_config(stream, handler=self._handler, config=cfg, conn_id=next(self._ids),
                                            rlog=self._rlog)
            self._conns[conn.id] = conn
            log.debug("%s: connection #%d from %s", cfg.name, conn.id, conn.peer)
            await conn.run()
        except Exception as exc:  # noqa: BLE001 - supervisor: this connection only
            self._connection_failed(conn, exc)
            await _close_quietly(stream)
        finally:
            self._held -= 1
            if conn is not None:
                self._conns.pop(conn.id, None)

    def _connection_failed(self, conn: TcpConnection | AsyncioConnection | None, exc: Exception) -> None:
        """Setting up or serving one connection failed: logged (rate-limited); the port serves on."""
        self._rlog.error("connection-failed", "%s: connection from %s failed: %s", self.config.name,
                         conn.peer if conn is not None else "?", printable(repr(exc)))
        log.debug("connection failure", exc_info=True)

    async def aclose(self) -> None:
        self._closing = True
        for conn in list(self._conns.values()):
            await conn.aclose()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()


def _peer_of(sock: socket.socket) -> str:
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"


async def _close_quietly(stream: SocketStream) -> None:
    with anyio.CancelScope(shield=True):
        try:
            await stream.aclose()
        except Exception:  # noqa: BLE001 - already broken: it is gone either way
            pass
