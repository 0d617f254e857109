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

import attrs
import cattrs

from rmq.kernel.markers import hookimpl
from rmq.plugins.storage_mmap.mapped_file import StoreError
from rmq.plugins.storage_mmap.store import MmapMessageStore, MmapOptions

__all__ = ["MmapMessageStore", "MmapOptions", "MmapStoragePlugin", "StoreError", "structure_options"]

_CONVERTER = cattrs.Converter(forbid_extra_keys=True)


def _strict(kind: type) -> Any:
    def hook(value: Any, _: Any) -> Any:
        if type(value) is not kind:  # TOML gives real types; "true" or 1 for a bool is a typo
            raise ValueError(f"expected {kind.__name__}, got {value!r}")
        return value

    return hook


_CONVERTER.register_structure_hook(bool, _strict(bool))
_CONVERTER.register_structure_hook(int, _strict(int))


def structure_options(options: Mapping[str, Any] | None, cls: type, where: str) -> Any:
    """A plugin's TOML table into its attrs class; unknown keys and bad values raise ValueError."""
    if options is None:
        return cls()
    if not isinstance(options, Mapping):
        raise ValueError(f"{where}: options must be a table, got {type(options).__name__}")
    try:
        return _CONVERTER.structure(dict(options), cls)
    except cattrs.ForbiddenExtraKeysError as e:
        raise ValueError(f"{where}: unknown option(s) {', '.join(sorted(e.extra_fields))}") from None
    except cattrs.BaseValidationError as e:
        extra = [x for x in e.exceptions if isinstance(x, cattrs.ForbiddenExtraKeysError)]
        if extra:
            keys = ", ".join(sorted(k for x in extra for k in x.extra_fields))
            known = ", ".join(a.name for a in attrs.fields(cls)) or "none"
            raise ValueError(f"{where}: unknown option(s) {keys} (known: {known})") from None
        details = "; ".join(str(x) for x in e.exceptions) or str(e)
        raise ValueError(f"{where}: invalid options: {details}") from None
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: invalid options: {e}") from None


class MmapStoragePlugin:
    """Builds the mmap store and contributes its consume-queue and index dispatchers."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: MmapOptions = structure_options(options, MmapOptions, "rmq.storage:mmap")
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
