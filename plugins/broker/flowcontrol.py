"""Send flow control for a stalled broker: RocketMQ's ``waitTimeMillsInSendQueue`` and
``osPageCacheBusyTimeOutMills``.

RocketMQ fails queued sends fast (SYSTEM_BUSY) when they waited in its send thread pool longer
than ``waitTimeMillsInSendQueue`` (200 ms, ``[TIMEOUT_CLEAN_QUEUE]``) or while the commitlog
put lock has been held longer than ``osPageCacheBusyTimeOutMills`` (1 s, ``[PCBUSY_CLEAN_QUEUE]``:
the page cache or the disk stalls the write), so producers retry on another broker instead of
timing out. Here every put runs on the event loop, so a page-cache or disk stall blocks the
loop itself, and the sends that arrive meanwhile wait in the socket buffers. A callback due
every 10 ms measures how late it runs; once it ran later than the queue wait allows, the sends
read during the stall (their tasks start after this callback, in the next loop turn) are
answered SYSTEM_BUSY until the next tick. The send path reads one attribute: ``busy``.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("rmq.broker")

TICK = 0.010  # RocketMQ's cleaner runs every 10 ms too


class SendFlowControl:
    __slots__ = ("busy", "remark", "_wait_s", "_pc_s", "_loop", "_handle", "_due", "stalls")

    def __init__(self, wait_in_queue_ms: int, page_cache_busy_ms: int) -> None:
        self.busy = False
        self.remark = ""
        self._wait_s = wait_in_queue_ms / 1000
        self._pc_s = page_cache_busy_ms / 1000
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self.stalls = 0

    def start(self) -> None:
        if self._handle is not None or self._wait_s <= 0:
            return
        self._loop = asyncio.get_running_loop()
        self._due = self._loop.time() + TICK
        self._handle = self._loop.call_at(self._due, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.busy = False

    def stalled(self) -> bool:
        """Busy, or the tick is overdue past the queue wait: a read served before the tick runs (the compiled
        send path serves in the read's own callback) would otherwise escape the stall's verdict."""
        loop = self._loop
        return self.busy or (loop is not None and loop.time() - self._due > self._wait_s)

    def _tick(self) -> None:
        loop = self._loop
        assert loop is not None
        now = loop.time()
        late = now - self._due
        if late > self._wait_s:
            self.stalls += 1
            ms = int(late * 1000)
            if self._pc_s > 0 and late > self._pc_s:
                self.remark = (f"[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: "
                               f"{ms}ms, the broker was blocked (page cache or disk) longer than "
                               f"osPageCacheBusyTimeOutMills {int(self._pc_s * 1000)}ms")
            else:
                self.remark = (f"[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: "
                               f"{ms}ms, longer than waitTimeMillsInSendQueue {int(self._wait_s * 1000)}ms")
            if not self.busy:
                log.warning("broker event loop stalled %d ms: queued sends answered SYSTEM_BUSY", ms)
            self.busy = True
        else:
            self.busy = False
        self._due = now + TICK
        self._handle = loop.call_at(self._due, self._tick)
