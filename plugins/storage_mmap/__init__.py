"""``mmap``: the default message store, byte-compatible with Apache RocketMQ 4.9's store directory.

Entry point ``rmq.storage: mmap = rmq.plugins.storage_mmap:MmapStoragePlugin``. Its TOML
table (``[plugin.storage.mmap]``) takes :class:`MmapOptions`; every store setting
proper (paths, segment sizes, flush, retention) comes from ``[broker]`` with
RocketMQ's names.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from rmq.kernel.markers import hookimpl
from rmq.kernel.options import structure_options
from rmq.plugins.storage_mmap.mapped_file import StoreError
from rmq.plugins.storage_mmap.store import MmapMessageStore, MmapOptions

__all__ = ["MmapMessageStore", "MmapOptions", "MmapStoragePlugin", "StoreError"]


class MmapStoragePlugin:
    """Builds the mmap store and contributes its consume-queue and index dispatchers."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: MmapOptions = structure_options(MmapOptions, options)
        self._stores: weakref.WeakSet[MmapMessageStore] = weakref.WeakSet()

    @hookimpl(trylast=True)
    def rmq_storage_make_store(self, kernel: Any, config: Any) -> MmapMessageStore:
        store = MmapMessageStore(config, kernel=kernel, options=self.options)
        self._stores.add(store)
        return store

    @hookimpl(tryfirst=True)
    def rmq_dispatch_make_dispatchers(self, kernel: Any, store: Any) -> list[Any]:
        if store in self._stores:
            return list(store.builtin_dispatchers)
        return []
