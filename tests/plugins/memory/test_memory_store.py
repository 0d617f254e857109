"""The storage contract against the memory store, and byte equality with the mmap store's records."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rmq.kernel.model import MessageRecord
from rmq.plugins.flush import AsyncFlushPlugin
from rmq.plugins.memory import MemoryMessageStore, MemoryStoragePlugin
from rmq.plugins.storage_mmap import MmapStoragePlugin
from rmq.testing import make_kernel
from rmq.testing.storage import MessageStoreContract, attach_from_hooks


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _build(plugin: object, path: Path, *plugins: object, **broker: Any) -> Any:
    kernel = make_kernel(
        [plugin, AsyncFlushPlugin(), *plugins], {"broker": {"storePathRootDir": str(path), **broker}}
    )
    store = attach_from_hooks(kernel, kernel.hook.rmq_storage_make_store(kernel=kernel, config=kernel.config.broker))
    if hasattr(store, "disk_usage_probe"):
        store.disk_usage_probe = lambda: 0.1
    return store


@contextlib.asynccontextmanager
async def _store(plugin: object, path: Path, *plugins: object, **broker: Any) -> AsyncIterator[Any]:
    async with _build(plugin, path, *plugins, **broker) as store:
        yield store


class TestMemoryStoreContract(MessageStoreContract):
    supports_restart = False

    def build_store(self, path: Path, **broker: Any) -> Any:
        return _build(MemoryStoragePlugin(), path, **broker)


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown option.*size"):
        MemoryStoragePlugin({"size": 1})


@pytest.mark.anyio
async def test_records_are_byte_identical_to_mmap(tmp_path: Path) -> None:
    msgs = [
        MessageRecord(
            "T", 0, b"a" * i, flag=i, properties=f"TAGS\x01t\x02KEYS\x01k{i}", store_timestamp=1234 + i
        )
        for i in range(1, 20)
    ]
    out = []
    for plugin in (MemoryStoragePlugin(), MmapStoragePlugin()):
        async with _store(plugin, tmp_path / type(plugin).__name__) as store:
            for m in msgs:
                assert (await store.put_message(m)).ok
            assert (await store.put_messages(msgs[:5])).ok
            await store.wait_dispatched()
            out.append(store.get_messages("g", "T", 0, 0, 64).messages)
    assert out[0] == out[1] and len(out[0]) == 24
    assert isinstance(MemoryMessageStore, type)
