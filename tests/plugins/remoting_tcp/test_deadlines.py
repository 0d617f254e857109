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
