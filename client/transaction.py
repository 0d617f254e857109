"""TransactionProducer: half message, local transaction, then commit or rollback; answers broker checks.

Apart from ``producer`` because the transaction protocol (END_TRANSACTION, the
broker's CHECK_TRANSACTION_STATE callbacks, user business code run in threads)
is its own concern; a plain producer never needs it.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import attrs

from rmq.client.errors import ClientError
from rmq.client.message import LocalTransactionState, Message, SendResult, SendStatus
from rmq.client.producer import Producer
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand, RemotingError, ext_int
from rmq.protocol.common import Prop, SysFlag
from rmq.protocol.message import MessageExt, decode_message, decode_offset_msg_id
from rmq.protocol.names import AUTO_CREATE_TOPIC, printable

log = logging.getLogger("rmq.client.transaction")


async def _call_user(fn: Callable[..., Any], *args: Any) -> Any:
    """Run user business code: coroutine functions awaited, plain ones in a worker thread (they may block)."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):  # noqa: B004
        return await fn(*args)
    res = await anyio.to_thread.run_sync(functools.partial(fn, *args))
    if inspect.isawaitable(res):
        res = await res
    return res


LocalTransaction = Callable[[Message, Any], "LocalTransactionState | bool | None | Awaitable[Any]"]
TransactionChecker = Callable[[MessageExt], "LocalTransactionState | bool | None | Awaitable[Any]"]

_END_CODES = {
    LocalTransactionState.COMMIT_MESSAGE: SysFlag.TX_COMMIT,
    LocalTransactionState.ROLLBACK_MESSAGE: SysFlag.TX_ROLLBACK,
    LocalTransactionState.UNKNOW: SysFlag.TX_NOT,
}


@attrs.frozen(slots=True)
class TransactionSendResult:
    send_result: SendResult
    state: LocalTransactionState

    @property
    def msg_id(self) -> str:
        return self.send_result.msg_id


def end_transaction_header(
    group: str,
    state: LocalTransactionState,
    *,
    queue_offset: int,
    offset_msg_id: str,
    msg_id: str,
    transaction_id: str | None,
    from_check: bool,
    commit_log_offset: int | None = None,
) -> dict[str, str]:
    """EndTransactionRequestHeader for a half message (commit log offset from the offset msg id)."""
    if commit_log_offset is None:
        commit_log_offset = decode_offset_msg_id(offset_msg_id)[2]
    return {
        "producerGroup": group,
        "tranStateTableOffset": str(queue_offset),
        "commitLogOffset": str(commit_log_offset),
        "commitOrRollback": str(_END_CODES[state]),
        "fromTransactionCheck": "true" if from_check else "false",
        "msgId": msg_id,
        "transactionId": transaction_id or msg_id,
    }


class TransactionProducer(Producer):
    """Half message → local transaction → commit/rollback; answers the broker's checks.

    ``checker(message)`` is asked by the broker (CHECK_TRANSACTION_STATE) about half
    messages whose outcome it never learned; it returns a LocalTransactionState
    (or True/False/None for commit/rollback/unknown), sync or async.
    """

    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        checker: TransactionChecker | None = None,
        check_concurrency: int = 4,
        **options: Any,
    ) -> None:
        super().__init__(group, namesrv_addr, **options)
        self.checker = checker
        self._check_limiter = anyio.CapacityLimiter(check_concurrency)

    async def _on_start(self) -> None:
        await super()._on_start()
        self.instance.handlers[RequestCode.CHECK_TRANSACTION_STATE] = self._on_check
        # as Java's producer does at start (its TBW102 route): know the cluster's brokers and tell them
        # about this group now, so a check about an earlier producer's half message can reach this one
        try:
            await self.instance.fetch_route(AUTO_CREATE_TOPIC)
            await self.instance.send_heartbeat()
        except (ClientError, RemotingError, OSError) as exc:
            log.info("transaction producer %s: first heartbeat deferred: %s", self.group, exc)

    async def send_in_transaction(
        self,
        msg: Message,
        local_transaction: LocalTransaction,
        arg: Any = None,
        *,
        timeout: float | None = None,
    ) -> TransactionSendResult:
        """Send ``msg`` as a half message, run ``local_transaction(msg, arg)``, then commit or roll back.

        If the local transaction raises, the outcome is reported UNKNOW (as Java does):
        the broker asks the checker later; the exception is re-raised.
        """
        self._check_running()
        p = self._prepare(msg, transactional=True)
        result = await self._send(p, None, None, None, None, timeout, self.options.retry_times)
        error: BaseException | None = None
        if result.status is SendStatus.SEND_OK:
            try:
                state = LocalTransactionState.coerce(await _call_user(local_transaction, msg, arg))
            except Exception as exc:
                state, error = LocalTransactionState.UNKNOW, exc
        else:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        await self._end_transaction(result, state)
        if error is not None:
            raise error
        return TransactionSendResult(result, state)

    async def _end_transaction(self, result: SendResult, state: LocalTransactionState) -> None:
        inst = self.instance
        ext = end_transaction_header(
            self.group,
            state,
            queue_offset=result.queue_offset,
            offset_msg_id=result.offset_msg_id or result.msg_id,
            msg_id=result.msg_id,
            transaction_id=result.transaction_id,
            from_check=False,
        )
        try:
            addr = await inst.find_broker_addr(result.queue.broker_name, result.queue.topic)
            await inst.oneway(addr, RequestCode.END_TRANSACTION, ext)
        except (ClientError, RemotingError, OSError) as exc:  # the broker's check recovers the outcome
            log.warning("END_TRANSACTION for %s failed (the broker will check back): %s", result.msg_id, exc)

    async def _on_check(self, conn: Any, cmd: RemotingCommand) -> None:
        assert self._tg is not None
        self._tg.start_soon(self._answer_check, conn, cmd)
        return None

    async def _answer_check(self, conn: Any, cmd: RemotingCommand) -> None:
        """Runs in the producer's task group: whatever goes wrong is logged here, never raised."""
        try:
            await self._answer_check_once(conn, cmd)
        except Exception as exc:  # noqa: BLE001 - one bad check must not end the producer
            log.warning("answering CHECK_TRANSACTION_STATE from %s failed: %s", getattr(conn, "peer", "?"),
                        printable(repr(exc)))

    async def _answer_check_once(self, conn: Any, cmd: RemotingCommand) -> None:
        try:
            msg = decode_message(cmd.body)
            queue_offset = ext_int(cmd, "tranStateTableOffset", 0)
            commit_log_offset = ext_int(cmd, "commitLogOffset", None)
        except ValueError as exc:  # MessageDecodeError, HeaderError
            log.warning("CHECK_TRANSACTION_STATE from %s is malformed: %s", getattr(conn, "peer", "?"),
                        printable(str(exc)))
            return
        ext = cmd.ext
        async with self._check_limiter:
            if self.checker is None:
                log.warning("broker asks about transaction %s but no checker is set", msg.msg_id)
                state = LocalTransactionState.UNKNOW
            else:
                try:
                    state = LocalTransactionState.coerce(await _call_user(self.checker, msg))
                except Exception:
                    log.exception("transaction checker failed for %s", msg.msg_id)
                    state = LocalTransactionState.UNKNOW
        uniq = msg.properties.get(Prop.UNIQ_KEY) or ext.get("msgId") or msg.offset_msg_id
        header = end_transaction_header(
            msg.properties.get(Prop.PGROUP) or self.group,
            state,
            queue_offset=queue_offset,
            offset_msg_id=ext.get("offsetMsgId") or msg.offset_msg_id,
            msg_id=uniq,
            transaction_id=ext.get("transactionId") or uniq,
            from_check=True,
            commit_log_offset=commit_log_offset,
        )
        try:
            await conn.send_oneway(RemotingCommand.request(RequestCode.END_TRANSACTION, header, oneway=True))
        except (RemotingError, OSError) as exc:
            log.warning("answering the transaction check for %s failed: %s", uniq, exc)
