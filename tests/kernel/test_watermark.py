"""``Watermark``: waiters wake when the mark passes them, time out on their own, never poll."""

from __future__ import annotations

import anyio
import pytest

from rmq.kernel.watermark import Watermark


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_waiters_wake_in_order_of_their_targets() -> None:
    w = Watermark(10)
    assert await w.wait_for(5) is True  # already there: no yield needed
    woke: list[int] = []

    async def wait(n: int) -> None:
        assert await w.wait_for(n, 5)
        woke.append(n)

    async with anyio.create_task_group() as tg:
        for n in (30, 20, 40):
            tg.start_soon(wait, n)
        await anyio.wait_all_tasks_blocked()
        w.advance(25)
        await anyio.wait_all_tasks_blocked()
        assert woke == [20] and w.waiters == 2
        w.advance(5)  # never goes back
        assert w.value == 25
        w.advance(40)
    assert sorted(woke) == [20, 30, 40] and w.waiters == 0


@pytest.mark.anyio
async def test_timeout_and_listeners() -> None:
    w = Watermark()
    seen: list[int] = []
    unsubscribe = w.subscribe(seen.append)
    assert await w.wait_for(1, 0.02) is False
    w.advance(3)
    w.advance(3)
    unsubscribe()
    w.advance(4)
    assert seen == [3] and w.value == 4 and w.waiters == 0


@pytest.mark.anyio
async def test_one_timer_serves_many_deadlines_and_cancelled_waiters_are_dropped() -> None:
    w = Watermark()
    results: dict[int, bool] = {}

    async def wait(n: int, timeout: float) -> None:
        results[n] = await w.wait_for(n, timeout)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait, 10, 0.05)
        tg.start_soon(wait, 20, 5)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await w.wait_for(30)  # cancelled before it could wait
        await anyio.sleep(0.15)  # the 0.05 s waiter times out; the other keeps waiting
        assert results == {10: False} and w.waiters == 1
        w.advance(25)
    assert results == {10: False, 20: True} and w.waiters == 0


class Held:
    """A waiter without a coroutine (what a connection holding an answer registers)."""

    def __init__(self, w: Watermark, n: int) -> None:
        self.w, self.n = w, n
        self.calls: list[bool] = []

    def done(self) -> bool:
        return bool(self.calls)

    def set_result(self, _: object) -> None:
        self.calls.append(self.w.value >= self.n)


@pytest.mark.anyio
async def test_add_waiter_wakes_a_plain_object_on_the_advance_or_its_timeout() -> None:
    import asyncio

    loop = asyncio.get_running_loop()
    w = Watermark()
    reached, late = Held(w, 10), Held(w, 50)
    w.add_waiter(10, reached, 5, loop)
    w.add_waiter(50, late, 0.05, loop)
    w.advance(5)
    assert reached.calls == [] and late.calls == []  # an advance short of the target wakes nobody
    w.advance(12)
    assert reached.calls == [True] and late.calls == []  # woken by the advance itself, synchronously
    await anyio.sleep(0.15)
    assert late.calls == [False] and w.waiters == 0  # the timeout: woken once, the mark short of it
    w.advance(60)
    assert late.calls == [False]  # never woken twice
