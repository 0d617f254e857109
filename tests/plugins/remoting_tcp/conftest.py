"""Every transport test runs on plain asyncio and, where installed, on uvloop (rmqd's loop); the
server, client, handler and request the transport tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from rmq.kernel.hookspecs.remoting import Connection, RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient, TcpRemotingPlugin, TcpRemotingServer
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand, ext_int

try:
    import uvloop  # noqa: F401

    _BACKENDS: list[Any] = ["asyncio", pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop")]
except ImportError:  # pragma: no cover
    _BACKENDS = ["asyncio"]


@pytest.fixture(params=_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


def cfg(**kw: Any) -> RemotingConfig:
    kw.setdefault("host", "127.0.0.1")
    kw.setdefault("port", 0)
    kw.setdefault("name", "test")
    return RemotingConfig(**kw)


async def echo_handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
    """Test handler: ext "sleep" (ms) delays, "close" drops the connection, "fail" raises."""
    delay = ext_int(cmd, "sleep", 0)
    if delay:
        await anyio.sleep(delay / 1000)
    if cmd.ext.get("close"):
        await conn.aclose()
        return None
    if cmd.ext.get("fail"):
        raise RuntimeError("handler exploded")
    if cmd.ext.get("header"):
        ext_int(cmd, "requiredField")
    return cmd.response(ext={"echo": cmd.ext.get("id", ""), "conn": str(conn.id)}, body=cmd.body)


@asynccontextmanager
async def serving(handler: Any = echo_handler, **kw: Any) -> AsyncIterator[TcpRemotingServer]:
    server = TcpRemotingPlugin({}).rmq_remoting_make_server(kernel=None, config=cfg(**kw), handler=handler)
    async with anyio.create_task_group() as tg:
        port = await tg.start(server.serve)
        assert port == server.port and port > 0
        try:
            yield server
        finally:
            await server.aclose()
            tg.cancel_scope.cancel()


@asynccontextmanager
async def client(handler: Any = None, **kw: Any) -> AsyncIterator[TcpRemotingClient]:
    c = TcpRemotingPlugin({}).rmq_remoting_make_client(kernel=None, config=cfg(**kw), handler=handler)
    async with c:
        yield c


def req(code: int = RequestCode.HEART_BEAT, body: bytes = b"", **ext: str) -> RemotingCommand:
    return RemotingCommand.request(code, dict(ext), body=body)


@asynccontextmanager
async def raw_peer(handler: Any = echo_handler, **kw: Any) -> AsyncIterator[tuple[TcpRemotingServer, Any]]:
    """A server and a raw stream connected to it: a peer that writes its bytes by hand."""
    async with serving(handler, **kw) as srv:
        async with await anyio.connect_tcp("127.0.0.1", srv.port) as stream:
            yield srv, stream
