"""Kernel lifetime: lifespans enter in plugin order and exit in reverse; tracing; no globals."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from rmq.kernel import hookimpl
from rmq.testing import make_kernel


class Recorder:
    def __init__(self, name: str, events: list[str]) -> None:
        self.name, self.events = name, events

    @hookimpl
    def rmq_configure(self, kernel: object) -> None:
        self.events.append(f"configure {self.name}")

    @hookimpl
    def rmq_unconfigure(self, kernel: object) -> None:
        self.events.append(f"unconfigure {self.name}")

    @hookimpl
    def rmq_lifespan(self, kernel: object):  # type: ignore[no-untyped-def]
        @asynccontextmanager
        async def span() -> AsyncIterator[None]:
            self.events.append(f"enter {self.name}")
            try:
                yield
            finally:
                self.events.append(f"exit {self.name}")

        return span()


@pytest.mark.anyio
async def test_lifespans_enter_in_order_and_exit_in_reverse() -> None:
    events: list[str] = []
    kernel = make_kernel([Recorder("a", events), Recorder("b", events), Recorder("c", events)])
    async with kernel:
        events.append("running")
        kernel.task_group  # available while running  # noqa: B018
    assert events[events.index("enter a") :] == [
        "enter a", "enter b", "enter c", "running", "exit c", "exit b", "exit a",
        "unconfigure c", "unconfigure b", "unconfigure a",
    ]
    assert events[0].startswith("configure")


@pytest.mark.anyio
async def test_failed_lifespan_unwinds_the_ones_already_entered() -> None:
    events: list[str] = []

    class Boom:
        @hookimpl
        def rmq_lifespan(self, kernel: object):  # type: ignore[no-untyped-def]
            @asynccontextmanager
            async def span() -> AsyncIterator[None]:
                raise RuntimeError("cannot bind")
                yield

            return span()

    kernel = make_kernel([Recorder("a", events), Boom()])
    with pytest.raises(RuntimeError, match="cannot bind"):
        async with kernel:
            pass
    assert "enter a" in events and "exit a" in events


def test_kernels_share_no_state() -> None:
    a, b = make_kernel(), make_kernel()
    assert a.pm is not b.pm and a.services is not b.services


def test_trace_env_logs_hook_calls(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("RMQ_TRACE_PLUGINS", "1")
    kernel = make_kernel([Recorder("t", [])])
    with caplog.at_level(logging.INFO, logger="rmq.plugins.trace"):
        kernel.hook.rmq_configure(kernel=kernel)
    lines = [r.getMessage() for r in caplog.records if r.name == "rmq.plugins.trace"]
    assert any(line.startswith("call rmq_configure(kernel)") for line in lines)
    assert any(line.startswith("done rmq_configure") for line in lines)
