"""The tcp remoting plugin over real loopback sockets (127.0.0.1, port 0), asyncio and uvloop."""

from __future__ import annotations

import logging
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anyio.abc import SocketAttribute

from rmq.kernel.hookspecs.remoting import Connection, RemotingClient, RemotingServer
from rmq.plugins.remoting_tcp import (
    RemotingClosedError,
    RemotingConnectError,
    RemotingTimeoutError,
    TcpConnection,
    TcpRemotingClient,
    TcpRemotingPlugin,
    TcpRemotingServer,
)
from rmq.protocol.codes import RequestCode, ResponseCode, SerializeType
from rmq.protocol.command import HeaderError, RemotingCommand
from rmq.protocol.frame import FrameDecoder, encode
from rmq.testing import make_kernel

from .conftest import cfg, client, echo_handler, raw_peer, req, serving

LOG = "rmq.remoting"


# --------------------------------------------------------------------------- basics


@pytest.mark.anyio
async def test_protocols_and_hookimpls_through_pluggy() -> None:
    with anyio.fail_after(10):
        kernel = make_kernel([TcpRemotingPlugin({})])
        server = kernel.hook.rmq_remoting_make_server(kernel=kernel, config=cfg(), handler=echo_handler)
        cl = kernel.hook.rmq_remoting_make_client(kernel=kernel, config=cfg(), handler=None)
        assert isinstance(server, RemotingServer) and isinstance(server, TcpRemotingServer)
        assert isinstance(cl, RemotingClient) and isinstance(cl, TcpRemotingClient)
        async with serving() as srv, client() as c:
            conn = await c.connection(f"127.0.0.1:{srv.port}")
            assert isinstance(conn, Connection)


@pytest.mark.anyio
async def test_request_response_round_trip_json_and_binary() -> None:
    with anyio.fail_after(10):
        async with serving() as srv, client() as c:
            addr = f"127.0.0.1:{srv.port}"
            resp = await c.invoke(addr, req(body=b"ping", id="1"), timeout=5)
            assert resp.is_response and resp.code == ResponseCode.SUCCESS
            assert resp.ext["echo"] == "1" and resp.body == b"ping" and resp.language == "JAVA"
            breq = RemotingCommand.request(10, {"id": "2"}, body=b"bin", serialize_type=SerializeType.ROCKETMQ)
            resp = await c.invoke(addr, breq, timeout=5)
            assert resp.serialize_type == SerializeType.ROCKETMQ and resp.ext["echo"] == "2"
            big = bytes(range(256)) * 16384  # 4 MiB: many reads, one frame
            resp = await c.invoke(addr, req(body=big, id="3"), timeout=5)
            assert resp.body == big
            assert len(c.connections()) == 1 and len(srv.connections()) == 1


@pytest.mark.anyio
async def test_opaques_are_per_connection_and_increasing() -> None:
    with anyio.fail_after(10):
        async with serving() as srv, client() as c:
            conn = await c.connection(f"127.0.0.1:{srv.port}")
            cmds = [req(id=str(i)) for i in range(3)]
            for cmd in cmds:
                await conn.send_request(cmd, 5)
            assert [cmd.opaque for cmd in cmds] == [0, 1, 2]


# --------------------------------------------------------------------------- concurrency


@pytest.mark.anyio
async def test_concurrent_requests_answered_out_of_order() -> None:
    """Request i is answered only after request i + 1: all of them must be in service at once, and
    the answers leave in reverse order (an order the handlers make, not one timed with sleeps,
    which a loaded machine can reorder)."""
    n = 20
    done = [anyio.Event() for _ in range(n)]

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        i = int(cmd.ext["id"])
        if i + 1 < n:
            await done[i + 1].wait()
        done[i].set()
        return cmd.response(ext={"echo": cmd.ext["id"], "conn": str(conn.id)}, body=cmd.body)

    with anyio.fail_after(10):
        async with serving(handler) as srv, client() as c:
            addr = f"127.0.0.1:{srv.port}"
            finished: list[int] = []
            results: dict[int, RemotingCommand] = {}

            async def one(i: int) -> None:
                resp = await c.invoke(addr, req(id=str(i), body=str(i).encode()), 5)
                results[i] = resp
                finished.append(i)

            async with anyio.create_task_group() as tg:
                for i in range(n):
                    tg.start_soon(one, i)
            assert all(results[i].ext["echo"] == str(i) and results[i].body == str(i).encode() for i in range(n))
            assert finished[0] == n - 1 and finished[-1] == 0  # served concurrently, answered out of order
            assert len({r.ext["conn"] for r in results.values()}) == 1  # all on one connection


@pytest.mark.anyio
async def test_slow_handler_does_not_block_others_on_the_same_connection() -> None:
    release = anyio.Event()

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.code == RequestCode.PULL_MESSAGE:
            await release.wait()  # a held long-poll
        return cmd.response()

    with anyio.fail_after(10):
        async with serving(handler) as srv, client() as c:
            addr = f"127.0.0.1:{srv.port}"
            held: list[RemotingCommand] = []

            async def pull() -> None:
                held.append(await c.invoke(addr, req(RequestCode.PULL_MESSAGE), 8))

            async with anyio.create_task_group() as tg:
                tg.start_soon(pull)
                await anyio.sleep(0.05)
                for _ in range(50):  # heartbeats and sends keep flowing
                    assert (await c.invoke(addr, req(RequestCode.HEART_BEAT), 2)).code == 0
                assert not held
                release.set()
            assert held[0].code == 0


# --------------------------------------------------------------------------- oneway, timeout, close


@pytest.mark.anyio
async def test_oneway_is_delivered_and_never_answered() -> None:
    got: list[RemotingCommand] = []
    seen = anyio.Event()
    seen_twice = anyio.Event()

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        got.append(cmd)
        (seen_twice if seen.is_set() else seen).set()
        return cmd.response()  # returned anyway: the transport must not send it

    with anyio.fail_after(10):
        async with serving(handler) as srv:
            stream = await anyio.connect_tcp("127.0.0.1", srv.port)
            async with stream:
                ow = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {"commitOffset": "5"},
                                             oneway=True, opaque=77)
                await stream.send(encode(ow))
                await seen.wait()
                assert got[0].is_oneway and got[0].opaque == 77 and got[0].ext == {"commitOffset": "5"}
                with anyio.move_on_after(0.3) as scope:
                    await stream.receive()
                assert scope.cancelled_caught  # nothing came back
            async with client() as c:
                await c.invoke_oneway(f"127.0.0.1:{srv.port}", req(id="x"))
                await seen_twice.wait()
                assert got[1].is_oneway


@asynccontextmanager
async def stream_served(handler: Any) -> AsyncIterator[int]:
    """A listener whose connections are anyio-stream ``TcpConnection`` s (the transport of TLS clients
    and of other backends), each run to its end; yields the port."""

    async def serve(stream: Any) -> None:
        await TcpConnection(stream, handler, conn_id=1, max_frame_size=1 << 20, idle_timeout=0).run()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield int(listener.extra(SocketAttribute.local_port))
        tg.cancel_scope.cancel()


@asynccontextmanager
async def server_port(transport: str, handler: Any) -> AsyncIterator[int]:
    if transport == "protocol":
        async with serving(handler) as srv:
            yield srv.port
    else:
        async with stream_served(handler) as port:
            yield port


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["protocol", "stream"])
async def test_requests_read_before_the_peer_closes_are_all_served(transport: str) -> None:
    """A peer that pipelines requests and closes at once (a oneway producer's exit) loses none of
    them: RocketMQ's broker processes every request it decoded, only the answers cannot be written.
    Some handlers suspend for a while, as a store's put does under load."""
    served: list[int] = []
    every = anyio.Event()
    n = 300

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.opaque % 3 == 0:
            await anyio.sleep(0.05)
        elif cmd.opaque % 3 == 1:
            await anyio.lowlevel.checkpoint()
        served.append(cmd.opaque)
        if len(served) == n:
            every.set()
        return cmd.response()

    frames = b"".join(encode(RemotingCommand.request(RequestCode.SEND_MESSAGE, {"i": str(i)}, body=b"x" * 64,
                                                     oneway=i % 2 == 0, opaque=i)) for i in range(n))
    with anyio.fail_after(20):
        async with server_port(transport, handler) as port:
            stream = await anyio.connect_tcp("127.0.0.1", port)
            await stream.send(frames)
            await stream.aclose()
            await every.wait()
    assert sorted(served) == list(range(n))


@pytest.mark.anyio
async def test_server_shutdown_cancels_the_requests_still_running() -> None:
    """Only a local close drops work: a server shutting down cancels the handlers its peers left running."""
    started = anyio.Event()
    cancelled: list[int] = []

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            cancelled.append(cmd.opaque)
            raise
        raise AssertionError("unreachable")

    with anyio.fail_after(10):
        async with serving(handler) as srv:
            stream = await anyio.connect_tcp("127.0.0.1", srv.port)
            await stream.send(encode(RemotingCommand.request(RequestCode.HEART_BEAT, {}, oneway=True, opaque=9)))
            await stream.aclose()  # the peer's close leaves the handler running...
            await started.wait()
            await anyio.sleep(0.1)
            assert not cancelled
        assert cancelled == [9]  # ...the server's shutdown ends it


@pytest.mark.anyio
async def test_timeout_raises_clear_error_and_connection_stays_usable() -> None:
    with anyio.fail_after(10):
        async with serving() as srv, client() as c:
            addr = f"127.0.0.1:{srv.port}"
            with pytest.raises(RemotingTimeoutError, match=r"request code 34 \(opaque 0\) to 127\.0\.0\.1:\d+ got no response in 0\.2s"):
                await c.invoke(addr, req(sleep="800"), timeout=0.2)
            assert isinstance(RemotingTimeoutError("x"), TimeoutError)
            resp = await c.invoke(addr, req(id="after"), timeout=5)
            assert resp.ext["echo"] == "after"
            await anyio.sleep(0.8)  # the late response to the timed-out request is dropped quietly
            assert (await c.invoke(addr, req(id="again"), timeout=5)).ext["echo"] == "again"


@pytest.mark.anyio
async def test_shorter_timeout_behind_a_longer_one_fires_on_time() -> None:
    with anyio.fail_after(10):
        async with serving() as srv, client() as c:
            conn = await c.connection(f"127.0.0.1:{srv.port}")
            results: dict[str, float] = {}

            async def timed(name: str, timeout: float) -> None:
                t = anyio.current_time()
                with pytest.raises(RemotingTimeoutError):
                    await conn.send_request(req(sleep="3000"), timeout)
                results[name] = anyio.current_time() - t

            async with anyio.create_task_group() as tg:
                tg.start_soon(timed, "long", 1.5)
                await anyio.sleep(0.05)
                tg.start_soon(timed, "short", 0.2)
            assert 0.15 < results["short"] < 1.0  # not held back until the earlier, longer deadline
            assert 1.45 < results["long"] < 3.5
            assert conn._session.pending == 0  # noqa: SLF001 - nothing leaks


@pytest.mark.anyio
async def test_close_fails_pending_requests_and_client_reconnects() -> None:
    with anyio.fail_after(10):
        async with serving() as srv, client() as c:
            addr = f"127.0.0.1:{srv.port}"
            first = await c.connection(addr)
            closed: list[Connection] = []
            first.on_close(closed.append)
            with pytest.raises(RemotingClosedError, match="closed before the response"):
                await c.invoke(addr, req(close="1"), timeout=5)
            await first.wait_closed()
            assert closed == [first] and first.closed
            with pytest.raises(RemotingClosedError):
                await first.send_request(req(), 1)
            resp = await c.invoke(addr, req(id="new"), timeout=5)  # a fresh connection
            assert resp.ext["echo"] == "new" and (await c.connection(addr)) is not first


@pytest.mark.anyio
async def test_connect_failure() -> None:
    with anyio.fail_after(10):
        async with serving() as srv:
            port = srv.port
        async with client() as c:
            with pytest.raises(RemotingConnectError, match=f"connect to 127.0.0.1:{port} failed"):
                await c.invoke(f"127.0.0.1:{port}", req(), timeout=2)
            with pytest.raises(ValueError, match="not host:port"):
                await c.invoke("nohost", req(), timeout=2)


@pytest.mark.anyio
async def test_handler_errors_become_error_responses(caplog: pytest.LogCaptureFixture) -> None:
    with anyio.fail_after(10):
        async with serving() as srv, client() as c:
            addr = f"127.0.0.1:{srv.port}"
            with caplog.at_level(logging.WARNING, logger=LOG):
                resp = await c.invoke(addr, req(fail="1"), timeout=5)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "handler exploded" in (resp.remark or "")
            resp = await c.invoke(addr, req(header="1"), timeout=5)
            assert resp.code == HeaderError("x", "").code
            assert resp.remark == "the custom header field 'requiredField' is missing"
            assert (await c.invoke(addr, req(id="ok"), timeout=5)).ext["echo"] == "ok"


@pytest.mark.anyio
async def test_idle_connection_closed_and_reopened() -> None:
    with anyio.fail_after(10):
        async with serving(idle_timeout=0.3) as srv, client() as c:
            addr = f"127.0.0.1:{srv.port}"
            conn = await c.connection(addr)
            await c.invoke(addr, req(), timeout=5)
            await conn.wait_closed()
            assert srv.connections() == []
            assert (await c.invoke(addr, req(id="z"), timeout=5)).ext["echo"] == "z"


# --------------------------------------------------------------------------- bad peers


async def _assert_closed_by_server(stream: anyio.abc.SocketStream) -> None:
    with anyio.fail_after(3):
        try:
            while True:
                await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOG and r.levelno >= logging.WARNING]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "bad frame: frame of 1195725860 bytes exceeds"),
        (struct.pack(">iI", 12, 100) + b"{}" + b"\x00" * 6, "header length 100 exceeds the 12-byte frame"),
        (struct.pack(">iI", 8, 4) + b"{x:1", "bad JSON header"),
        (struct.pack(">i", 20 * 1024 * 1024 + 4) + b"\x00" * 1024, "frame of 20971528 bytes exceeds the 16777216"),
        (struct.pack(">iI", 6, 0x05000002) + b"{}", "unknown serialize type 5"),
    ],
    ids=["garbage", "truncated-header", "bad-json", "20MiB", "serialize-type"],
)
async def test_bad_frame_closes_only_that_connection(
    payload: bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    with anyio.fail_after(10):
        async with serving() as srv, client() as good:
            addr = f"127.0.0.1:{srv.port}"
            assert (await good.invoke(addr, req(id="before"), timeout=5)).ext["echo"] == "before"
            caplog.clear()
            with caplog.at_level(logging.DEBUG, logger=LOG):
                bad = await anyio.connect_tcp("127.0.0.1", srv.port)
                async with bad:
                    local_port = bad.extra(anyio.abc.SocketAttribute.local_port)
                    await bad.send(payload)
                    await _assert_closed_by_server(bad)
                await anyio.sleep(0.05)
            warnings = _warnings(caplog)
            assert len(warnings) == 1, [r.getMessage() for r in warnings]
            line = warnings[0].getMessage()
            assert f"127.0.0.1:{local_port}" in line and reason in line
            assert (await good.invoke(addr, req(id="after"), timeout=5)).ext["echo"] == "after"
            assert len(srv.connections()) == 1


@pytest.mark.anyio
async def test_oversized_frame_rejected_before_its_body_arrives() -> None:
    with anyio.fail_after(10):
        async with serving(max_frame_size=64 * 1024) as srv:
            bad = await anyio.connect_tcp("127.0.0.1", srv.port)
            async with bad:
                await bad.send(struct.pack(">iI", 1024 * 1024, 2) + b"{}")  # announces 1 MiB, sends 10 B
                await _assert_closed_by_server(bad)


@pytest.mark.anyio
async def test_peer_closing_mid_frame_affects_nobody(caplog: pytest.LogCaptureFixture) -> None:
    with anyio.fail_after(10):
        async with serving() as srv, client() as good:
            addr = f"127.0.0.1:{srv.port}"
            frame = encode(req(id="cut", body=b"x" * 100))
            bad = await anyio.connect_tcp("127.0.0.1", srv.port)
            with caplog.at_level(logging.WARNING, logger=LOG):
                await bad.send(frame[: len(frame) // 2])
                await bad.aclose()
                await anyio.sleep(0.1)
            assert _warnings(caplog) == []
            assert (await good.invoke(addr, req(id="fine"), timeout=5)).ext["echo"] == "fine"
            assert len(srv.connections()) == 1


# --------------------------------------------------------------------------- server → client


@pytest.mark.anyio
async def test_server_to_client_oneway_and_request() -> None:
    notified = anyio.Event()
    client_got: list[RemotingCommand] = []

    async def client_handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        client_got.append(cmd)
        if cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED:
            notified.set()
            return None
        return cmd.response(body=b"running-info")

    server_side: list[Connection] = []

    async def server_handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        server_side.append(conn)
        return cmd.response()

    with anyio.fail_after(10):
        async with serving(server_handler) as srv, client(client_handler) as c:
            await c.invoke(f"127.0.0.1:{srv.port}", req(RequestCode.HEART_BEAT), timeout=5)
            (conn,) = srv.connections()
            assert conn is server_side[0]
            assert conn.remote_addr[0] == "127.0.0.1" and conn.local_addr[1] == srv.port
            conn.attributes["clientId"] = "c1"
            notify = RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "G"})
            notify.language = "JAVA"
            await conn.send_oneway(notify)
            await notified.wait()
            assert client_got[0].is_oneway and client_got[0].ext == {"consumerGroup": "G"}
            resp = await conn.send_request(req(RequestCode.GET_CONSUMER_RUNNING_INFO), timeout=5)
            assert resp.code == 0 and resp.body == b"running-info"


@pytest.mark.anyio
async def test_client_without_handler_answers_not_supported() -> None:
    with anyio.fail_after(10):
        async with serving() as srv, client() as c:
            await c.invoke(f"127.0.0.1:{srv.port}", req(), timeout=5)
            (conn,) = srv.connections()
            resp = await conn.send_request(req(RequestCode.GET_CONSUMER_RUNNING_INFO), timeout=5)
            assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert resp.remark == " request type 307 not supported"


@pytest.mark.anyio
async def test_cpp_style_oneway_with_flag_zero_is_answered_and_client_drops_unknown_opaque() -> None:
    with anyio.fail_after(10):
        async with raw_peer() as (srv, stream):
            cmd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {"id": "cpp"}, opaque=5)
            cmd.language = "CPP"
            await stream.send(encode(cmd))
            dec = FrameDecoder()
            got: list[RemotingCommand] = []
            while not got:
                got = dec.feed(await stream.receive())
            assert got[0].opaque == 5 and got[0].is_response and got[0].ext["echo"] == "cpp"


# --------------------------------------------------------------------------- plugin options


def test_plugin_options() -> None:
    plugin = TcpRemotingPlugin({"max_frame_size": 1024, "idle_timeout": 5})
    server = plugin.rmq_remoting_make_server(kernel=None, config=cfg(), handler=echo_handler)
    assert server.config.max_frame_size == 1024 and server.config.idle_timeout == 5.0
    assert TcpRemotingPlugin().rmq_remoting_make_server(kernel=None, config=cfg(), handler=echo_handler) \
        .config.max_frame_size == 16 * 1024 * 1024
    with pytest.raises(ValueError, match=r"^unknown option 'idle'; known options: max_frame_size, idle_timeout$"):
        TcpRemotingPlugin({"idle": 1})
    with pytest.raises(ValueError, match="idle_timeout must be"):
        TcpRemotingPlugin({"idle_timeout": -1})
    with pytest.raises(ValueError, match="option max_frame_size: expected int, got str 'big'"):
        TcpRemotingPlugin({"max_frame_size": "big"})


def test_plugin_option_errors_name_the_plugin_as_for_every_plugin() -> None:
    """The kernel's loader names the plugin (``rmq.remoting:tcp``); the plugin's own message does not repeat it."""
    from rmq.kernel.plugin_manager import PluginError, load_plugin

    with pytest.raises(PluginError, match=r"^plugin rmq\.remoting:tcp \(.*\) rejected its options: unknown option 'idle'; "):
        load_plugin("remoting", "tcp", {"idle": 1})


# --------------------------------------------------------------------------- coalesced writes


@pytest.mark.anyio
async def test_answers_of_one_read_leave_in_order_and_coalesced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests that arrive together are answered in arrival order, in fewer writes than answers;
    a held request on the same connection delays none of them and is answered afterwards."""
    from rmq.plugins.remoting_tcp.aioconn import AsyncioConnection

    flushes = {"n": 0}
    real_flush = AsyncioConnection._flush  # noqa: SLF001

    def counting_flush(self: AsyncioConnection) -> None:
        if self._wbuf:  # noqa: SLF001
            flushes["n"] += 1
        real_flush(self)

    monkeypatch.setattr(AsyncioConnection, "_flush", counting_flush)
    with anyio.fail_after(10):
        async with raw_peer() as (srv, stream):
            held = encode(RemotingCommand.request(RequestCode.HEART_BEAT, {"id": "held", "sleep": "300"},
                                                  opaque=1000))
            quick = [encode(RemotingCommand.request(RequestCode.HEART_BEAT, {"id": str(i)}, opaque=i))
                     for i in range(50)]
            await stream.send(held + b"".join(quick))
            dec = FrameDecoder()
            got: list[RemotingCommand] = []
            while len(got) < 51:
                got.extend(dec.feed(await stream.receive()))
    assert [r.opaque for r in got] == [*range(50), 1000]
    assert [r.ext["echo"] for r in got[:50]] == [str(i) for i in range(50)]
    assert 0 < flushes["n"] < 51  # on asyncio the server writes through AsyncioConnection


@pytest.mark.anyio
async def test_requests_of_one_read_share_a_task_until_one_suspends() -> None:
    """A read's requests are served in one task; one that suspends (in a cancel scope, in a worker
    thread, held) keeps that task and the rest go on without it: all are answered, the held one last."""
    release = anyio.Event()

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        kind = cmd.ext.get("kind")
        with anyio.move_on_after(5):  # entered before the first suspension, exited after it
            if kind == "held":
                await release.wait()
            elif kind == "thread":
                await anyio.to_thread.run_sync(lambda: None)
            elif kind == "yield":
                await anyio.lowlevel.checkpoint()
        return cmd.response(ext={"echo": cmd.ext["id"]})

    kinds = ["plain", "yield", "plain", "held", "plain", "thread", "plain", "yield"]
    with anyio.fail_after(10):
        async with raw_peer(handler) as (srv, stream):
            await stream.send(b"".join(
                encode(RemotingCommand.request(RequestCode.HEART_BEAT, {"id": str(i), "kind": k}, opaque=i))
                for i, k in enumerate(kinds)))
            dec = FrameDecoder()
            got: list[RemotingCommand] = []
            while len(got) < len(kinds) - 1:
                got.extend(dec.feed(await stream.receive()))
            release.set()
            while len(got) < len(kinds):
                got.extend(dec.feed(await stream.receive()))
    assert all(r.code == 0 for r in got)
    assert got[-1].opaque == 3
    assert sorted(r.opaque for r in got) == list(range(len(kinds)))
    assert [r.ext["echo"] for r in got] == [str(r.opaque) for r in got]


async def one_read_of_requests(stream: Any, n: int) -> list[RemotingCommand]:
    """Send ``n`` heartbeats (opaques 0..n-1) in one write, so they arrive in one read; their answers."""
    await stream.send(b"".join(encode(RemotingCommand.request(RequestCode.HEART_BEAT, opaque=i)) for i in range(n)))
    dec = FrameDecoder()
    got: list[RemotingCommand] = []
    while len(got) < n:
        got.extend(dec.feed(await stream.receive()))
    return got


@pytest.mark.anyio
async def test_a_read_of_heavy_requests_yields_to_the_loop_and_keeps_its_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Requests of one read that never suspend are served back to back only up to the turn budget:
    a callback queued by the first one (another peer, the flow control's clock) runs before the
    last one is served, and the answers still come back in arrival order."""
    import asyncio
    import time

    from rmq.plugins.remoting_tcp import aioconn

    monkeypatch.setattr(aioconn, "TURN_BUDGET", 0.002)
    served: list[int] = []
    seen_by_callback: list[int] = []

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if not served:
            asyncio.get_running_loop().call_soon(lambda: seen_by_callback.append(len(served)))
        served.append(cmd.opaque)
        busy_until = time.perf_counter() + 0.001  # a heavy request (a big batch put): CPU, no await
        while time.perf_counter() < busy_until:
            pass
        return cmd.response()

    with anyio.fail_after(10):
        async with raw_peer(handler) as (srv, stream):
            got = await one_read_of_requests(stream, 20)
    assert [r.opaque for r in got] == list(range(20)) and served == list(range(20))
    assert seen_by_callback and seen_by_callback[0] < 20  # the loop ran it before the read was done


@pytest.mark.anyio
async def test_suspending_requests_of_a_read_all_start_before_the_turn_ends() -> None:
    """What SYNC_FLUSH's group commit needs: once a peer's requests suspend, every request of a
    read has started (appended) before a callback the first one queues runs (the flush round)."""
    import asyncio

    started: list[int] = []
    seen_by_round: list[int] = []
    state = {"queued": False}

    async def handler(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        started.append(cmd.opaque)
        if not state["queued"]:
            state["queued"] = True
            asyncio.get_running_loop().call_soon(lambda: seen_by_round.append(len(started)))
        await anyio.lowlevel.checkpoint()  # waits, as a put waits for its flush round
        return cmd.response()

    with anyio.fail_after(10):
        async with raw_peer(handler) as (srv, stream):
            for _read in range(3):
                started.clear()
                state["queued"] = False
                got = await one_read_of_requests(stream, 8)
                assert sorted(r.opaque for r in got) == list(range(8))
    assert seen_by_round[1:] == [8, 8]  # the first read taught the connection that requests suspend
