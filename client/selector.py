"""Producer queue selection: round robin, latency fault tolerance, and user selectors.

A selector is any callable ``(queues, message, arg) -> MessageQueue``; the built-ins
below are classes so they can keep state and print nicely.
"""

from __future__ import annotations

import itertools
import random
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from rmq.kernel.model import MessageQueue
from rmq.protocol.common import java_hash

QueueSelector = Callable[[Sequence[MessageQueue], Any, Any], MessageQueue]

# RocketMQ's defaults: a call that took >= latency_max[i] isolates the broker not_available[i] ms.
LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_MS = (0, 0, 30000, 60000, 120000, 180000, 600000)


def stable_hash(key: Any) -> int:
    """Non-negative hash equal across processes and languages (Java ``String.hashCode`` for str)."""
    if isinstance(key, bool):
        key = int(key)
    if isinstance(key, int):
        return abs(key)
    if isinstance(key, str):
        return abs(java_hash(key))
    if isinstance(key, (bytes, bytearray, memoryview)):
        return zlib.crc32(key)
    return abs(java_hash(str(key)))


class RoundRobinSelector:
    """The default: next queue each call, starting at a random position (as Java)."""

    def __init__(self) -> None:
        self._counter = itertools.count(random.randrange(1 << 31))

    def __call__(self, queues: Sequence[MessageQueue], msg: Any = None, arg: Any = None) -> MessageQueue:
        return queues[next(self._counter) % len(queues)]


class HashSelector:
    """Same key -> same queue (while the queue count is stable): ordered messages per key.

    ``arg`` (the ``sharding_key`` of ``send``) is hashed with :func:`stable_hash`,
    so a Java producer using ``SelectMessageQueueByHash`` with the same string key
    picks the same queue.
    """

    def __call__(self, queues: Sequence[MessageQueue], msg: Any = None, arg: Any = None) -> MessageQueue:
        if arg is None:
            raise ValueError("HashSelector needs a sharding key (send(..., sharding_key=...))")
        return queues[stable_hash(arg) % len(queues)]


class RandomSelector:
    def __call__(self, queues: Sequence[MessageQueue], msg: Any = None, arg: Any = None) -> MessageQueue:
        return random.choice(queues)


@attrs.define(slots=True)
class _FaultItem:
    name: str
    latency_ms: float
    start: float  # monotonic seconds when the broker is usable again


class LatencyFaultTolerance:
    """Brokers that were slow or failing are avoided for a while (latency → isolation table)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._items: dict[str, _FaultItem] = {}
        self._clock = clock
        self._counter = itertools.count()

    @property
    def has_items(self) -> bool:
        return bool(self._items)

    @staticmethod
    def isolation_ms(latency_ms: float) -> int:
        for lim, dur in zip(reversed(LATENCY_MAX_MS), reversed(NOT_AVAILABLE_MS), strict=True):
            if latency_ms >= lim:
                return dur
        return 0

    def update(self, broker: str, latency_ms: float, failed: bool = False) -> None:
        lat = 30000.0 if failed else latency_ms
        dur = self.isolation_ms(lat)
        if dur == 0 and broker not in self._items:
            return
        self._items[broker] = _FaultItem(broker, lat, self._clock() + dur / 1000.0)

    def is_available(self, broker: str) -> bool:
        item = self._items.get(broker)
        return item is None or self._clock() >= item.start

    def remove(self, broker: str) -> None:
        self._items.pop(broker, None)

    def pick_one_at_least(self) -> str | None:
        """The least bad broker: available first, then lower latency, then sooner back."""
        if not self._items:
            return None
        now = self._clock()
        items = sorted(self._items.values(), key=lambda i: (now < i.start, i.latency_ms, i.start))
        half = len(items) // 2
        if half <= 0:
            return items[0].name
        return items[next(self._counter) % half].name


class DefaultQueuePicker:
    """What a producer does without a user selector: round robin, avoiding the last failed broker
    and (with latency fault tolerance) brokers that were recently slow or unreachable."""

    def __init__(self, fault_tolerance: LatencyFaultTolerance | None) -> None:
        self.fault = fault_tolerance
        self._counter = itertools.count(random.randrange(1 << 31))

    def pick(self, queues: Sequence[MessageQueue], avoid_broker: str | None = None) -> MessageQueue:
        n = len(queues)
        if n == 1:
            return queues[0]
        fault = self.fault
        start = next(self._counter)
        if fault is None:
            if avoid_broker is not None:
                for k in range(n):
                    mq = queues[(start + k) % n]
                    if mq.broker_name != avoid_broker:
                        return mq
            return queues[start % n]
        for k in range(n):
            mq = queues[(start + k) % n]
            if mq.broker_name != avoid_broker and fault.is_available(mq.broker_name):
                return mq
        if avoid_broker is not None:
            for k in range(n):
                mq = queues[(start + k) % n]
                if fault.is_available(mq.broker_name):
                    return mq
        least = fault.pick_one_at_least()
        if least is not None:
            of_broker = [q for q in queues if q.broker_name == least]
            if of_broker:
                return of_broker[start % len(of_broker)]
        return queues[start % n]
