"""Shared fixtures: the anyio backend. ``rmqd`` and ``rmqd_factory`` (real daemons on loopback) come
from rmq's own pytest plugin, ``rmq.testing.plugin``, as they would in any project's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
