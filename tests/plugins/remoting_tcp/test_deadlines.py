"""A client connection's request deadlines (one timer per connection, not one per request) and its
request writes (a burst issued in one loop turn leaves in fewer writes), on asyncio and uvloop."""

from __future__ import annotations

import time

import anyio
import pytest

from rmq.plugins.remoting_tcp import RemotingTimeoutError

from .conftest import client, req, serving

SLACK = 0.5  # generous: the bound says "fires at its deadline", not how fast a loaded VM is


async def _timed_out(conn: object, timeout: float, sleep_ms: int = 3000) -> float:
    """Seconds until a request the server answers after ``sleep_ms`` fails with a timeout."""
    t = time.monotonic()
    with pytest.raises(RemotingTimeoutError, match=rf"got no response in {timeout:g}s"):
        await conn.send_request(req(sleep=str(sleep_ms)), timeout)  # type: ignore[attr-defined]
    return time.monotonic() - t


@pytest.mark.anyio
async def test_request_times_out_at_its_deadline_after_many_answered_ones() -> None:
    """The connection's timer was armed for requests long answered: a later short request still fails
    at its own deadline, never before it, and nothing stays pending."""
    with anyio.fail_after(20):
        async with serving() as srv, client() as c:
            conn = await c.connection(f"127.0.0.1:{srv.port}")
            for i in range(300):
                assert (await conn.send_request(req(id=str(i)), 5.0)).ext["echo"] == str(i)
            for timeout in (0.3, 0.05, 0.0):
                elapsed = await _timed_out(conn, timeout)
                assert timeout <= elapsed < timeout + SLACK
            assert (await conn.send_request(req(id="after"), 5.0)).ext["echo"] == "after"
            assert conn._session.pending == 0  # noqa: SLF001


@pytest.mark.anyio
async def test_timeouts_fire_in_deadline_order_whatever_the_order_sent() -> None:
    """Requests sent long-first, short-first and cancelled by their caller: each fails at its own
    deadline (the timer re-arms for an earlier deadline, and past a withdrawn one)."""
    with anyio.fail_after(20):
        async with serving() as srv, client() as c:
            conn = await c.connection(f"127.0.0.1:{srv.port}")
            took: dict[str, float] = {}

            async def timed(name: str, timeout: float) -> None:
                took[name] = await _timed_out(conn, timeout)

            async def withdrawn() -> None:
                with anyio.move_on_after(0.05):
                    await conn.send_request(req(sleep="3000"), 0.1)

            async with anyio.create_task_group() as tg:
                tg.start_soon(timed, "long", 1.2)
                tg.start_soon(withdrawn)  # the timer is armed for its deadline, then it is gone
                await anyio.sleep(0.02)
                tg.start_soon(timed, "middle", 0.6)
                tg.start_soon(timed, "short", 0.25)
            for name, timeout in (("short", 0.25), ("middle", 0.6), ("long", 1.2)):
                assert timeout <= took[name] < timeout + SLACK, (name, took)
            assert conn._session.pending == 0  # noqa: SLF001


@pytest.mark.anyio
async def test_a_burst_of_requests_leaves_in_fewer_writes_each_answered_once() -> None:
    """Requests issued in one loop turn: the first is written at once, the rest join one write at the
    turn's end; every one gets its own answer."""
    with anyio.fail_after(20):
        async with serving() as srv, client() as c:
            conn = await c.connection(f"127.0.0.1:{srv.port}")
            transport = conn._transport  # noqa: SLF001
            writes = {"n": 0}
            real_write = transport.write

            def counting_write(data: bytes) -> None:
                writes["n"] += 1
                real_write(data)

            conn._transport = type("Counting", (), {  # noqa: SLF001 - a view of the real transport
                "write": staticmethod(counting_write), "is_closing": transport.is_closing,
                "__getattr__": lambda _self, name: getattr(transport, name)})()
            echoed: dict[int, str] = {}

            async def one(i: int) -> None:
                echoed[i] = (await conn.send_request(req(id=str(i)), 5.0)).ext["echo"]

            async with anyio.create_task_group() as tg:
                for i in range(50):
                    tg.start_soon(one, i)
            assert echoed == {i: str(i) for i in range(50)}
            assert 0 < writes["n"] < 50
            conn._transport = transport  # noqa: SLF001


@pytest.mark.anyio
async def test_callback_requests_get_each_outcome_once() -> None:
    """``start_request``: no task per request; the callback runs once, never from the call itself, with the
    answer, the timeout at the request's deadline, or the close; nothing stays pending."""
    with anyio.fail_after(20):
        async with serving() as srv, client() as c:
            addr = f"127.0.0.1:{srv.port}"
            assert not c.start_request(addr, req(id="x"), 1.0, print)  # no connection yet: nothing sent
            conn = await c.connection(addr)
            got: dict[str, list[tuple[object, object]]] = {}
            reached = {n: anyio.Event() for n in (51, 52, 53)}

            def on(name: str) -> object:
                def cb(resp: object, exc: object) -> None:
                    got.setdefault(name, []).append((resp, exc))
                    n = sum(map(len, got.values()))
                    if n in reached:
                        reached[n].set()
                return cb

            t = time.monotonic()
            for i in range(50):
                assert c.start_request(addr, req(id=str(i)), 5.0, on(str(i)))
            assert c.start_request(addr, req(sleep="3000"), 0.2, on("late"))
            assert c.start_request(addr, req(sleep="3000"), 10.0, on("closed"))
            assert not got  # outcomes arrive from the loop, not from the call
            await reached[51].wait()
            assert all(got[str(i)][0][0].ext["echo"] == str(i) for i in range(50))  # type: ignore[union-attr]
            (resp, exc), = got["late"]
            assert resp is None and isinstance(exc, RemotingTimeoutError)
            assert 0.2 <= time.monotonic() - t < 0.2 + SLACK + 1.0
            await conn.aclose()
            await reached[52].wait()
            (resp, exc), = got["closed"]
            assert resp is None and "closed" in str(exc)
            assert all(len(v) == 1 for v in got.values())
            assert conn._session.pending == 0  # noqa: SLF001
            conn.request_callback(req(id="after"), 1.0, on("after"))  # closed: the error, from the loop
            assert "after" not in got
            await reached[53].wait()
            assert got["after"][0][0] is None
