"""Dispatch: what happens to each stored record after it lands in the commitlog.

The store's reput loop reads newly appended records and hands them, in commitlog
order and in batches (one batch per loop turn), to every dispatcher built here:
the store's own consume-queue and key-index builders, the broker's long-poll
notifier, and any third-party observer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rmq.kernel.markers import hookspec
from rmq.kernel.model import DispatchRequest

if TYPE_CHECKING:
    from rmq.kernel.hookspecs.storage import MessageStore
    from rmq.kernel.kernel import Kernel


@runtime_checkable
class CommitLogDispatcher(Protocol):
    """Receives stored records in commitlog order.

    Ordering: batches arrive in commitlog order, never concurrently.
    Idempotence: after abnormal recovery a record may be dispatched again; a
    dispatcher must ignore records at or below what it has already seen.
    Durability: none promised; recovery replays from the checkpoint.
    Must not block: called on the event loop; hand slow work to a task.
    """

    def dispatch(self, requests: Sequence[DispatchRequest]) -> None: ...


@hookspec
def rmq_dispatch_make_dispatchers(kernel: Kernel, store: MessageStore) -> list[CommitLogDispatcher]:
    """Contribute dispatchers for ``store``.

    Called once by the store's owner (the broker) after building the store and before
    entering it; the concatenated results are handed over with
    ``store.attach(dispatchers=...)``, so they see every record recovery replays. Return
    a list (possibly empty); results of all plugins are concatenated in plugin order. A
    store's own builders (consume queues, key index) are not contributed here: the store
    always runs them, first, whatever is attached.

    Arguments:
    - ``kernel``: the running ``Kernel`` (config, hook relay, services).
    - ``store``: the ``MessageStore`` whose records will be dispatched.
    """
