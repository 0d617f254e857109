"""Flush: when appended commitlog bytes are forced to disk.

Bundled: ``async`` (flushDiskType=ASYNC_FLUSH: every 500 ms if >= 4 dirty pages,
everything every 10 s) and ``sync`` (SYNC_FLUSH: group commit, a put waits for
the fdatasync that covers it; many puts share one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rmq.kernel.markers import hookspec

if TYPE_CHECKING:
    from rmq.kernel.kernel import Kernel


@runtime_checkable
class Flushable(Protocol):
    """What a store offers a flush policy."""

    @property
    def max_phy_offset(self) -> int: ...

    @property
    def flushed_offset(self) -> int: ...

    def flush(self, least_pages: int) -> int:
        """Force dirty pages to disk (blocking; call from a worker thread); returns flushed offset."""
        ...


@runtime_checkable
class FlushPolicy(Protocol):
    """Drives flushing of one store.

    ``async with policy:`` runs its background loop; leaving it performs a final
    full flush. ``wait_flushed`` is called by the store after each append that
    must be durable: it returns True once ``end_offset`` is on disk, False on
    timeout (the put then reports FLUSH_DISK_TIMEOUT; the data stays stored).
    Concurrent waiters share flushes. ``wake`` hints that data was appended.
    """

    async def __aenter__(self) -> FlushPolicy: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def wait_flushed(self, end_offset: int) -> bool: ...

    def wake(self) -> None: ...

    @property
    def synchronous(self) -> bool:
        """True when puts wait for the disk (SYNC_FLUSH)."""
        ...


@hookspec(firstresult=True)
def rmq_flush_make_policy(kernel: Kernel, store: Flushable, config: Any) -> FlushPolicy | None:
    """Build the flush policy of ``store``.

    Called once by the store as it starts. ``config`` is the broker config
    (flushIntervalCommitLog, flushCommitLogLeastPages, syncFlushTimeout...).
    Return None to defer to the next plugin.

    Arguments:
    - ``kernel``: the running ``Kernel`` (config, hook relay, services).
    - ``store``: the ``Flushable`` store to flush.
    - ``config``: the broker's ``BrokerConfig`` (flush intervals, pages, timeouts).
    """


FlushFactory = Callable[..., FlushPolicy]
