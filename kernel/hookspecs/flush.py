"""Flush: when appended commitlog bytes are forced to disk.

Bundled: ``async`` (RocketMQ's ASYNC_FLUSH: every 500 ms if >= 4 dirty pages,
everything every 10 s) and ``sync`` (SYNC_FLUSH: group commit, a put waits for
the fdatasync that covers it; many puts share one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rmq.kernel.markers import hookspec

if TYPE_CHECKING:
    from rmq.kernel.kernel import Kernel
    from rmq.kernel.watermark import Watermark


@runtime_checkable
class Flushable(Protocol):
    """What a store offers a flush policy.

    ``durable`` is the store's ``Watermark`` of bytes known on disk: the policy advances it
    (on the event loop) with the offset each ``flush`` returned, and synchronous puts await
    it, so a put returns as soon as the flush that covers it is done.
    """

    @property
    def max_phy_offset(self) -> int: ...

    @property
    def flushed_offset(self) -> int: ...

    @property
    def durable(self) -> Watermark: ...

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

    Commit notification: after every flush the policy calls
    ``store.durable.advance(flushed offset)`` on the event loop, so anyone who needs
    "bytes up to N are durable locally" (a put, a replication service shipping only
    durable bytes) awaits or subscribes to that ``Watermark`` rather than polling.
    A policy may also set ``store.durable.settle``: the connection holding SYNC_FLUSH answers
    calls it once every request of a socket read has appended, so one round can cover the
    read at once (the bundled ``sync`` policy does, for a producer alone on a fast disk).
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

    Called once by the store's owner (the broker) after building the store and before
    entering it; the result is handed to the store with ``store.attach(flush_policy=...)``. ``config`` is the ``[broker]``
    table (``rmq.roles.BrokerConfig``: its flush intervals, pages and timeouts).
    Return None to defer to the next plugin.

    Arguments:
    - ``kernel``: the running ``Kernel`` (config, hook relay, services).
    - ``store``: the ``Flushable`` store to flush.
    - ``config``: the ``[broker]`` table (``rmq.roles.BrokerConfig``).
    """
