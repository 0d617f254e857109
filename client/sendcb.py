"""``Producer.send_async`` without a task per send (asyncio).

A task per send cost more than the send itself: its creation, the loop turns to start it and to
resume it at the answer, and the future it waits on. Here the request goes out from ``send_async``
itself and the connection runs a plain callback when the answer comes (or the timeout, or the
close): decode the result, update the fault tolerance, run the user's callback, free the in-flight
slot. Only what must wait goes to a task, with the same code as before: a first send to a topic or
broker (route lookup, connect), retries after a failed attempt, a coroutine-function callback.
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import TYPE_CHECKING, Any

from rmq.client.message import SendResult, SendStatus
from rmq.kernel.model import MessageQueue
from rmq.protocol.command import RemotingCommand

if TYPE_CHECKING:
    from rmq.client.producer import Producer, SendCallback, _Prepared

log = logging.getLogger("rmq.client.producer")


class AioSend:
    """One send_async in flight without a task."""

    __slots__ = ("producer", "p", "callback", "queue", "key", "timeout", "mq", "addr", "t0", "begin_ms",
                 "retrying", "cancelled")

    def __init__(self, producer: Producer, p: _Prepared, callback: SendCallback | None,
                 queue: MessageQueue | None, key: Any, timeout: float | None) -> None:
        self.producer = producer
        self.p = p
        self.callback = callback
        self.queue = queue
        self.key = key
        self.timeout = timeout
        self.cancelled = False
        self.mq: MessageQueue | None = None
        self.retrying = False

    def start(self) -> None:
        """Send the first attempt; when that needs to wait for something (a route, a connection), a task does
        (which meets the same error, if any, and hands it to the callback as before), to the queue already
        picked if one was: the round robin moves on once per send."""
        try:
            if self._start():
                return
        except Exception:  # noqa: BLE001 - e.g. building the request: the task path reports it
            pass
        prod = self.producer
        first = (self.t0, self.mq, self.t0, None) if self.retrying and self.mq is not None else None
        prod._aio_task(prod._async_send(self.p, self.callback, self.queue, self.key, self.timeout, first))

    def _start(self) -> bool:
        prod = self.producer
        p = self.p
        timeout = prod.options.send_timeout if self.timeout is None else self.timeout
        if timeout <= 0:
            return False
        mq = self.queue
        self.retrying = mq is None and self.key is None
        if mq is None:
            info = prod._publish.get(p.topic)
            if info is None or not info.queues or prod._selector is not None:
                return False
            if self.key is not None:
                mq = prod._hash_selector(info.queues, None, self.key)
            else:
                mq = self.mq = prod._picker.pick(info.queues, None)
                self.t0 = time.monotonic()
        inst = prod.instance
        addr = inst.master_addr(mq.broker_name)
        start_request = getattr(inst.remoting, "start_request", None)  # another remoting plugin may lack it
        if addr is None or start_request is None:
            return False
        self.mq = mq
        self.addr = addr
        cmd = RemotingCommand.request(p.code, prod._ext(p, mq), p.body)
        self.begin_ms = time.time_ns() // 1_000_000 if prod._trace is not None else 0
        self.t0 = time.monotonic()
        if not start_request(addr, cmd, timeout, self._on_answer):
            return False
        prod._aio_sends.add(self)
        return True

    def cancel(self) -> None:
        """The producer shuts down: the outcome, when it comes, is dropped (as a cancelled task's)."""
        if not self.cancelled:
            self.cancelled = True
            self.producer._aio_sends.discard(self)
            self.producer._aio_release()

    def _on_answer(self, resp: RemotingCommand | None, exc: BaseException | None) -> None:
        if self.cancelled:
            return
        prod = self.producer
        prod._aio_sends.discard(self)
        try:
            self._settle(resp, exc)
        except Exception:  # a bug here must not keep the in-flight slot
            log.exception("async send to %s: handling the answer failed", self.p.topic)
            prod._aio_release()

    def _settle(self, resp: RemotingCommand | None, exc: BaseException | None) -> None:
        prod = self.producer
        outcome: SendResult | BaseException
        if exc is None:
            assert resp is not None
            try:
                outcome = prod._answer(self.p, self.mq, self.addr, resp, self.begin_ms)
            except Exception as err:  # noqa: BLE001 - a refusal: retried or handed to the callback, as in _send
                outcome = err
        else:
            outcome = exc
        if isinstance(outcome, BaseException) or (
            self.retrying and outcome.status is not SendStatus.SEND_OK
            and prod.options.retry_another_broker_when_not_store_ok and prod.options.retry_times_async > 0
        ):  # the task path goes on from this first attempt: retries, or the error to the callback
            first = (self.t0, self.mq, self.t0, outcome)
            prod._aio_task(prod._async_send(self.p, self.callback, self.queue, self.key, self.timeout, first))
            return
        fault = prod._fault
        if self.retrying and fault is not None:
            latency_ms = (time.monotonic() - self.t0) * 1000.0
            if latency_ms >= 550.0 or fault.has_items:  # as _send
                fault.update(self.mq.broker_name, latency_ms)
        self._deliver(outcome)

    def _deliver(self, result: SendResult) -> None:
        callback = self.callback
        if callback is not None:
            try:
                res = callback(result, None)
            except Exception:
                log.exception("send callback failed")
            else:
                if res is not None and inspect.isawaitable(res):  # a coroutine function: it keeps a task
                    self.producer._aio_task(self._await(res))
                    return
        self.producer._aio_release()

    async def _await(self, res: Any) -> None:
        try:
            await res
        except Exception:
            log.exception("send callback failed")
        finally:
            self.producer._aio_release()
