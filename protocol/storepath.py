"""Which store append serves: the compiled one (``rmq.protocol._faststore``) or the pure-Python reference.

The mmap store's appender asks :func:`compiled_store` once at start; ``RMQ_PURE`` set means the pure
path for the codec and the store alike. :data:`SERVING` is what ``rmqd``'s start line says after
"codec" (both choices, e.g. ``compiled; store compiled``).
"""

from __future__ import annotations

from typing import Any

from rmq.kernel.model import DispatchRequest, MessageRecord
from rmq.protocol.common import MAGIC_MESSAGE
from rmq.protocol.extensions import load_extension, select
from rmq.protocol.frame import CODEC

__all__ = ["SERVING", "STORE", "compiled_store", "crc32"]

try:  # optional (the "fast" extra): ISA-L's CRC32, zlib's very values, 0.07 instead of 0.5 µs per KiB
    from isal.isal_zlib import crc32
except ImportError:  # pragma: no cover - exercised where isal is absent
    from zlib import crc32


def compiled_store() -> Any:
    """The compiled append module, configured with the pure path's CRC function, or None when it was not
    built; loaded whatever ``RMQ_PURE`` says (the differential tests run both paths in one process).
    ``RMQ_FASTSTORE`` names another build of the extension to load instead (make fuzz-asan)."""
    _faststore = load_extension("_faststore", "RMQ_FASTSTORE")
    if _faststore is None:
        return None
    _faststore.configure(crc32, MAGIC_MESSAGE, MessageRecord, DispatchRequest)
    return _faststore


FAST, STORE = select(compiled_store)
"""``FAST``: the module serving (None on the pure path); ``STORE``: that choice in words."""
SERVING = f"{CODEC}; store {STORE}"
