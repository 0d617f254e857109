"""TLS and plaintext gRPC on one port (RocketMQ 5 proxy's permissive mode), in front of grpcio.

grpcio serves a port as TLS or as plaintext, never both, while RocketMQ's proxy tells them apart by
the first bytes (Java 5 SDKs default to TLS, the Python and Node SDKs to plaintext). So in permissive
mode the public port belongs to this small forwarder: it peeks at a new connection's first byte
(0x16 opens a TLS handshake) and splices the connection to grpcio's loopback TLS or plaintext port.
grpcio then sees every client as a loopback peer; ``real_peer`` maps the forwarder's side of each
spliced connection back to the client's address, so white lists and logs see the real one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("rmq.grpc")

CHUNK = 256 * 1024


class PermissiveFront:
    def __init__(self, host: str, port: int, plain_port: int, tls_port: int) -> None:
        self.host, self.port = host, port
        self.plain_port, self.tls_port = plain_port, tls_port
        self.peers: dict[int, tuple[str, int]] = {}  # forwarder-side local port -> the client's address
        self.tls_port_factory: Callable[[], Awaitable[int]] | None = None
        self._tls_lock = asyncio.Lock()
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def real_peer(self, grpc_peer: str) -> tuple[str, int] | None:
        """The client behind grpcio's ``context.peer()`` ("ipv4:127.0.0.1:PORT"), if it came through here."""
        _, _, port = grpc_peer.rpartition(":")
        return self.peers.get(int(port)) if port.isdigit() else None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        peer = writer.get_extra_info("peername") or ("?", 0)
        up_writer: asyncio.StreamWriter | None = None
        try:
            first = await asyncio.wait_for(reader.read(CHUNK), 120)
            if not first:
                return
            target = await self._tls_target() if first[0] == 0x16 else self.plain_port
            if not target:
                return  # no certificate for TLS: the handshake gets a closed connection
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
            sock = up_writer.get_extra_info("socket")
            local = sock.getsockname()[1] if sock is not None else 0
            self.peers[local] = (str(peer[0]), int(peer[1]))
            try:
                up_writer.write(first)
                await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
            finally:
                self.peers.pop(local, None)
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            pass
        except Exception:  # noqa: BLE001 - one connection's trouble stays here
            log.exception("gRPC front: connection from %s failed", peer)
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    w.close()
            if task is not None:
                self._tasks.discard(task)

    async def _tls_target(self) -> int:
        async with self._tls_lock:
            if not self.tls_port and self.tls_port_factory is not None:
                self.tls_port = await self.tls_port_factory()
                self.tls_port_factory = None
        return self.tls_port

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(CHUNK):
                dst.write(data)
                await dst.drain()
        finally:
            try:
                dst.write_eof()
            except (OSError, RuntimeError):
                dst.close()
