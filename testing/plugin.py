"""The pytest plugin of ``rmq.testing`` (entry point ``pytest11: rmq``), loaded wherever rmq is installed.

It gives a project's tests, as pytest's ``pytester`` gives a plugin's, real daemons:
``rmqd_factory(**kwargs)`` starts ``rmqd`` processes (``RmqdProcess`` arguments: roles,
config tables, extra plugins) on free loopback ports with temp stores and stops each at
teardown; ``rmqd`` is one embedded-style daemon (namesrv + broker). Nothing starts unless
a test asks for a fixture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rmq.testing.daemon import RmqdProcess


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
