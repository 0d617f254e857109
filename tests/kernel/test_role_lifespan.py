"""The role seam: ``rmq_role_lifespan`` contexts run exactly while the broker holds their role.

An in-process kernel with inline plugins that count enters and exits and run a background
task while entered; the kernel is promoted and demoted several times.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import pytest

from rmq.kernel import hookimpl
from rmq.kernel.hookspecs.lifecycle import MASTER, SLAVE
from rmq.testing import make_kernel


class RoleService:
    """A test plugin whose ``service(kernel, broker)`` runs while the broker has ``role`` (the kernel
    names a role service after its function)."""

    role = MASTER

    @hookimpl
    def rmq_role_lifespan(self, kernel: Any, role: str, broker: Any) -> Any:
        return self.service(kernel, broker) if role == self.role else None

    def service(self, kernel: Any, broker: Any) -> AbstractAsyncContextManager[None]:
        raise NotImplementedError


class Counting(RoleService):
    """A service of one role: counts enters/exits, and ticks in a background task while entered."""

    def __init__(self, name: str, role: str, events: list[str]) -> None:
        self.name, self.role, self.events = name, role, events
        self.enters = self.exits = self.ticks = 0
        self.running = False

    @asynccontextmanager
    async def service(self, kernel: Any, broker: Any) -> AsyncIterator[None]:
        assert broker == "the broker"
        self.enters += 1
        self.events.append(f"enter {self.name}")

        async def tick() -> None:
            self.running = True
            try:
                while True:
                    self.ticks += 1
                    await anyio.sleep(0.001)
            finally:
                self.running = False

        try:
            async with kernel.background(tick):
                yield
        finally:
            self.exits += 1
            self.events.append(f"exit {self.name}")


class Failing(RoleService):
    @asynccontextmanager
    async def broken(self, kernel: Any, broker: Any) -> AsyncIterator[None]:
        raise OSError("timer log unreadable")
        yield  # pragma: no cover

    service = broken


async def settle() -> None:
    for _ in range(20):
        await anyio.sleep(0.005)


@pytest.mark.anyio
async def test_promotions_and_demotions_enter_and_exit_role_services_in_plugin_order() -> None:
    events: list[str] = []
    sched, timer = Counting("schedule", MASTER, events), Counting("timer", MASTER, events)
    follower = Counting("follower", SLAVE, events)
    kernel = make_kernel([sched, timer, follower])
    async with kernel:
        assert kernel.role is None and kernel.role_services == []
        for cycle in range(1, 4):
            await kernel.change_role(MASTER, broker="the broker")
            await settle()
            assert kernel.role == MASTER and kernel.role_services == ["service", "service"]
            assert (sched.running, timer.running, follower.running) == (True, True, False)
            assert (sched.enters, timer.enters, follower.exits) == (cycle, cycle, cycle - 1)
            await kernel.change_role(MASTER, broker="the broker")  # held already: nothing happens
            assert sched.enters == cycle
            await kernel.change_role(SLAVE, broker="the broker")
            await settle()
            assert kernel.role == SLAVE and kernel.role_services == ["service"]
            assert (sched.running, timer.running, follower.running) == (False, False, True)
            ticks = sched.ticks
            await settle()
            assert sched.ticks == ticks  # its task is gone, not just idle
        await kernel.change_role(MASTER, broker="the broker")
        await kernel.change_role(None)  # the broker stopping: every role service exits
        assert kernel.role is None and kernel.role_services == [] and not (sched.running or timer.running)
    assert events[:6] == ["enter schedule", "enter timer", "exit timer", "exit schedule", "enter follower",
                          "exit follower"]
    assert (sched.enters, sched.exits, timer.enters, timer.exits, follower.enters, follower.exits) == (4, 4, 4, 4, 3, 3)


@pytest.mark.anyio
async def test_a_service_that_fails_to_start_is_logged_and_the_others_run(caplog: pytest.LogCaptureFixture) -> None:
    events: list[str] = []
    sched = Counting("schedule", MASTER, events)
    kernel = make_kernel([Failing(), sched])
    async with kernel:
        with caplog.at_level(logging.ERROR, logger="rmq.kernel"):
            await kernel.change_role(MASTER, broker="the broker")
        assert kernel.role == MASTER and kernel.role_services == ["service"] and sched.enters == 1
        assert any("MASTER service broken did not start" in r.getMessage() for r in caplog.records)
        await kernel.change_role(SLAVE, broker="the broker")
        assert sched.exits == 1


@pytest.mark.anyio
async def test_a_cancelled_caller_still_completes_the_role_change() -> None:
    events: list[str] = []
    slow_exit: list[str] = []

    class Slow(RoleService):
        @asynccontextmanager
        async def service(self, kernel: Any, broker: Any) -> AsyncIterator[None]:
            try:
                yield
            finally:
                await anyio.sleep(0.05)  # persisting progress takes a while
                slow_exit.append("persisted")

    sched = Counting("schedule", MASTER, events)
    kernel = make_kernel([sched, Slow()])
    async with kernel:
        await kernel.change_role(MASTER, broker="the broker")
        with anyio.move_on_after(0.01):  # e.g. the connection that carried NOTIFY_BROKER_ROLE_CHANGED closed
            await kernel.change_role(SLAVE, broker="the broker")
        assert slow_exit == ["persisted"] and sched.exits == 1 and kernel.role == SLAVE
