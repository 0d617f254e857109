"""Shared fixtures and the suite's tiers. ``rmqd`` and ``rmqd_factory`` (real daemons on loopback) come
from rmq's own pytest plugin, ``rmq.testing.plugin``, as they would in any project's tests.

Tiers (the Makefile's targets; markers in pyproject.toml):
- ``integration`` is set here on every test that starts processes through a fixture (``rmqd``,
  ``rmqd_factory``, ``spark``, the client and Spark suites' shared daemons ``cluster`` / ``broker``, and
  whatever builds on them) or is marked ``spark``, ``java``, ``faults`` or uses ``default_ports``; a
  test that starts processes itself carries the mark in its module. ``--fast`` (``make test-fast``)
  leaves the tier out and fails any remaining test that starts a process, so the rule stays true.
- Under pytest-xdist (``--dist loadgroup``) the tests of one JVM (``spark``: one session-scoped
  SparkSession; ``java``: the Apache RocketMQ build) run on one worker each, and so do the tests that
  bind RocketMQ's default ports (``default_ports``), which also hold a machine-wide lock against other
  test runs. Every other test is isolated by ``rmq.testing.daemon.free_port`` (a port block per
  process) and pytest's per-worker temp dirs.
"""

from __future__ import annotations

import fcntl
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from rmq.testing import faults
from rmq.testing.daemon import RmqdProcess, lock_dir

# property tests keep their example counts but lose Hypothesis' 200 ms deadline and its too-slow check:
# on a shared machine (xdist workers, other test runs) a scheduler pause fails them, not the code
settings.register_profile("rmq-suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rmq-suite")

# fixtures that start rmqd (or a JVM); a test whose fixture closure holds one starts processes
PROCESS_FIXTURES = frozenset({"rmqd", "rmqd_factory", "spark", "cluster", "broker"})
# markers whose tests share one xdist worker: one JVM, or ports only one process can bind
WORKER_GROUPS = {"spark": "spark-jvm", "java": "java-jvm"}
TIER_MARKERS = ("spark", "java", "faults")
FAULTS = Path(__file__).parent / "faults"  # the fault matrix: every cell starts a cluster
SPAWN_EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.system", "os.exec"})
_spawned: list[str] = []  # --fast: the processes the running test started


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true",
                     help="the inner loop: leave out tests that start processes (integration, slow, faults) and "
                          "fail a remaining test that starts one")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def rmqd_factory(rmqd_factory: Callable[..., RmqdProcess], request: pytest.FixtureRequest) -> Callable[..., RmqdProcess]:
    """This suite's daemons open no gRPC endpoint unless the test is marked ``grpc`` or asks with ``proxy=True``:
    grpc's imports are ~75 ms CPU of each start and the suite starts hundreds (the fixture's public default,
    a daemon with the endpoint, is unchanged for other projects)."""
    wanted = request.node.get_closest_marker("grpc") is not None

    def start(**kwargs: Any) -> RmqdProcess:
        kwargs.setdefault("proxy", wanted)
        return rmqd_factory(**kwargs)

    return start


@pytest.fixture
def default_ports() -> Iterator[None]:
    """For a test that binds RocketMQ's default ports (namesrv 9876, broker 10911 with 10909/10912, gRPC
    8081, dashboard 8080): held under a machine-wide lock, so neither another xdist worker nor another test run binds
    them meanwhile (the tests using it share one worker too)."""
    with open(lock_dir() / "default-ports.lock", "wb") as f:
        deadline = time.monotonic() + 240
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("another test run held RocketMQ's default ports for 240 s")
                time.sleep(0.2)
        yield


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    """Tiers and worker groups before any other plugin looks (-m deselection, xdist's groups)."""
    fast = config.getoption("fast")
    keep, dropped = [], []
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if PROCESS_FIXTURES & names or "default_ports" in names or item.path.is_relative_to(FAULTS) or any(
            item.get_closest_marker(m) for m in TIER_MARKERS
        ):
            item.add_marker(pytest.mark.integration)
        for marker, group in WORKER_GROUPS.items():
            if item.get_closest_marker(marker):
                item.add_marker(pytest.mark.xdist_group(group))
        if "default_ports" in names:
            item.add_marker(pytest.mark.xdist_group("default-ports"))
        slow = any(item.get_closest_marker(m) for m in ("integration", "slow"))
        (dropped if fast and slow else keep).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    yield
    if getattr(config.option, "loadgroup", False):
        _group_ids(items)


def _group_ids(items: list[pytest.Item]) -> None:
    """What xdist's worker does for --dist loadgroup (a test's group as a ``@group`` suffix of its id, which
    the scheduler splits on), for pytest >= 9.2: xdist 3.8 still writes the old ``_nodeid`` attribute, so
    groups are silently ignored (pytest-dev/pytest-xdist#1386). A no-op where xdist's suffix took."""
    for item in items:
        groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                         for m in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(groups)
        if groups and not item.nodeid.endswith(suffix) and hasattr(item, "_id"):
            from _pytest.nodeid import NodeId  # pytest >= 9.2's structured node ids

            item._id = NodeId.parse(item.nodeid + suffix)


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in SPAWN_EVENTS and os.environ.get("PYTEST_CURRENT_TEST"):
        what = args[1] if event == "subprocess.Popen" else args[:1]
        _spawned.append(f"{event} {what!r}"[:200])


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("fast"):
        sys.addaudithook(_audit)  # for the life of this (worker) process: --fast is the whole run


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _spawned.clear()


# RMQ_CPU_REPORT=FILE: one line per test, "cpu_seconds wall_start wall_end worker nodeid", appended to FILE:
# the CPU a test cost its worker and the children it reaped (its rmqd processes, client workers), and when
# it ran where. Wall time under xdist on a shared machine says little; CPU says what a test costs, the
# start/end times show the schedule's tail.
_CPU_REPORT = os.environ.get("RMQ_CPU_REPORT")


def _cpu_now() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not _CPU_REPORT:
        return (yield)
    start, wall = _cpu_now(), time.time()
    try:
        return (yield)
    finally:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(_CPU_REPORT, "a") as f:
            f.write(f"{_cpu_now() - start:.3f} {wall:.2f} {time.time():.2f} {worker} {item.nodeid}\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """--fast: a test left in the inner loop must start no process (else it belongs to ``integration``)."""
    yield
    if _spawned and item.config.getoption("fast"):
        pytest.fail(f"started a process under --fast (mark its module `integration`): {_spawned[0]}")


# The fault matrix's summary (make faults; make test's fast slice): each cell records its figures as a
# property of its test report (faults.CELL_PROPERTY), so the table is whole when the cells ran on xdist
# workers. Here rather than in tests/faults/: the xdist controller loads no conftest below tests/ but this one.
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        faults.RESULTS.extend(faults.CellResult(**value) for name, value in report.user_properties
                              if name == faults.CELL_PROPERTY)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if faults.RESULTS:
        terminalreporter.section("fault matrix")
        first: dict[str, int] = {}
        for i, r in enumerate(faults.RESULTS):
            first.setdefault(r.flow, i)
        # a flow's cells together (xdist reports them as they finish), each flow's in the order they ran
        terminalreporter.write_line(faults.format_matrix(sorted(faults.RESULTS, key=lambda r: first[r.flow])))
