"""Broker extensions: services that live inside the Broker role, and stages of its put pipeline.

Delay delivery, transaction checks, replication bookkeeping and the like need the
broker's store, tables and settings, and must start after the store opened and stop
before it closes. They say so by implementing ``rmq_broker_lifespan``: the broker
role calls it once its store is open and its server listens, enters every returned
context, and exits them (in reverse) before it persists its tables and closes the
store. Nobody polls for the broker, and no plugin imports the broker plugin: what an
extension may use is the ``BrokerContext`` below.

The put pipeline is where messages that must not be stored as sent are re-routed
before the store sees them: delay levels (parked in ``SCHEDULE_TOPIC_XXXX``), timer
messages, transactional half messages. Each is a ``PutStage`` that claims one
property; a message carrying none of the claimed properties costs one substring
test per stage. A message carrying a deferring property that no stage claims is
refused, never stored as if it were due now.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rmq.kernel.markers import hookspec

if TYPE_CHECKING:
    from rmq.kernel.hookspecs.remoting import Connection
    from rmq.kernel.hookspecs.storage import MessageStore
    from rmq.kernel.kernel import Kernel
    from rmq.kernel.model import MessageRecord, PutResult


@runtime_checkable
class BrokerContext(Protocol):
    """The narrow view of a running broker that extensions get (not the broker object itself).

    All members are read on the event loop; none blocks. ``store`` is open for the
    whole life of an extension's lifespan. ``broker_addr`` is the address clients
    use; ``config_dir`` holds the broker's metadata files (write yours there with
    ``rmq.kernel.metafile.ConfigFile``). ``config`` is the ``[broker]`` table (``rmq.roles.BrokerConfig``:
    the kernel knows no role's keys, so it is typed ``Any`` here).
    """

    config: Any
    config_dir: Path
    store: MessageStore
    delay_levels: list[int]
    broker_addr: str

    @property
    def is_slave(self) -> bool: ...

    async def put(self, rec: MessageRecord) -> PutResult:
        """Store ``rec`` through the put pipeline (stages, then the store, then replication waits). A record
        whose properties say WAIT=false (RocketMQ's internal puts: send-back, transaction ops, timers) is
        answered once appended: no sync-flush and no SYNC_MASTER wait, so a missing slave cannot fail it."""
        ...

    def producer_channels(self, group: str) -> list[Connection]:
        """Live connections of the producers of ``group`` (a transaction check asks one of them)."""
        ...

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed consumer offset of (group, topic, queue), -1 when none."""
        ...

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit a consumer offset (persisted with the broker's consumerOffset.json)."""
        ...

    def has_topic(self, topic: str) -> bool:
        """Whether the broker has a config for ``topic``."""
        ...

    def ensure_topic(self, topic: str, queues: int, perm: int = 6) -> None:
        """Create the topic's config if it has none (a system topic used on first need), registered
        with the name servers with the next round."""
        ...

    def adopt_due_topic(self, topic: str, queue_id: int, by: str) -> bool:
        """Before a due delayed or timer message is put to ``topic``: give the topic a config covering
        ``queue_id`` if it has none (True then; ``by`` names the service in the log line). A slave promoted
        before its metadata sync copied a topic (auto-created, or a %RETRY% topic made by a send-back, on
        the old master just before the switch) has none, and the store refuses a put to a topic without
        one: the parked message would be lost."""
        ...


@runtime_checkable
class PutStage(Protocol):
    """One re-routing step of the put pipeline.

    ``trigger`` is the property name the stage claims (``"DELAY"``, ``"TRAN_MSG"``,
    ``"TIMER_DELIVER_MS"``…); ``priority`` orders stages (lower first) and the first stage
    whose trigger a message carries is the only one applied. ``route`` runs on the event
    loop once per such message, must not block or do I/O, and either rewrites ``rec`` in
    place (topic, queue, properties; return None) or returns a ``PutResult`` that answers
    the send without storing anything (a refusal). Idempotence: a rewritten message must
    not carry the trigger any more, or must carry it with a value the stage passes through.
    """

    trigger: str
    priority: int

    def route(self, rec: MessageRecord) -> PutResult | None: ...


@hookspec
def rmq_broker_lifespan(kernel: Kernel, broker: BrokerContext) -> AbstractAsyncContextManager[Any] | None:
    """Return an async context manager to run inside the broker role (or None).

    Called once per broker start, after the store opened and the server listens,
    before the broker registers with name servers; contexts are entered in plugin
    registration order and exited in reverse before the broker persists its tables
    and closes its store. Run a background loop with ``async with kernel.background(fn)``
    (started in the kernel's task group, cancelled on exit).

    Arguments:
    - ``kernel``: the running ``Kernel`` (config, hook relay, task group).
    - ``broker``: the running broker as a ``BrokerContext``.
    """


@hookspec
def rmq_broker_put_stages(kernel: Kernel, broker: BrokerContext) -> list[PutStage]:
    """Return the put-pipeline stages this plugin contributes (may be empty).

    Called once per broker start, before the broker listens; the stages of every
    plugin are merged and ordered by ``priority``. Two stages claiming one trigger
    refuse start-up.

    Arguments:
    - ``kernel``: the running ``Kernel``.
    - ``broker``: the starting broker as a ``BrokerContext``.
    """
