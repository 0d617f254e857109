"""Contract tests every remoting plugin must pass; subclass to run them against yours.

    from rmq.testing.remoting import RemotingContract

    class TestMyTransport(RemotingContract):
        def make_plugin(self):
            return MyTransportPlugin({})

The plugin must implement ``rmq_remoting_make_server`` and ``rmq_remoting_make_client``;
the suite runs both inside a kernel built by ``make_kernel`` on 127.0.0.1.

Part of the contract is DESIGN rule 9, "every port faces strangers": malformed frames,
resets and connection storms cost one connection, never the server; a header whose opaque
was readable is answered with SYSTEM_ERROR; a handler's exception becomes SYSTEM_ERROR (its
own code for a ``HeaderError``); ``max_connections`` is enforced at accept.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace

import anyio
import pytest

from rmq.kernel.hookspecs.remoting import Connection, RemotingClient, RemotingConfig, RemotingServer
from rmq.protocol.command import HeaderError, RemotingCommand
from rmq.protocol.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode
from rmq.testing import make_kernel

ECHO, SLOW, ASK_BACK, NOTE, FAIL, BAD_FIELD = 9101, 9102, 9103, 9104, 9105, 9106


def _frame(header: bytes, serialize_type: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header), (serialize_type << 24) | len(header)) + header


def read_frame(sock: socket.socket, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
               silence_is_close: bool = True) -> RemotingCommand | None:
    """The next whole frame on a raw socket; None once the peer closed or reset it (or, with
    ``silence_is_close``, sent nothing within the socket's timeout; else TimeoutError)."""
    dec = FrameDecoder(max_frame_size)
    closed = (ConnectionResetError, TimeoutError) if silence_is_close else (ConnectionResetError,)
    while True:
        try:
            chunk = sock.recv(65536)
        except closed:
            return None
        if not chunk:
            return None
        cmds = dec.feed(chunk)
        if cmds:
            return cmds[0]


def exchange(port: int, data: bytes, linger_reset: bool = False, *, timeout: float = 5.0) -> RemotingCommand | None:
    """Send raw bytes from a fresh socket; the first frame back, or None when the server closed it
    (``linger_reset``: reset the connection right after sending, read nothing)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        if linger_reset:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        try:
            s.sendall(data)
        except (ConnectionResetError, TimeoutError, BrokenPipeError):
            return None
        return None if linger_reset else read_frame(s)


class RemotingContract:
    """Base class (no ``Test`` prefix, so pytest collects only your subclass)."""

    def make_plugin(self) -> object:
        raise NotImplementedError("subclass provides make_plugin()")

    @asynccontextmanager
    async def pair(self) -> AsyncIterator[tuple[RemotingServer, RemotingClient, SimpleNamespace]]:
        """A server and a client of the plugin; ``state`` holds ``release`` (held requests) and ``notes``."""
        state = SimpleNamespace(release=anyio.Event(), noted=anyio.Event(), notes=[])
        release = state.release

        async def server_handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
            if cmd.code == ECHO:
                return cmd.response(0, ext={"n": cmd.ext.get("n", "")}, body=cmd.body)
            if cmd.code == SLOW:
                await release.wait()
                return cmd.response(0, ext={"n": cmd.ext.get("n", "")})
            if cmd.code == ASK_BACK:  # the server asks the client something on the same connection
                answer = await conn.send_request(RemotingCommand.request(ECHO, ext={"n": "back"}), timeout=3)
                return cmd.response(0, ext={"n": answer.ext.get("n", "")})
            if cmd.code == NOTE:
                state.notes.append(cmd.ext.get("n"))
                state.noted.set()
                return None
            if cmd.code == FAIL:
                raise RuntimeError("handler failed")
            if cmd.code == BAD_FIELD:
                raise HeaderError("queueId", "is out of range for a Java int: 2147483648")
            return cmd.response(3, remark="unknown")

        async def client_handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
            return cmd.response(0, ext={"n": "client:" + cmd.ext.get("n", "")})

        kernel = make_kernel([self.make_plugin()])
        async with kernel:
            server = kernel.hook.rmq_remoting_make_server(
                kernel=kernel, config=RemotingConfig(host="127.0.0.1", port=0, name="contract"), handler=server_handler
            )
            await kernel.task_group.start(server.serve)
            client = kernel.hook.rmq_remoting_make_client(
                kernel=kernel, config=RemotingConfig(name="contract-client"), handler=client_handler
            )
            try:
                yield server, client, state
            finally:
                release.set()
                await client.aclose()
                await server.aclose()

    @staticmethod
    def addr(server: RemotingServer) -> str:
        return f"127.0.0.1:{server.port}"

    @pytest.mark.anyio
    async def test_request_response_round_trip(self) -> None:
        async with self.pair() as (server, client, _):
            with anyio.fail_after(10):
                resp = await client.invoke(self.addr(server), RemotingCommand.request(ECHO, ext={"n": 1}, body=b"x"), 3)
        assert resp.is_response and resp.code == 0 and resp.ext["n"] == "1" and resp.body == b"x"

    @pytest.mark.anyio
    async def test_a_held_request_does_not_block_others_on_the_connection(self) -> None:
        async with self.pair() as (server, client, state):
            release = state.release
            got: list[str] = []

            async def slow() -> None:
                got.append((await client.invoke(self.addr(server), RemotingCommand.request(SLOW, ext={"n": "s"}), 5)).ext["n"])

            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(slow)
                    await anyio.sleep(0.05)
                    for i in range(20):
                        r = await client.invoke(self.addr(server), RemotingCommand.request(ECHO, ext={"n": i}), 3)
                        got.append(r.ext["n"])
                    release.set()
        assert got[:20] == [str(i) for i in range(20)] and got[20] == "s"

    @pytest.mark.anyio
    async def test_oneway_reaches_the_handler_and_gets_no_answer(self) -> None:
        async with self.pair() as (server, client, state):
            with anyio.fail_after(10):
                await client.invoke_oneway(self.addr(server), RemotingCommand.request(NOTE, ext={"n": "hi"}, oneway=True))
                await state.noted.wait()
        assert state.notes == ["hi"]

    @pytest.mark.anyio
    async def test_timeout_raises_timeout_error(self) -> None:
        async with self.pair() as (server, client, _):
            with anyio.fail_after(10), pytest.raises(TimeoutError):
                await client.invoke(self.addr(server), RemotingCommand.request(SLOW), 0.2)

    @pytest.mark.anyio
    async def test_server_can_ask_the_client_on_the_same_connection(self) -> None:
        async with self.pair() as (server, client, _):
            with anyio.fail_after(10):
                resp = await client.invoke(self.addr(server), RemotingCommand.request(ASK_BACK), 5)
        assert resp.ext["n"] == "client:back"

    @pytest.mark.anyio
    async def test_connect_failure_is_an_error_not_a_hang(self) -> None:
        async with self.pair() as (server, client, _):
            with anyio.fail_after(10), pytest.raises(Exception):  # noqa: B017 - any clear error will do
                await client.invoke("127.0.0.1:1", RemotingCommand.request(ECHO), 2)

    # ------------------------------------------------------------------ every port faces strangers

    @pytest.mark.anyio
    async def test_malformed_frames_and_resets_never_end_the_server(self) -> None:
        hostile = [
            _frame(b'{"code":Infinity,"opaque":1}'),
            _frame(b'{"code":1E99511627776,"opaque":1}'),
            _frame(b'{"a":' * 5000 + b"1" + b"}" * 5000),
            _frame(b'{"code":1,"remark":"\xff"}'),
            _frame(b"\x00\x01", serialize_type=1),
            _frame(b"{}", serialize_type=7),
            b"\xff" * 8,
            struct.pack(">i", 64 * 1024 * 1024),
        ]
        async with self.pair() as (server, client, _):
            with anyio.fail_after(30):
                for data in hostile:
                    assert await anyio.to_thread.run_sync(exchange, server.port, data) is None
                for i in range(100):
                    await anyio.to_thread.run_sync(exchange, server.port, encode(
                        RemotingCommand.request(ECHO, opaque=i))[: i % 20], True)
                resp = await client.invoke(self.addr(server), RemotingCommand.request(ECHO, ext={"n": "ok"}), 5)
        assert resp.code == 0 and resp.ext["n"] == "ok"

    @pytest.mark.anyio
    async def test_bad_header_with_a_readable_opaque_is_answered(self) -> None:
        async with self.pair() as (server, _client, _):
            with anyio.fail_after(10):
                resp = await anyio.to_thread.run_sync(
                    exchange, server.port, _frame(b'{"code":2147483648,"opaque":41,"flag":0}'))
        assert resp is not None and resp.is_response and resp.opaque == 41 and resp.code == 1 and resp.remark

    @pytest.mark.anyio
    async def test_handler_exceptions_become_error_responses(self) -> None:
        async with self.pair() as (server, client, _):
            with anyio.fail_after(10):
                failed = await client.invoke(self.addr(server), RemotingCommand.request(FAIL), 5)
                bad = await client.invoke(self.addr(server), RemotingCommand.request(BAD_FIELD), 5)
                ok = await client.invoke(self.addr(server), RemotingCommand.request(ECHO, ext={"n": "x"}), 5)
        assert failed.code == 1 and "handler failed" in (failed.remark or "")
        assert bad.code == 1 and bad.remark == "the custom header field 'queueId' is out of range for a Java int: 2147483648"
        assert ok.ext["n"] == "x"

    @pytest.mark.anyio
    async def test_max_connections_is_enforced_at_accept(self) -> None:
        async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            return cmd.response(0)

        kernel = make_kernel([self.make_plugin()])
        async with kernel:
            cfg = RemotingConfig(host="127.0.0.1", port=0, name="contract-limit", max_connections=2)
            server = kernel.hook.rmq_remoting_make_server(kernel=kernel, config=cfg, handler=handler)
            await kernel.task_group.start(server.serve)
            try:
                with anyio.fail_after(15):
                    held = [await anyio.connect_tcp("127.0.0.1", server.port) for _ in range(2)]
                    for s in held:
                        await s.send(encode(RemotingCommand.request(ECHO)))
                        await s.receive()
                    over = await anyio.to_thread.run_sync(exchange, server.port, encode(RemotingCommand.request(ECHO)))
                    assert over is None
                    for s in held:
                        await s.aclose()
            finally:
                await server.aclose()
