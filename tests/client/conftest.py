"""Fixtures for rmq.client tests: one shared rmqd (namesrv + broker) for the client suites,
unique topic/group names per test, and short client timers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from rmq.testing.daemon import RmqdProcess

# 1 s for every delay level: consumer retries (level 3 + n) come back after 1 s, not 10 s
FAST_DELAYS = " ".join(["1s"] * 18)
FAST_CONSUMER = {"rebalance_interval": 1.0, "heartbeat_interval": 2.0, "persist_interval": 0.5,
                 "pull_retry_delay": 0.2}


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RmqdProcess]:
    """A namesrv+broker shared by the client tests (SQL92 filters on, 1 s delay levels)."""
    proc = RmqdProcess(
        tmp_path_factory.mktemp("client-rmqd"),
        broker_conf={"enablePropertyFilter": True, "messageDelayLevel": FAST_DELAYS,
                     "flushDiskType": "ASYNC_FLUSH"},
    )
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def ns(cluster: RmqdProcess) -> str:
    return cluster.namesrv_addr


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A unique topic/group stem for this test (topic names allow letters, digits, - and _)."""
    stem = request.node.name.split("[")[0].removeprefix("test_")[:40]
    return f"{stem}_{uuid.uuid4().hex[:8]}"
