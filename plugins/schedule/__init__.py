"""The bundled ``schedule`` processors plugin: delayed delivery (RocketMQ's ScheduleMessageService).

Entry point ``rmq.processors: schedule``; broker role only. A message sent with
``DELAY=n`` is parked in ``SCHEDULE_TOPIC_XXXX`` queue n-1 with ``REAL_TOPIC``/``REAL_QID``
(reference §7.2) by this plugin's put stage (``DelayLevelStage``). This plugin then reads each level's
queue from its offset in ``config/delayOffset.json``, and once a message is due
(store time + the level's delay from ``messageDelayLevel``) re-puts it to its
real topic and queue as a new record without ``DELAY``. That makes consumer
retries (send-back uses levels 3+) and client delay levels work.

Options (``[plugin.processors.schedule]``): ``poll_interval_ms`` (100).
Also serves GET_ALL_DELAY_OFFSET (45) on the broker role: a master its live table, a slave the table its
metadata sync last copied from the master (RocketMQ 5's slave reloads it after each sync).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from rmq.kernel import MASTER, hookimpl, structure_options
from rmq.plugins.schedule.service import DelayLevelStage, ScheduleService
from rmq.protocol.access import SIGNED
from rmq.protocol.codes import RequestCode, ResponseCode

if TYPE_CHECKING:
    from rmq.kernel import BrokerContext, Connection, Kernel, ProcessorRegistry
    from rmq.protocol.command import RemotingCommand

__all__ = ["DelayLevelStage", "ScheduleOptions", "SchedulePlugin", "ScheduleService"]

log = logging.getLogger("rmq.broker.schedule")


@attrs.define(frozen=True)
class ScheduleOptions:
    poll_interval_ms: int = attrs.field(default=100)

    @poll_interval_ms.validator
    def _check(self, _a: Any, v: int) -> None:
        if v < 1:
            raise ValueError("poll_interval_ms must be >= 1")


class SchedulePlugin:
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options: ScheduleOptions = structure_options(ScheduleOptions, options)
        self.service: ScheduleService | None = None
        self._broker: BrokerContext | None = None

    @hookimpl
    def rmq_processors_register(self, kernel: Kernel, registry: ProcessorRegistry) -> None:
        if registry.role == "broker":
            registry.register(RequestCode.GET_ALL_DELAY_OFFSET, self.all_delay_offsets, owner="schedule",
                              access=SIGNED)  # a slave's metadata sync, as GET_ALL_CONSUMER_OFFSET

    async def all_delay_offsets(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if self.service is not None:
            return cmd.response(body=self.service.encode().encode())
        body = b""
        if self._broker is not None:  # a slave: the file its metadata sync wrote
            path = self._broker.config_dir / "delayOffset.json"
            try:
                body = await anyio.to_thread.run_sync(path.read_bytes)
            except FileNotFoundError:
                pass
        if not body.strip():
            return cmd.response(ResponseCode.SYSTEM_ERROR, "No delay offset in this broker")
        return cmd.response(body=body)

    @hookimpl
    def rmq_broker_put_stages(self, kernel: Kernel, broker: BrokerContext) -> list[DelayLevelStage]:
        self._broker = broker
        return [DelayLevelStage(broker.delay_levels)]

    @hookimpl
    def rmq_role_lifespan(self, kernel: Kernel, role: str, broker: BrokerContext) -> Any:
        """Delivery runs while the broker is master (a slave replicates the master's deliveries); a promoted
        slave starts from the delay offsets its metadata sync copied (RocketMQ's changeSpecialServiceStatus)."""
        return self.schedule(kernel, broker) if role == MASTER else None

    @asynccontextmanager
    async def schedule(self, kernel: Kernel, broker: BrokerContext) -> AsyncIterator[None]:
        svc = ScheduleService(broker, self.options.poll_interval_ms / 1000)
        svc.load()
        self.service = svc
        try:
            async with kernel.background(svc.run):
                yield
        finally:
            svc.persist()
            self.service = None
            log.info("schedule service stopped; delay offsets persisted")
