"""ProcessQueue: the pulled-but-not-yet-committed messages of one queue (flow control + offsets)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable

import anyio

from rmq.protocol.message import MessageExt


class ProcessQueue:
    """Messages by queue offset, in arrival (= offset) order.

    The committed offset is the smallest offset still held, or one past the highest
    ever held when empty, so a crash re-delivers rather than loses. Removal is O(1)
    amortised: offsets live in a deque in order and dead heads are skipped lazily.
    """

    __slots__ = (
        "msgs",
        "_order",
        "msg_size",
        "max_offset",
        "dropped",
        "locked",
        "last_lock_time",
        "last_pull_time",
        "consuming",
        "paused",
        "generation",
        "data_ready",
        "inflight",
    )

    def __init__(self) -> None:
        self.msgs: dict[int, MessageExt] = {}
        self._order: deque[int] = deque()
        self.msg_size = 0
        self.max_offset = -1
        self.dropped = False
        self.locked = False
        self.last_lock_time = 0.0
        self.last_pull_time = time.monotonic()
        self.consuming = False
        self.paused = False
        self.generation = 0
        self.data_ready = anyio.Event()
        self.inflight = 0  # consume batches handed out and not yet finished

    @property
    def count(self) -> int:
        return len(self.msgs)

    def put(self, msgs: Iterable[MessageExt]) -> None:
        table = self.msgs
        order = self._order
        size = 0
        mx = self.max_offset
        for m in msgs:
            off = m.queue_offset
            if off in table:
                continue
            table[off] = m
            order.append(off)
            size += len(m.body)
            if off > mx:
                mx = off
        self.msg_size += size
        self.max_offset = mx
        self.data_ready.set()

    def _head(self) -> int | None:
        order = self._order
        table = self.msgs
        while order and order[0] not in table:
            order.popleft()
        return order[0] if order else None

    def remove(self, msgs: Iterable[MessageExt]) -> int:
        """Drop consumed messages; return the offset to commit (-1 if nothing was ever held)."""
        table = self.msgs
        size = 0
        for m in msgs:
            if table.pop(m.queue_offset, None) is not None:
                size += len(m.body)
        self.msg_size -= size
        return self.commit_offset()

    def commit_offset(self) -> int:
        head = self._head()
        if head is not None:
            return head
        return self.max_offset + 1 if self.max_offset >= 0 else -1

    def span(self) -> int:
        head = self._head()
        return 0 if head is None else self.max_offset - head

    def take(self, n: int) -> list[MessageExt]:
        """The ``n`` lowest-offset messages still held (orderly consumption; not removed)."""
        out: list[MessageExt] = []
        table = self.msgs
        for off in self._order:
            m = table.get(off)
            if m is not None:
                out.append(m)
                if len(out) >= n:
                    break
        if not out:
            self.data_ready = anyio.Event()
        return out

    def clear(self) -> None:
        self.msgs.clear()
        self._order.clear()
        self.msg_size = 0
        self.max_offset = -1
        self.generation += 1
