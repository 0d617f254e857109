"""The bundled ``transaction`` processors plugin: RocketMQ 4.3+'s transactional messages (reference §8).

Entry point ``rmq.processors: transaction``; selected for every broker. Settings are
RocketMQ's, in ``[broker]``: ``transactionTimeOut``, ``transactionCheckMax``,
``transactionCheckInterval``, ``rejectTransactionMessage``.

* ``HalfMessageStage`` (put stage on ``TRAN_MSG``): a prepared message is stored as a half
  message in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, its real topic and queue in
  ``REAL_TOPIC``/``REAL_QID`` and its transaction bits cleared, so no consumer sees it.
* END_TRANSACTION (37): commit puts the real message (COMMIT bit, prepared offset = the
  half's, the half's store time) and then an op record; rollback writes only the op record
  (topic ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, tag ``d``, body = the half's queue offset).
* ``TransactionCheckService``: every ``transactionCheckInterval`` the master walks the half
  queue from its committed offset, skips halves that have an op, and asks one live producer
  of the half's group (CHECK_TRANSACTION_STATE) about those older than
  ``transactionTimeOut`` (or CHECK_IMMUNITY_TIME_IN_SECONDS), each check putting a copy of
  the half back with TRANSACTION_CHECK_TIMES + 1; after ``transactionCheckMax`` checks the
  half goes to ``TRANS_CHECK_MAX_TIME_TOPIC``. Progress is the consumer offsets of group
  ``CID_RMQ_SYS_TRANS``, so it survives restarts like any consumer's.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from rmq.kernel import MASTER, NoOptions, hookimpl, structure_options
from rmq.plugins.transaction.service import (
    HalfMessageStage,
    TransactionCheckService,
    TransactionEnder,
    resume_check,
)
from rmq.protocol.access import ADMIN, AUTHORIZER, PUB, Access, check_after_read
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import ext_int
from rmq.protocol.common import Perm, Prop
from rmq.protocol.message import MessageDecodeError, decode_message
from rmq.protocol.names import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC

if TYPE_CHECKING:
    from rmq.kernel import BrokerContext, Kernel, ProcessorRegistry

__all__ = ["HalfMessageStage", "TransactionCheckService", "TransactionPlugin"]

log = logging.getLogger("rmq.broker.transaction")


class TransactionPlugin:
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        structure_options(NoOptions, options, "plugin.processors.transaction")
        self.ender: TransactionEnder | None = None
        self.service: TransactionCheckService | None = None
        self._services: Mapping[str, Any] = {}

    @hookimpl
    def rmq_processors_register(self, kernel: Kernel, registry: ProcessorRegistry) -> None:
        if registry.role == "broker":
            self._services = registry.services
            registry.register(RequestCode.END_TRANSACTION, self._end, owner="transaction",
                              access=Access(after_read="PUB on the real topic of the half message ended"))
            # puts a copy of any message (by msgId) back into the half topic: an operator's write
            registry.register(RequestCode.RESUME_CHECK_HALF_MESSAGE, self._resume, owner="transaction",
                              access=ADMIN)

    def _may_end(self, conn: Any, cmd: Any, broker: BrokerContext) -> str | None:
        """PUB on the half's real topic, known once the half is read, checked before anything is stored.
        An offset that names no readable message is left to the ender, which refuses it."""
        if AUTHORIZER not in self._services:
            return None  # no ACL: no extra read
        raw = broker.store.look_message_by_offset(ext_int(cmd, "commitLogOffset"))
        if raw is None:
            return None
        try:
            half = decode_message(raw, decompress=False)
        except MessageDecodeError:
            return None
        real = half.properties.get(Prop.REAL_TOPIC) or half.topic
        return check_after_read(self._services, conn.remote_addr[0], cmd, [("topic", real, PUB)])

    async def _resume(self, conn: Any, cmd: Any) -> Any:
        if self._broker is None:
            return cmd.response(1, "transaction service not running")
        return await resume_check(self._broker, cmd)

    async def _end(self, conn: Any, cmd: Any) -> Any:
        broker = self._broker
        if broker is None:
            return cmd.response(1, "transaction service not running")
        refused = self._may_end(conn, cmd, broker)
        if refused is not None:
            return cmd.response(ResponseCode.NO_PERMISSION, refused)
        if self.ender is None:
            self.ender = TransactionEnder(broker)
        return await self.ender.end(conn, cmd)

    _broker: BrokerContext | None = None

    @hookimpl
    def rmq_broker_put_stages(self, kernel: Kernel, broker: BrokerContext) -> list[HalfMessageStage]:
        self._broker = broker
        return [HalfMessageStage()]

    @hookimpl
    def rmq_role_lifespan(self, kernel: Kernel, role: str, broker: BrokerContext) -> Any:
        """Half messages are checked while the broker is master (RocketMQ's changeSpecialServiceStatus)."""
        self._broker = broker
        return self.transaction_check(kernel, broker) if role == MASTER else None

    @asynccontextmanager
    async def transaction_check(self, kernel: Kernel, broker: BrokerContext) -> AsyncIterator[None]:
        # the half and op topics get their configs (one queue each), as RocketMQ 5 gives them at start and
        # 4.9.8 the half topic at its first check: tools list them, a pull reads them, a Java broker that
        # opens these files later finds them
        for topic in (TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC):
            broker.ensure_topic(topic, 1, Perm.READ_WRITE)
        svc = self.service = TransactionCheckService(broker)
        try:
            async with kernel.background(svc.run):
                yield
        finally:
            self.service = None
