"""Fixtures for the mmap store tests: small segments, a fixed disk probe, an independent record decoder."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from rmq.plugins.flush import AsyncFlushPlugin, SyncFlushPlugin
from rmq.plugins.storage_mmap import MmapMessageStore, MmapStoragePlugin
from rmq.testing import make_kernel
from rmq.testing.storage import SMALL_STORE, attach_from_hooks


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def build_store(
    path: Path,
    plugins: tuple[object, ...] = (),
    sync: bool = False,
    options: dict[str, Any] | None = None,
    **broker: Any,
) -> MmapMessageStore:
    cfg = {"storePathRootDir": str(path), **SMALL_STORE, **broker}
    flush = SyncFlushPlugin() if sync else AsyncFlushPlugin()
    kernel = make_kernel([MmapStoragePlugin(options), flush, *plugins], {"broker": cfg})
    store = attach_from_hooks(kernel, kernel.hook.rmq_storage_make_store(kernel=kernel, config=kernel.config.broker))
    assert isinstance(store, MmapMessageStore)
    store.disk_usage_probe = lambda: 0.10  # the real disk's fill level must not steer tests
    return store


@contextlib.asynccontextmanager
async def open_store(
    path: Path, *plugins: object, sync: bool = False, options: dict[str, Any] | None = None, **broker: Any
) -> AsyncIterator[MmapMessageStore]:
    """A started mmap store with small segments; ``options`` is the ``[plugin.storage.mmap]`` table."""
    async with build_store(path, plugins, sync=sync, options=options, **broker) as store:
        yield store


@pytest.fixture
def store_factory() -> Callable[..., Any]:
    return open_store


@pytest.fixture
def small_config() -> dict[str, Any]:
    return dict(SMALL_STORE)


@pytest.fixture(scope="session")
def store_opener() -> Callable[..., Any]:
    """``open_store`` for module- or session-scoped fixtures (``store_factory`` is per test)."""
    return open_store
