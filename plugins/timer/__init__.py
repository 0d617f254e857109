"""The bundled ``timer`` processors plugin: RocketMQ 5's timer messages (deliver at a time, cancel).

Entry point ``rmq.processors: timer``; selected for every broker. Settings are RocketMQ's, in
``[broker]``: ``timerWheelEnable`` (true), ``timerMaxDelaySec`` (3 days), ``timerPrecisionMs``
(1000, snapped to 100/200/500/1000), ``timerFlushIntervalMs`` (1000),
``timerCongestNumEachSlot`` (flow control, off), ``timerEnableRetryUntilSuccess`` (false),
``mappedFileSizeTimerLog`` (100 MiB), ``recallMessageEnable`` (false, as RocketMQ; it gates
``RECALL_MESSAGE`` only, a send carrying ``TIMER_DEL_UNIQKEY`` is accepted either way, as 5.3.3).

* ``TimerStage`` (put stages on ``TIMER_DELAY_SEC``/``TIMER_DELAY_MS``/``TIMER_DELIVER_MS``):
  refuses with RocketMQ's WHEEL_TIMER_* answers (wheel off, beyond the horizon, not a number,
  flow control) or parks the message in ``rmq_sys_wheel_timer``; the send response carries a
  ``recallHandle``.
* ``TimerService`` (masters): the durable timer log, the wheel and the deliveries (service.py).
* GET_TIMER_CHECK_POINT (60), GET_TIMER_METRICS (61), RECALL_MESSAGE (370).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from rmq.kernel import MASTER, MessageRecord, NoOptions, PutStatus, clock, hookimpl, structure_options
from rmq.plugins.timer.service import TimerService
from rmq.plugins.timer.stage import (
    RECALL_TAG,
    TIMER_DEL_UNIQKEY,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    TimerStage,
    decode_handle,
    snap_precision,
)
from rmq.protocol.access import PUB, SIGNED, topic
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.common import Perm, Prop, encode_properties
from rmq.protocol.names import TIMER_TOPIC

if TYPE_CHECKING:
    from rmq.kernel import BrokerContext, Connection, Kernel, ProcessorRegistry
    from rmq.protocol.command import RemotingCommand

__all__ = ["TimerPlugin", "TimerService", "TimerStage"]

log = logging.getLogger("rmq.broker.timer")

_RECALL_OK = frozenset((PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT,
                        PutStatus.SLAVE_NOT_AVAILABLE))


class TimerPlugin:
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        structure_options(NoOptions, options, "plugin.processors.timer")
        self.service: TimerService | None = None
        self._broker: BrokerContext | None = None

    @hookimpl
    def rmq_processors_register(self, kernel: Kernel, registry: ProcessorRegistry) -> None:
        if registry.role == "broker":
            registry.register(RequestCode.GET_TIMER_CHECK_POINT, self._checkpoint, owner="timer", access=SIGNED)
            registry.register(RequestCode.GET_TIMER_METRICS, self._metrics, owner="timer", access=SIGNED)
            registry.register(RequestCode.RECALL_MESSAGE, self._recall, owner="timer", access=topic("topic", PUB))

    @hookimpl
    def rmq_broker_put_stages(self, kernel: Kernel, broker: BrokerContext) -> list[TimerStage]:
        self._broker = broker
        cfg = broker.config
        common = dict(enabled=cfg.timerWheelEnable, precision=snap_precision(cfg.timerPrecisionMs),
                      max_delay_ms=cfg.timerMaxDelaySec * 1000, congest=cfg.timerCongestNumEachSlot,
                      broker_name=cfg.brokerName,
                      slot_count=self._slot_count)
        return [TimerStage(name, 400 + i, **common)  # type: ignore[arg-type]
                for i, name in enumerate((TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS))]

    def _slot_count(self, slot: int) -> int:
        return self.service.slot_count(slot) if self.service is not None else 0

    @hookimpl
    def rmq_role_lifespan(self, kernel: Kernel, role: str, broker: BrokerContext) -> Any:
        """The wheel runs while the broker is master (a slave replicates its deliveries); a promoted slave
        recovers it from the replicated timer topic and the checkpoint its metadata sync copied."""
        self._broker = broker
        if role != MASTER or not broker.config.timerWheelEnable:
            return None
        return self.timer(kernel, broker)

    @asynccontextmanager
    async def timer(self, kernel: Kernel, broker: BrokerContext) -> AsyncIterator[None]:
        cfg = broker.config
        broker.ensure_topic(TIMER_TOPIC, 1, Perm.READ_WRITE)
        svc = TimerService(broker, snap_precision(cfg.timerPrecisionMs), cfg.timerFlushIntervalMs,
                           cfg.mappedFileSizeTimerLog, cfg.timerEnableRetryUntilSuccess)
        await anyio.to_thread.run_sync(svc.recover)
        self.service = svc
        try:
            async with kernel.background(svc.run):
                yield
        finally:
            self.service = None
            try:
                svc.close()
            except OSError as e:
                log.error("timer: final checkpoint failed: %s", e)

    # ------------------------------------------------------------------ processors

    async def _checkpoint(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if self.service is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "The checkpoint is null")
        return cmd.response(body=self.service.ckpt.encode())

    async def _metrics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if self.service is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "The timer message store is null")
        return cmd.response(body=self.service.metrics_json().encode())

    async def _recall(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """RECALL_MESSAGE: park a delete marker in the target's slot (RocketMQ 5.3.2's checks, in order)."""
        b = self._broker
        ext = cmd.ext
        if b is None or not b.config.recallMessageEnable:
            return cmd.response(ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden")
        if b.is_slave:
            return cmd.response(ResponseCode.SLAVE_NOT_AVAILABLE, "recall failed, broker service not available")
        if self.service is None:
            return cmd.response(ResponseCode.SERVICE_NOT_AVAILABLE, "recall failed, broker service not available")
        topic = ext.get("topic")
        handle = ext.get("recallHandle")
        if not topic or not handle:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"the header field {'topic' if not topic else 'recallHandle'} is missing")
        if not b.has_topic(topic):
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{topic}] not exist")
        try:
            h_topic, h_broker, ts, uniq = decode_handle(handle)
        except ValueError:
            return cmd.response(ResponseCode.ILLEGAL_OPERATION, "recall handle is invalid")
        if h_topic != topic:
            return cmd.response(ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match")
        if h_broker != b.config.brokerName:
            return cmd.response(ResponseCode.ILLEGAL_OPERATION, "recall failed, broker service not available")
        now = clock.now_ms()
        if ts - now <= 0 or ts - now >= b.config.timerMaxDelaySec * 1000:
            return cmd.response(ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid")
        props = {Prop.TAGS: RECALL_TAG, TIMER_DELIVER_MS: str(ts), Prop.UNIQ_KEY: uniq,
                 TIMER_DEL_UNIQKEY: f"{topic}+{uniq}", "BORN_TIMESTAMP": str(now)}
        group = ext.get("producerGroup")
        if group:
            props[Prop.PGROUP] = group
        rec = MessageRecord(topic, 0, b"0", 0, encode_properties(props), 0, now)
        result = await b.put(rec)
        if result.status not in _RECALL_OK:
            log.warning("recall of %s in %s: marker put failed: %s %s", uniq, topic, result.status.name, result.remark)
            return cmd.response(ResponseCode.SYSTEM_ERROR, "recall failed, execute error")
        return cmd.response(0, None, {"msgId": uniq})
