"""The Java judge: Apache RocketMQ 4.9.8's own client, tools and broker beside rmqd (``make java``).

Every module here carries ``pytestmark = pytest.mark.java``; ``java_home`` skips with one line when the
4.9.8 build is absent (see rmq.testing.java).

The client suite's fixtures: ``driver_classes`` (the driver's sources, compiled once into pytest's cache
folder), ``judge`` (one rmqd and one Java broker for the whole session, configured alike; see judge.py)
and ``names`` (topic and group names of the test's own, so tests share the brokers)."""

from __future__ import annotations

import fcntl
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq.testing import java
from rmq.testing.daemon import RmqdProcess

from .judge import SRC, Judge, Side

# both brokers alike: SQL92 filters on; transaction check-back soon after a half message is left
# unresolved (RocketMQ's defaults, 6 s / 60 s, would make a check-back test wait a minute)
BROKER_CONF: dict[str, Any] = {
    "enablePropertyFilter": True,
    "transactionTimeOut": 2000,
    "transactionCheckInterval": 1000,
    "traceTopicEnable": True,
}


@pytest.fixture(scope="session")
def java_home() -> Path:
    return java.require()


@pytest.fixture(scope="session")
def driver_classes(java_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``javac`` the driver once per source change, into pytest's temp root (never into the source tree):
    the ``pytest-of-<user>`` folder all runs and xdist workers share, else this run's base temp."""
    base = tmp_path_factory.getbasetemp()
    root = next((p for p in (base, *base.parents) if p.name.startswith("pytest-of-")), base)
    out = root / "java-client-driver" / "classes"
    out.mkdir(parents=True, exist_ok=True)
    with open(out.parent / "compile.lock", "wb") as lock:  # xdist workers compile one at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        return java.compile_java(sorted(SRC.glob("*.java")), out, java_home)


def start_pair(tmp: Path, home: Path, conf: dict[str, Any], rmqd_conf: dict[str, Any] | None = None,
               java_conf: dict[str, Any] | None = None) -> tuple[RmqdProcess, java.JavaBroker]:
    """An rmqd (namesrv + broker) and a Java NameServer + Broker with the same broker settings, started
    together (the JVMs take most of the time)."""
    jb = java.JavaBroker(tmp / "java", conf={"mappedFileSizeCommitLog": 64 * 1024 * 1024, **conf, **(java_conf or {})})
    jb.home = home
    failure: list[BaseException] = []

    def start_java() -> None:
        try:
            jb.start(timeout=180)
        except BaseException as e:  # noqa: BLE001 - re-raised in the fixture's thread
            failure.append(e)

    t = threading.Thread(target=start_java)
    t.start()
    rm = RmqdProcess(tmp / "rmqd", broker_conf={**conf, **(rmqd_conf or {})})
    try:
        rm.start(timeout=60)
    finally:
        t.join()
    if failure:
        rm.stop()
        raise failure[0]
    return rm, jb


@pytest.fixture(scope="session")
def judge(java_home: Path, driver_classes: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judge]:
    """rmqd and the Java broker for the whole session (a JVM pair costs 10-30 s to start)."""
    tmp = tmp_path_factory.mktemp("judge")
    yield from _judged(tmp, java_home, driver_classes, start_pair(tmp, java_home, BROKER_CONF))


def _judged(tmp: Path, java_home: Path, classes: Path, pair: tuple[Any, Any]) -> Iterator[Judge]:
    """A Judge over a started (rmqd, Java broker) pair, both stopped afterwards."""
    rm, jb = pair
    try:
        yield Judge(java_home, classes, [Side("rmqd", rm.namesrv_addr, tmp / "client-rmqd", rm),
                                         Side("java", jb.namesrv_addr, tmp / "client-java", jb)])
    finally:
        rm.stop()
        jb.stop()


def acl_home(home: Path, overlay: Path, plain_acl: str) -> Path:
    """A RocketMQ home of the test's own whose conf/plain_acl.yml is ``plain_acl`` (the Java broker reads
    its ACL from ``$ROCKETMQ_HOME/conf``): links to the shared build, which stays untouched."""
    (overlay / "conf").mkdir(parents=True)
    for item in home.iterdir():
        if item.name not in ("conf", "clienthome"):
            (overlay / item.name).symlink_to(item)
    for item in (home / "conf").iterdir():
        if item.name != "plain_acl.yml":
            (overlay / "conf" / item.name).symlink_to(item)
    (overlay / "conf" / "plain_acl.yml").write_text(plain_acl)
    return overlay


@pytest.fixture(scope="module")
def acl_judge(java_home: Path, driver_classes: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judge]:
    """rmqd and the Java broker with aclEnable and the same accounts (rmq.testing.acl's), for one module."""
    from rmq.testing.acl import ACCOUNTS

    tmp = tmp_path_factory.mktemp("acl-judge")
    acl_file = tmp / "plain_acl.yml"
    acl_file.write_text(ACCOUNTS)
    home = acl_home(java_home, tmp / "java-home", ACCOUNTS)
    pair = start_pair(tmp, home, {"aclEnable": True}, rmqd_conf={"plainAclFile": str(acl_file)})
    yield from _judged(tmp, java_home, driver_classes, pair)


@pytest.fixture
def names(request: pytest.FixtureRequest) -> str:
    """A name of the test's own (topics, groups): tests share the brokers."""
    return re.sub(r"[^A-Za-z0-9_]", "_", request.node.name.removeprefix("test_"))[:80]
