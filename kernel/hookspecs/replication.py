"""Replication: copying a master's commitlog to slaves (RocketMQ HA).

The bundled ``ha`` plugin (selected for every broker by default) speaks RocketMQ's
classic HA stream. A broker whose hook returns None is standalone: RocketMQ's
ASYNC_MASTER without slaves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rmq.kernel.markers import hookspec

if TYPE_CHECKING:
    from rmq.kernel.hookspecs.storage import MessageStore
    from rmq.kernel.kernel import Kernel
    from rmq.kernel.watermark import Watermark


@runtime_checkable
class ReplicationService(Protocol):
    """Ships commitlog bytes to slaves and reports how far they got.

    ``async with service:`` runs it. ``wait_replicated(end_offset)`` is awaited
    by SYNC_MASTER puts: True once a slave acknowledged ``end_offset``, False after
    the broker's slave timeout (FLUSH_SLAVE_TIMEOUT); it must return promptly with False when no
    slave is connected (SLAVE_NOT_AVAILABLE is decided by ``slave_available``).

    Commit notification: a service exposes ``replicated: Watermark`` (bytes up to N
    acknowledged by a slave), the counterpart of the store's ``durable`` watermark. It
    ships what ``store.durable`` (or ``max_phy_offset``) reaches, subscribing to it
    instead of polling, and advances ``replicated`` as acknowledgements arrive;
    ``wait_replicated(n)`` is then ``replicated.wait_for(n, timeout)``.
    """

    async def __aenter__(self) -> ReplicationService: ...

    async def __aexit__(self, *exc: object) -> None: ...

    @property
    def slave_available(self) -> bool: ...

    @property
    def replicated(self) -> Watermark:
        """Commitlog bytes up to ``replicated.value`` are acknowledged by a slave."""
        ...

    async def wait_replicated(self, end_offset: int) -> bool: ...

    @property
    def port(self) -> int:
        """The port slaves connect to (``haServerAddr`` advertises it); 0 if none."""
        ...

    def update_master_address(self, addr: str | None) -> None:
        """The master's HA address learned from the name server (a slave follows it). Called after
        every registration round; an unchanged or empty address is a no-op."""
        ...

    def set_role(self, role: str, master_address: str = "", broker_id: int = -1) -> None:
        """Switch between SLAVE (follow ``master_address``) and a master role, without restarting
        the transfer machinery: the seam an automatic failover drives. ``broker_id``: the id a
        controller gave this broker (a slave names itself with it to its master)."""
        ...

    def in_sync(self, max_lag_ms: int, epoch_start: int) -> set[int]:
        """Controller mode: ids of the slaves that acknowledged this master's whole log within
        ``max_lag_ms`` and hold its current epoch (from ``epoch_start``): the SyncStateSet candidates."""
        ...

    def set_sync_state_set(self, broker_ids: set[int] | None) -> None:
        """Controller-mode master: the other SyncStateSet members; the store's confirm offset
        (``ReplicaLog.set_confirm_offset``) follows the smallest offset they all acknowledged, and
        every slave is told it. None: nothing bounds it (the set is the master alone, or
        the broker does not ask every member to acknowledge, as RocketMQ 5.2+ by default). Called on promotion (before the store
        becomes writable) and on every SyncStateSet change."""
        ...

    async def wait_acked_by(self, broker_ids: set[int], end_offset: int) -> bool:
        """Controller mode, every SyncStateSet member acknowledging: True once every listed slave holds
        ``end_offset``, False after the broker's slave timeout."""
        ...

    def stats(self) -> dict[str, object]:
        """Runtime figures for GET_BROKER_RUNTIME_INFO: role, connected slaves, their acknowledged
        offsets and lag in bytes, a slave's master address (RocketMQ's key names where it has them)."""
        ...


@hookspec(firstresult=True)
def rmq_replication_make_service(kernel: Kernel, store: MessageStore) -> ReplicationService | None:
    """Build the replication service of a broker's store, or None for standalone.

    Called once when the broker role starts, after the store opened.

    Arguments:
    - ``kernel``: the running ``Kernel`` (config, hook relay, services).
    - ``store``: the broker's opened ``MessageStore``.
    """
