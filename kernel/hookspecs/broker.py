"""Broker extensions: services that live inside the Broker role.

Delay delivery, transaction checks, replication bookkeeping and the like need the
broker's store, tables and settings, and must start after the store opened and stop
before it closes. They say so by implementing ``rmq_broker_lifespan``: the broker
role calls it once its store is open and its server listens, enters every returned
context, and exits them (in reverse) before it persists its tables and closes the
store. Nobody polls for the broker, and no plugin imports the broker plugin: what an
extension may use is the ``BrokerContext`` below.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rmq.kernel.markers import hookspec

if TYPE_CHECKING:
    from rmq.kernel.config import BrokerConfig
    from rmq.kernel.hookspecs.storage import MessageStore
    from rmq.kernel.kernel import Kernel


@runtime_checkable
class BrokerContext(Protocol):
    """The narrow view of a running broker that extensions get (not the broker object itself).

    All members are read on the event loop; none blocks. ``store`` is open for the
    whole life of an extension's lifespan. ``broker_addr`` is the address clients
    use; ``config_dir`` holds the broker's metadata files (write yours there with
    ``rmq.kernel.metafile.ConfigFile``).
    """

    config: BrokerConfig
    config_dir: Path
    store: MessageStore
    delay_levels: list[int]
    broker_addr: str

    @property
    def is_slave(self) -> bool: ...


@hookspec
def rmq_broker_lifespan(kernel: Kernel, broker: BrokerContext) -> AbstractAsyncContextManager[Any] | None:
    """Return an async context manager to run inside the broker role (or None).

    Called once per broker start, after the store opened and the server listens,
    before the broker registers with name servers; contexts are entered in plugin
    registration order and exited in reverse before the broker persists its tables
    and closes its store. Use ``kernel.task_group`` for background tasks and stop
    them on exit.

    Arguments:
    - ``kernel``: the running ``Kernel`` (config, hook relay, task group).
    - ``broker``: the running broker as a ``BrokerContext``.
    """
