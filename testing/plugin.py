"""The pytest plugin of ``rmq.testing`` (entry point ``pytest11: rmq``), loaded wherever rmq is installed.

It gives a project's tests, as pytest's ``pytester`` gives a plugin's, real daemons:
``rmqd_factory(**kwargs)`` starts ``rmqd`` processes (``RmqdProcess`` arguments: roles,
config tables, extra plugins) on free loopback ports with temp stores and stops each at
teardown; ``rmqd`` is one embedded-style daemon (namesrv + broker). Nothing starts unless
a test asks for a fixture.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from rmq.testing.daemon import RmqdProcess

_PASSED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Remember whether a test's call passed, so its daemons' stores can go with it."""
    report = yield
    if report.when == "call":
        item.stash[_PASSED] = report.passed
    return report


@pytest.fixture
def rmqd_factory(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., RmqdProcess]]:
    """Start rmqd processes (namesrv + broker by default); all are stopped at teardown.

    A passed test's stores are removed at once (each commitlog segment is reserved whole, so a
    suite's worth would fill a shared disk); a failed test's stay for reading.
    """
    started: list[RmqdProcess] = []

    def start(**kwargs: Any) -> RmqdProcess:
        proc = RmqdProcess(tmp_path_factory.mktemp("rmqd"), **kwargs)
        started.append(proc)
        return proc.start()

    yield start
    for proc in reversed(started):
        proc.stop()
    if request.node.stash.get(_PASSED, False):
        for proc in started:
            shutil.rmtree(proc.workdir, ignore_errors=True)


@pytest.fixture
def rmqd(rmqd_factory: Callable[..., RmqdProcess]) -> RmqdProcess:
    """One embedded-style rmqd (namesrv + broker) on free loopback ports with a temp store."""
    return rmqd_factory()
