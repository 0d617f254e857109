"""What a request processor may use of the broker: ``ProcessorContext``.

Processors (send, pull, consumer management, admin) answer requests; they read and
change the broker's tables, read the store and put through the pipeline. They do not
start or stop anything, listen, register with name servers or run loops, so they get
this view instead of the ``BrokerController``. A second front end (the gRPC endpoint
for RocketMQ 5 clients) builds its processors on the same view, and a test checks that
the processor modules use nothing outside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rmq.kernel import BrokerContext

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from rmq.kernel import Connection, MessageFilter, PutResult, ReplicationService
    from rmq.plugins.broker.clients import ConsumerManager, ProducerManager
    from rmq.plugins.broker.groups import SubscriptionGroupManager
    from rmq.plugins.broker.locks import RebalanceLockManager
    from rmq.plugins.broker.longpoll import PullHoldService
    from rmq.plugins.broker.offsets import ConsumerOffsetManager
    from rmq.plugins.broker.pipeline import PutPipeline
    from rmq.plugins.broker.replicas import ReplicasManager
    from rmq.plugins.broker.stats import BrokerStats
    from rmq.plugins.broker.topics import TopicConfigManager
    from rmq.protocol.access import Access


@runtime_checkable
class ProcessorContext(BrokerContext, Protocol):
    """The broker's tables, store, identity and put path: everything a processor touches.

    Beyond ``BrokerContext`` (config, store, put, broker address, delay levels):
    the metadata tables, the client registries, the long-poll hold, the put
    pipeline (to ask whether a message may be deferred), the replication service
    of a SYNC_MASTER, the host bytes of message ids and the write permission.
    All members are used on the event loop and none blocks.
    """

    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    consumers: ConsumerManager
    producers: ProducerManager
    locks: RebalanceLockManager
    hold: PullHoldService
    pipeline: PutPipeline
    replication: ReplicationService | None
    replicas: ReplicasManager | None  # controller mode: id, role and epoch from the controller
    store_host: bytes
    msg_id_prefix: str
    trace_on: str
    sync_master: bool
    accepts_writes: bool
    boot_ms: int
    stats: BrokerStats | None  # per-topic and per-group counters (None until the store is open)
    config_file: str  # the rmqd TOML file the broker started from ("" for the embedded default)
    role_services: list[str]  # the rmq_role_lifespan services running now (runtime info's roleServices)
    ports: dict[str, int]  # every port the daemon opened, by name (runtime info names the gRPC one)
    broker_id: int  # the id registered with the name servers (0 = master; controller mode: as elected)

    def born_host(self, conn: Connection) -> bytes:
        """BORNHOST bytes of a connection's peer (cached on the connection)."""
        ...

    def get_filter(self, group: str, topic: str, etype: str, expr: str) -> MessageFilter | None:
        """The compiled subscription expression; None matches everything; LookupError if unsupported."""
        ...

    def watch_client(self, conn: Connection) -> None:
        """Forget a client's registrations when its connection closes."""
        ...

    def notify_consumer_ids_changed(self, group: str) -> None:
        """Tell every member of ``group`` to rebalance now (oneway, in the background)."""
        ...

    async def register_now(self) -> None:
        """Register with the name servers now (after a topic change an admin made)."""
        ...

    async def wait_slave(self, result: PutResult) -> None:
        """SYNC_MASTER: wait until a slave holds ``result``'s bytes; sets the status otherwise."""
        ...


class TableProcessor:
    """A request processor declared as a table: ``requests()`` lists its (code, handler, access) rows and
    ``register`` enters them, keeping the registry's services for the handlers' post-read ACL checks."""

    def __init__(self, ctx: ProcessorContext) -> None:
        self.ctx = ctx
        self._services: Mapping[str, Any] = {}

    def requests(self) -> Iterable[tuple[int, Any, Access]]:
        raise NotImplementedError

    def register(self, registry: Any, owner: str) -> None:
        self._services = registry.services
        for code, handler, acc in self.requests():
            registry.register(code, handler, owner=owner, access=acc)
