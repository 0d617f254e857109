"""``mmap``: the default message store, byte-compatible with Apache RocketMQ 4.9's store directory.

Entry point ``rmq.storage: mmap = rmq.plugins.storage_mmap:MmapStoragePlugin``. Its TOML
table (``[plugin.storage.mmap]``) takes :class:`MmapOptions`; every store setting
proper (paths, segment sizes, flush, retention) comes from ``[broker]`` with
RocketMQ's names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rmq.kernel import hookimpl, structure_options
from rmq.plugins.storage_mmap.mapped_file import StoreError
from rmq.plugins.storage_mmap.options import MmapOptions
from rmq.plugins.storage_mmap.store import MmapMessageStore

__all__ = ["MmapMessageStore", "MmapOptions", "MmapStoragePlugin", "StoreError"]


class MmapStoragePlugin:
    """Builds the mmap store (its consume-queue and index dispatchers are its own: they always run)."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: MmapOptions = structure_options(MmapOptions, options)

    @hookimpl(trylast=True)
    def rmq_storage_make_store(self, kernel: Any, config: Any) -> MmapMessageStore:
        return MmapMessageStore(config, options=self.options)
