"""Auto-renew of received messages, as RocketMQ 5's proxy (``DefaultReceiptHandleManager``).

A 5.x PushConsumer receives with ``auto_renew``: the proxy pops with ``defaultInvisibleTimeMills``
(60 s) instead of the request's invisible duration, remembers each receipt per (client, group), and
every ``renewSchedulePeriodMillis`` (5 s) renews those due within ``renewAheadTimeMillis`` (10 s) by
CHANGE_INVISIBLETIME, for 1, 3, 5, 10, 30 then 60 minutes (the proxy's ``RenewStrategyPolicy``). So a
message processed for longer than the invisible time is not delivered to another consumer meanwhile.
It stops on the client's ack or change of invisible duration (which then act on the newest receipt:
the client still holds the first one), after ``renewMaxTimeMillis`` (3 h: the message is handed back
with the group's retry back-off), after ``maxRenewRetryTimes`` failed renewals in a row, and when the
client is gone (terminated, evicted, or no longer registered in the group): its messages become
visible after ``invisibleTimeMillisWhenClear`` (1 s).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import anyio
import attrs

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

log = logging.getLogger("rmq.grpc")

RENEW_DELAYS_MS = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)  # RenewStrategyPolicy
MAX_TRACKED = 200_000  # receipts renewed at once; past it a receipt is handed out without renewal


def _positive(inst: Any, attribute: Any, value: int) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value}")


@attrs.define
class GrpcOptions:
    """``[plugin.processors.grpc]``: the proxy's renewal settings, with RocketMQ 5.3's names and defaults."""

    enableProxyAutoRenew: bool = True
    defaultInvisibleTimeMills: int = attrs.field(default=60_000, validator=_positive)
    renewAheadTimeMillis: int = attrs.field(default=10_000, validator=_positive)
    renewSchedulePeriodMillis: int = attrs.field(default=5_000, validator=_positive)
    renewMaxTimeMillis: int = attrs.field(default=3 * 3_600_000, validator=_positive)
    maxRenewRetryTimes: int = attrs.field(default=3, validator=_positive)
    invisibleTimeMillisWhenClear: int = attrs.field(default=1_000, validator=_positive)


@attrs.define(slots=True, eq=False)
class Tracked:
    """One received message being renewed: the receipt its client holds and the newest one."""

    topic: str
    client_handle: str  # the sealed receipt handle the client was given
    parts: list[str]  # the newest receipt's fields (popTime and invisibleTime change with each renewal)
    reconsume: int
    account: Any  # the gate's account of the receive, so renewals are signed as the client's calls
    consumed_at: float = attrs.field(factory=lambda: time.time() * 1000)
    renewals: int = 0
    failures: int = 0

    def next_visible(self) -> int:
        return int(self.parts[1]) + int(self.parts[2])


class Renewer:
    """The receipts being renewed. ``change(peer, group, topic, parts, invisible ms, account)`` is the
    broker's CHANGE_INVISIBLETIME: (the new receipt's fields, or None and whether a retry may help: not
    when the receipt is no longer valid, as the proxy's ``renewExceptionNeedRetry``)."""

    def __init__(self, options: GrpcOptions, change: Callable[..., Awaitable[tuple[list[str] | None, bool]]],
                 online: Callable[[Any, str], bool], retry_delay_ms: Callable[[int], int]) -> None:
        self.options = options
        self._change = change
        self._online = online
        self._retry_delay_ms = retry_delay_ms
        self.table: dict[tuple[Any, str], dict[str, Tracked]] = {}  # (peer, group) -> message id -> receipt
        self.count = 0
        self.renewed = 0

    def add(self, peer: Any, group: str, msg_id: str, tracked: Tracked) -> None:
        if self.count >= MAX_TRACKED:
            log.warning("gRPC auto-renew: %d receipts tracked already; %s is not renewed", self.count, msg_id)
            return
        handles = self.table.setdefault((peer, group), {})
        if msg_id not in handles:
            self.count += 1
        handles[msg_id] = tracked

    def take(self, peer: Any, group: str, msg_id: str, client_handle: str) -> list[str] | None:
        """Stop renewing ``msg_id`` if ``client_handle`` is the receipt it was handed out with; the newest
        receipt's fields (to ack or change), else None."""
        handles = self.table.get((peer, group))
        t = handles.get(msg_id) if handles else None
        if t is None or t.client_handle != client_handle:
            return None
        del handles[msg_id]  # type: ignore[union-attr]
        self.count -= 1
        if not handles:
            del self.table[(peer, group)]
        return t.parts

    async def run(self) -> None:
        period = self.options.renewSchedulePeriodMillis / 1000
        while True:
            await anyio.sleep(period)
            try:
                await self.scan()
            except Exception:
                log.exception("gRPC auto-renew scan failed")

    async def scan(self) -> None:
        o = self.options
        for (peer, group), handles in list(self.table.items()):
            if not self._online(peer, group):
                del self.table[(peer, group)]
                self.count -= len(handles)
                for t in handles.values():  # as clearGroup: visible again soon, for another consumer
                    await self._change(peer, group, t.topic, t.parts, o.invisibleTimeMillisWhenClear, t.account)
                continue
            now = time.time() * 1000
            for msg_id, t in list(handles.items()):
                if t.next_visible() - now > o.renewAheadTimeMillis or handles.get(msg_id) is not t:
                    continue
                if now - t.consumed_at >= o.renewMaxTimeMillis:  # STOP_RENEW: back with the retry back-off
                    self._drop(peer, group, msg_id)
                    await self._change(peer, group, t.topic, t.parts, self._retry_delay_ms(t.reconsume), t.account)
                    continue
                delay = RENEW_DELAYS_MS[min(t.renewals, len(RENEW_DELAYS_MS) - 1)]
                fresh, retry = await self._change(peer, group, t.topic, t.parts, delay, t.account)
                if handles.get(msg_id) is not t:
                    continue  # acked or changed by the client meanwhile
                if fresh is not None:
                    t.parts, t.renewals, t.failures = fresh, t.renewals + 1, 0
                    self.renewed += 1
                elif not retry:  # acked, or handed out again: nothing left to renew
                    self._drop(peer, group, msg_id)
                else:
                    t.failures += 1
                    if t.failures >= o.maxRenewRetryTimes:
                        log.warning("gRPC auto-renew of %s in %s gave up after %d failures", msg_id, group, t.failures)
                        self._drop(peer, group, msg_id)

    def _drop(self, peer: Any, group: str, msg_id: str) -> None:
        handles = self.table.get((peer, group))
        if handles is not None and handles.pop(msg_id, None) is not None:
            self.count -= 1
            if not handles:
                del self.table[(peer, group)]
