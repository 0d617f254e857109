"""Shared fixtures: real rmqd processes on loopback, the anyio backend."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rmq.kernel.testing.daemon import RmqdProcess


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def rmqd_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., RmqdProcess]]:
    """Start rmqd processes (namesrv + broker by default); all are stopped at teardown."""
    started: list[RmqdProcess] = []

    def start(**kwargs: Any) -> RmqdProcess:
        proc = RmqdProcess(tmp_path_factory.mktemp("rmqd"), **kwargs)
        started.append(proc)
        return proc.start()

    yield start
    for proc in reversed(started):
        proc.stop()


@pytest.fixture
def rmqd(rmqd_factory: Callable[..., RmqdProcess]) -> RmqdProcess:
    """One embedded-style rmqd (namesrv + broker) on free loopback ports with a temp store."""
    return rmqd_factory()
