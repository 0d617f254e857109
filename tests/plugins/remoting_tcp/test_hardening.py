"""The tcp transport against hostile peers, in process on 127.0.0.1: bad headers answered or closed,
reset storms, accept failures, the connection limit, bounded buffers and bounded log lines."""

from __future__ import annotations

import errno
import logging
import socket
import struct
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from rmq.kernel.hookspecs.processors import ProcessorRegistry
from rmq.kernel.hookspecs.remoting import Connection
from rmq.kernel.kernel import make_handler
from rmq.plugins.remoting_tcp import TcpConnection, TcpRemotingServer
from rmq.protocol.codes import ResponseCode
from rmq.protocol.command import (
    HeaderError,
    RemotingClosedError,
    RemotingCommand,
    RemotingDecodeError,
    ext_i32,
)
from rmq.protocol.frame import FrameDecoder, encode

from .conftest import client, raw_peer, req, serving

LOG = "rmq.remoting"


def frame(header: bytes, body: bytes = b"", st: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (st << 24) | len(header)) + header + body


async def read_one(stream: Any, timeout: float = 3) -> RemotingCommand | None:
    """The next frame from ``stream``, or None when the server closed it."""
    dec = FrameDecoder()
    with anyio.fail_after(timeout):
        while True:
            try:
                data = await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return None
            cmds = dec.feed(data)
            if cmds:
                return cmds[0]


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


# --------------------------------------------------------------------------- one decode boundary


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("payload", "remark"),
    [
        (frame(b'{"code":2147483648,"opaque":41,"flag":0}'), "does not fit a Java int"),
        (frame(b'{"code":10,"opaque":41,"flag":0,"extFields":[1]}'), "extFields is a list"),
        (frame(b'{"code":10,"opaque":41,"extFields":{"topic":"\\ud800"}}'), "lone UTF-16 surrogate"),
        (frame(struct.pack(">hbhiii", 10, 0, 1, 41, 0, 5) + b"ab" + b"\x00" * 4, st=1), "remark length 5 overruns"),
        (frame(struct.pack(">hbhiii", 10, 0, 1, 41, 0, 0) + struct.pack(">i", 3) + b"\x00\x09k",
               st=1), "ext key length 9"),
        (frame(struct.pack(">hbhii", 10, 0, 1, 41, 0) + b"\x00\x00", st=1), "shorter than the 21-byte minimum"),
    ],
    ids=["code-beyond-int", "ext-list", "lone-surrogate", "binary-remark", "binary-ext", "binary-truncated"],
)
async def test_bad_header_with_known_opaque_is_answered_and_connection_kept(
    payload: bytes, remark: str, caplog: pytest.LogCaptureFixture
) -> None:
    with anyio.fail_after(10):
        async with serving() as srv:
            stream = await anyio.connect_tcp("127.0.0.1", srv.port)
            async with stream:
                with caplog.at_level(logging.WARNING, logger=LOG):
                    await stream.send(payload)
                    resp = await read_one(stream)
                assert resp is not None and resp.is_response and resp.opaque == 41
                assert resp.code == ResponseCode.SYSTEM_ERROR and remark in (resp.remark or "")
                assert resp.serialize_type == payload[4]  # answered in the request's serialize type
                await stream.send(encode(RemotingCommand.request(34, {"id": "next"}, opaque=42)))
                resp = await read_one(stream)
                assert resp is not None and resp.opaque == 42 and resp.ext["echo"] == "next"
            (line,) = [w for w in warnings(caplog) if "refused" in w]
            assert "127.0.0.1:" in line and remark in line and "\n" not in line


@pytest.mark.anyio
@pytest.mark.parametrize(
    "header",
    [b'{"code":Infinity,"opaque":1}', b'{"code":NaN,"opaque":1}', b'{"code":1E99511627776,"opaque":1}',
     b'{"a":' * 3000 + b"1" + b"}" * 3000, b"[" * 100000, b'{"code":1,"opaque":99999999999999999999999}',
     b'{"code":1,"remark":"\xff\xfe"}', b'{"code":1,"opaque":2147483648}'],
    ids=["Infinity", "NaN", "1E99511627776", "deep", "deep-unclosed", "huge-opaque", "utf8", "opaque-beyond-int"],
)
async def test_bad_header_without_opaque_closes_only_that_connection(header: bytes) -> None:
    with anyio.fail_after(10):
        async with serving() as srv, client() as good:
            addr = f"127.0.0.1:{srv.port}"
            stream = await anyio.connect_tcp("127.0.0.1", srv.port)
            async with stream:
                await stream.send(frame(header))
                assert await read_one(stream) is None
            assert (await good.invoke(addr, req(id="alive"), timeout=5)).ext["echo"] == "alive"


@pytest.mark.anyio
async def test_oneway_with_bad_header_is_not_answered() -> None:
    with anyio.fail_after(10):
        async with raw_peer() as (srv, stream):
            await stream.send(frame(b'{"code":2147483648,"opaque":5,"flag":2}'))
            await stream.send(encode(RemotingCommand.request(34, {"id": "x"}, opaque=6)))
            resp = await read_one(stream)
            assert resp is not None and resp.opaque == 6  # the oneway got no answer


@asynccontextmanager
async def raw_echo_server(bad_header: bytes) -> AsyncIterator[str]:
    """A peer that echoes ``id`` and answers ``id=bad`` with ``bad_header`` (``%d`` = the opaque)."""

    async def serve(stream: Any) -> None:
        dec = FrameDecoder()
        async with stream:
            while True:
                try:
                    data = await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return
                for cmd in dec.feed(data):
                    if cmd.ext.get("id") == "bad":
                        await stream.send(frame(bad_header % cmd.opaque))
                    else:
                        await stream.send(encode(cmd.response(ext={"echo": cmd.ext.get("id", "")})))

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield f"127.0.0.1:{port}"
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_client_closes_a_connection_whose_response_cannot_be_read() -> None:
    """A response whose JSON itself is refused has no readable opaque: that connection closes,
    its requests fail with RemotingClosedError, and the next call reconnects."""
    with anyio.fail_after(10):
        async with raw_echo_server(b'{"code":0,"flag":1,"opaque":%d,"version":1E999}') as addr, client() as c:
            assert (await c.invoke(addr, req(id="a"), 5)).ext["echo"] == "a"
            conn = await c.connection(addr)
            with pytest.raises(RemotingClosedError, match="bad frame: bad JSON header"):
                await c.invoke(addr, req(id="bad"), 5)
            await conn.wait_closed()
            assert (await c.invoke(addr, req(id="b"), 5)).ext["echo"] == "b"  # reconnected


@pytest.mark.anyio
async def test_client_response_with_bad_field_fails_that_request_only() -> None:
    with anyio.fail_after(10):
        # opaque readable, code out of range
        async with raw_echo_server(b'{"code":4294967296,"flag":1,"opaque":%d}') as addr, client() as c:
            conn = await c.connection(addr)
            with pytest.raises(RemotingDecodeError, match="does not fit a Java int"):
                await c.invoke(addr, req(id="bad"), 5)
            assert (await c.invoke(addr, req(id="b"), 5)).ext["echo"] == "b"
            assert (await c.connection(addr)) is conn and not conn.closed


@pytest.mark.anyio
async def test_make_handler_answers_header_errors_with_their_code(caplog: pytest.LogCaptureFixture) -> None:
    registry = ProcessorRegistry("broker", None)  # type: ignore[arg-type]

    async def proc(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        ext_i32(cmd, "queueId")
        return cmd.response()

    async def boom(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        raise RuntimeError("line1\nFORGED line2")

    registry.register(10, proc)
    registry.register(11, boom)
    with anyio.fail_after(10):
        async with serving(make_handler(registry)) as srv, client() as c:
            addr = f"127.0.0.1:{srv.port}"
            resp = await c.invoke(addr, RemotingCommand.request(10, {"queueId": "2147483648"}), 5)
            assert resp.code == ResponseCode.SYSTEM_ERROR
            assert resp.remark == "the custom header field 'queueId' is out of range for a Java int: 2147483648"
            resp = await c.invoke(addr, RemotingCommand.request(10, {"queueId": "x"}), 5)
            assert resp.remark == "the custom header field 'queueId' is not an integer (Java int): 'x'"
            assert (await c.invoke(addr, RemotingCommand.request(10, {"queueId": "7"}), 5)).code == 0
            with caplog.at_level(logging.WARNING):
                for _ in range(50):
                    resp = await c.invoke(addr, RemotingCommand.request(11), 5)
                    assert resp.code == ResponseCode.SYSTEM_ERROR and "RuntimeError" in (resp.remark or "")
            lines = [w for w in warnings(caplog) if "failed" in w]
            assert len(lines) == 1 and "\n" not in lines[0] and "\\nFORGED" in lines[0]
    assert HeaderError("f", "x").code == ResponseCode.SYSTEM_ERROR


# --------------------------------------------------------------------------- the supervisor


def linger_reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.mark.anyio
async def test_reset_storm_leaves_server_serving(caplog: pytest.LogCaptureFixture) -> None:
    with anyio.fail_after(30):
        async with serving() as srv, client() as good:
            addr = f"127.0.0.1:{srv.port}"
            half = encode(RemotingCommand.request(34, {"id": "x"}, body=b"y" * 100))[:60]

            def storm() -> None:
                for i in range(400):
                    s = socket.socket()
                    s.connect(("127.0.0.1", srv.port))
                    if i % 3 == 1:
                        s.send(half)
                    elif i % 3 == 2:
                        s.send(encode(RemotingCommand.request(34, {"sleep": "50"})))
                    linger_reset(s)

            with caplog.at_level(logging.INFO, logger=LOG):
                await anyio.to_thread.run_sync(storm)
                for _ in range(100):
                    await anyio.sleep(0.05)
                    if len(srv.connections()) == 0:
                        break
            assert (await good.invoke(addr, req(id="alive"), timeout=5)).ext["echo"] == "alive"
            assert len(srv.connections()) == 1
            assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) <= 5


def test_connection_setup_on_a_reset_socket_does_not_raise() -> None:
    class DeadStream:
        def extra(self, attribute: Any, default: Any = None) -> Any:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")

    conn = TcpConnection(DeadStream(), None, conn_id=1, max_frame_size=1024, idle_timeout=0)  # type: ignore[arg-type]
    assert conn.remote_addr == ("?", 0) and conn.peer == "?:0"


@pytest.mark.anyio
async def test_accept_failures_do_not_end_the_listener(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    real_accept = TcpRemotingServer._accept  # noqa: SLF001
    failures = [OSError(errno.EMFILE, "Too many open files"), OSError(errno.ECONNABORTED, "aborted"),
                OSError(errno.ENFILE, "file table overflow"), RuntimeError("unexpected")]

    async def flaky_accept(self: Any, listener: Any) -> Any:
        if failures:
            await anyio.lowlevel.checkpoint()
            raise failures.pop(0)
        return await real_accept(self, listener)

    monkeypatch.setattr(TcpRemotingServer, "_accept", flaky_accept)
    with anyio.fail_after(10):
        with caplog.at_level(logging.INFO, logger=LOG):
            async with serving() as srv, client() as c:
                assert (await c.invoke(f"127.0.0.1:{srv.port}", req(id="ok"), 5)).ext["echo"] == "ok"
    assert not failures
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "Too many open files" in text and "retrying in" in text and "unexpected" in text


@pytest.mark.anyio
async def test_a_failing_connection_task_is_contained(monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    calls = {"n": 0}
    real_feed = FrameDecoder.feed

    def feed(self: FrameDecoder, data: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("decoder bug")
        return real_feed(self, data)

    monkeypatch.setattr(FrameDecoder, "feed", feed)
    with anyio.fail_after(10):
        with caplog.at_level(logging.ERROR, logger=LOG):
            async with serving() as srv:
                stream = await anyio.connect_tcp("127.0.0.1", srv.port)
                async with stream:
                    await stream.send(encode(req(id="1")))
                    assert await read_one(stream) is None  # that connection closed
                async with client() as c:
                    assert (await c.invoke(f"127.0.0.1:{srv.port}", req(id="2"), 5)).ext["echo"] == "2"
    assert any("decoder bug" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- bounded resources


@pytest.mark.anyio
async def test_connection_limit(caplog: pytest.LogCaptureFixture) -> None:
    with anyio.fail_after(15):
        async with serving(max_connections=3) as srv:
            held = [await anyio.connect_tcp("127.0.0.1", srv.port) for _ in range(3)]
            for s in held:  # each one served
                await s.send(encode(req(id="h")))
                assert (await read_one(s)) is not None
            with caplog.at_level(logging.WARNING, logger=LOG):
                extra = [await anyio.connect_tcp("127.0.0.1", srv.port) for _ in range(5)]
                for s in extra:
                    with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError, OSError)):
                        await s.send(encode(req(id="over")))
                        await read_one(s)
                        raise anyio.EndOfStream
                    await s.aclose()
            limit_lines = [w for w in warnings(caplog) if "maxConnections" in w]
            assert len(limit_lines) == 1
            assert len(srv.connections()) == 3
            await held[0].aclose()
            for _ in range(100):
                if len(srv.connections()) < 3:
                    break
                await anyio.sleep(0.02)
            again = await anyio.connect_tcp("127.0.0.1", srv.port)
            async with again:
                await again.send(encode(req(id="again")))
                resp = await read_one(again)
                assert resp is not None and resp.ext["echo"] == "again"
            for s in held[1:]:
                await s.aclose()


@pytest.mark.anyio
async def test_idle_connection_holds_no_large_buffer() -> None:
    with anyio.fail_after(15):
        async with serving() as srv, client() as c:
            addr = f"127.0.0.1:{srv.port}"
            big = b"z" * (4 * 1024 * 1024)
            assert (await c.invoke(addr, req(body=big, id="big"), 10)).body == big
            (server_conn,) = srv.connections()
            decoder = server_conn._session._decoder  # type: ignore[attr-defined]  # noqa: SLF001
            assert decoder.buffered == 0 and sys.getsizeof(decoder._buf) < 64 * 1024  # noqa: SLF001
            client_conn = await c.connection(addr)
            cdec = client_conn._session._decoder  # noqa: SLF001
            assert cdec.buffered == 0 and sys.getsizeof(cdec._buf) < 64 * 1024  # noqa: SLF001
            # a peer announcing 16 MiB and trickling: memory follows the bytes that arrived
            stream = await anyio.connect_tcp("127.0.0.1", srv.port)
            async with stream:
                await stream.send(struct.pack(">iI", 16 * 1024 * 1024 - 8, 0x64) + b"{")
                await anyio.sleep(0.1)
                trickler = [x for x in srv.connections() if x is not server_conn][0]
                assert 0 < trickler._session._decoder.buffered < 1024  # type: ignore[attr-defined]  # noqa: SLF001
                assert sys.getsizeof(trickler._session._decoder._buf) < 64 * 1024  # type: ignore[attr-defined]  # noqa: SLF001


@pytest.mark.anyio
async def test_idle_connections_keep_no_frame_alive() -> None:
    """After big requests and responses, neither side's read loop keeps the last frame referenced
    (it used to: ``data``/``cmds``/``cmd`` stayed bound while the next read waited)."""
    import gc
    import tracemalloc

    async def small_answer(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=b"r" * (3 * 1024 * 1024) if cmd.ext.get("big") else b"")

    with anyio.fail_after(20):
        async with serving(small_answer) as srv, client() as c:
            addr = f"127.0.0.1:{srv.port}"
            await c.invoke(addr, req(id="warm"), 5)
            gc.collect()
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                for i in range(3):
                    resp = await c.invoke(addr, req(body=b"q" * (4 * 1024 * 1024), big="1", id=str(i)), 10)
                    assert len(resp.body) == 3 * 1024 * 1024
                del resp
                await anyio.sleep(0.2)
                gc.collect()
                held = tracemalloc.get_traced_memory()[0] - base
            finally:
                tracemalloc.stop()
            assert held < 1024 * 1024, f"{held} bytes still referenced after the exchanges"


@pytest.mark.anyio
async def test_bad_frame_log_lines_are_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    with anyio.fail_after(20):
        async with serving() as srv:
            with caplog.at_level(logging.WARNING, logger=LOG):
                for _ in range(60):
                    s = await anyio.connect_tcp("127.0.0.1", srv.port)
                    async with s:
                        await s.send(b"\xff\xff\xff\xff\n\rFORGED")
                        assert await read_one(s) is None
            lines = warnings(caplog)
            assert len(lines) == 1 and "below the 4-byte minimum" in lines[0]
