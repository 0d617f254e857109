"""The bundled ``broker`` processors plugin: RocketMQ's Broker role.

Entry point ``rmq.processors: broker``. Runs when the config has a ``[broker]``
section (its keys and start-up rules: ``rmq.roles.BrokerConfig``): opens the store chosen under ``[plugins] storage``, serves the client
protocol on ``listenHost:listenPort`` and registers with the name servers. It
also contributes the long-poll notifier to the store's dispatchers. Its own options
(``[plugin.processors.broker]``, :class:`BrokerOptions`) are the bounds RocketMQ lacks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs

from rmq.kernel import MASTER, hookimpl, structure_options
from rmq.plugins.broker.controller import BrokerController
from rmq.plugins.broker.pop_revive import pop_revive

if TYPE_CHECKING:
    from rmq.kernel import CommitLogDispatcher, Kernel, MessageStore, ProcessorRegistry

__all__ = ["BrokerController", "BrokerOptions", "BrokerPlugin"]


@attrs.define(frozen=True)
class BrokerOptions:
    """``[plugin.processors.broker]``: bounds RocketMQ does not have (every other broker setting is a
    RocketMQ key in ``[broker]``). Auto-creation of topics (send through TBW102, %RETRY%/%DLQ% on
    demand) and of subscription groups stops once the table holds this many entries, so a stranger
    cannot grow them without end; admin creation is not limited. ``slave_sync_period_ms``: a slave's
    full metadata sync (RocketMQ hard-codes 10 s); ``slave_topic_probe_ms``: how often a slave asks
    its master for the topic table's dataVersion, so topic changes arrive sooner (0: off)."""

    max_auto_created_topics: int = 10_000
    max_auto_created_groups: int = 10_000
    slave_sync_period_ms: int = attrs.field(default=10_000, validator=attrs.validators.ge(100))
    slave_topic_probe_ms: int = attrs.field(default=200, validator=attrs.validators.ge(0))


class BrokerPlugin:
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options: BrokerOptions = structure_options(BrokerOptions, options)
        self.controller: BrokerController | None = None

    @hookimpl
    def rmq_processors_register(self, kernel: Kernel, registry: ProcessorRegistry) -> None:
        if registry.role == "broker" and self.controller is not None:
            self.controller.register(registry, owner="broker")

    @hookimpl
    def rmq_dispatch_make_dispatchers(self, kernel: Kernel, store: MessageStore) -> list[CommitLogDispatcher]:
        c = self.controller
        if c is None or c.store is not store:
            return []
        return [c.notifier]

    @hookimpl
    def rmq_role_lifespan(self, kernel: Kernel, role: str, broker: Any) -> Any:
        """POP's revive service runs while the broker is master (RocketMQ's PopReviveService)."""
        c = self.controller
        if role != MASTER or c is None or broker is not c:
            return None
        return pop_revive(kernel, c.pop_processor)

    @hookimpl
    def rmq_lifespan(self, kernel: Kernel) -> Any:
        if kernel.config.broker is None:
            return None
        return self._run(kernel)

    @asynccontextmanager
    async def _run(self, kernel: Kernel) -> AsyncIterator[None]:
        assert kernel.config.broker is not None
        self.controller = BrokerController(kernel, kernel.config.broker)
        self.controller.topics.max_auto_created = self.options.max_auto_created_topics
        self.controller.groups.max_auto_created = self.options.max_auto_created_groups
        self.controller.slave_sync_periods = (self.options.slave_sync_period_ms / 1000,
                                              self.options.slave_topic_probe_ms / 1000)
        try:
            async with self.controller.run():
                yield
        finally:
            self.controller = None
