"""The storage contract, run against the mmap store (small segments so rolling is exercised too)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rmq.testing.storage import MessageStoreContract


class TestMmapStoreContract(MessageStoreContract):
    supports_restart = True

    @pytest.fixture(autouse=True)
    def _factory(self, store_factory: Callable[..., Any]) -> None:
        self._open = store_factory

    def make_store(self, path: Path, *, plugins: Any = (), **broker: Any) -> Any:
        return self._open(path, *plugins, **broker)


class TestMmapStoreContractSyncFlush(TestMmapStoreContract):
    """Same contract with group-commit flushing (every put waits for fdatasync)."""

    def make_store(self, path: Path, *, plugins: Any = (), **broker: Any) -> Any:
        return self._open(path, *plugins, sync=True, **broker)
