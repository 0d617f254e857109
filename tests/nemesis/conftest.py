"""The ``chaos`` fixture: a 3-controller, 2-broker cluster on its own loopback addresses (rmq.testing.chaos)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.testing.chaos import Chaos, chaos_cluster


@pytest.fixture
def chaos(tmp_path: Path) -> Iterator[Chaos]:
    with chaos_cluster(tmp_path) as ch:
        yield ch


@pytest.fixture
def chaos_clocks(tmp_path: Path) -> Iterator[Chaos]:
    """The same cluster, every node with the clock seam (``Chaos.skews``)."""
    with chaos_cluster(tmp_path, clocks=True) as ch:
        yield ch


@pytest.fixture
def chaos3(tmp_path: Path) -> Iterator[Chaos]:
    """3 controllers and 3 brokers (a master and two slaves)."""
    with chaos_cluster(tmp_path, brokers=3) as ch:
        yield ch
