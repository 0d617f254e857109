"""The Java judge: Apache RocketMQ 4.9.8's own client, tools and broker beside rmqd (``make java``).

Every module here carries ``pytestmark = pytest.mark.java``; ``java_home`` skips with one line when the
4.9.8 build is absent (see rmq.testing.java)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq.testing import java


@pytest.fixture(scope="session")
def java_home() -> Path:
    return java.require()
