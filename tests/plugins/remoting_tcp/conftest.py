"""Every transport test runs on plain asyncio and, where installed, on uvloop (rmqd's loop)."""

from __future__ import annotations

from typing import Any

import pytest

try:
    import uvloop  # noqa: F401

    _BACKENDS: list[Any] = ["asyncio", pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop")]
except ImportError:  # pragma: no cover
    _BACKENDS = ["asyncio"]


@pytest.fixture(params=_BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param
