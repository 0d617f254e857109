"""The storage contract, run against the mmap store (small segments so rolling is exercised too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rmq.testing.storage import MessageStoreContract

from .conftest import build_store


class TestMmapStoreContract(MessageStoreContract):
    supports_restart = True

    def build_store(self, path: Path, **broker: Any) -> Any:
        return build_store(path, **broker)


class TestMmapStoreContractSyncFlush(TestMmapStoreContract):
    """Same contract with group-commit flushing (every put waits for fdatasync)."""

    def build_store(self, path: Path, **broker: Any) -> Any:
        return build_store(path, sync=True, **broker)
