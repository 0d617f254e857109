"""Broker statistics as RocketMQ's runtime info shows them (BrokerStatsManager's broker-wide figures).

A once-a-second sample of the store's put and get counters (nothing on the message path) gives
``putTps`` / ``getTransferedTps`` over the last 10 s, 1 min and 10 min (RocketMQ's three
windows, "%.2f %.2f %.2f") and the day's totals since midnight (``msgPutTotalTodayNow``...).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import anyio

WINDOWS = (10, 60, 600)


class BrokerStats:
    def __init__(self, store: Any) -> None:
        self.store = store
        self.samples: deque[tuple[float, int, int]] = deque(maxlen=WINDOWS[-1] + 2)
        self.morning = (self._day(), 0, 0)  # (day, puts, gets) at the start of today
        self.yesterday_morning = (0, 0)

    @staticmethod
    def _day() -> int:
        return int(time.mktime(time.localtime()[:3] + (0, 0, 0, 0, 0, -1)))

    def _counts(self) -> tuple[int, int]:
        s = self.store.stats()
        return int(s.get("puts", 0)), int(s.get("get_messages", 0))

    def sample(self) -> None:
        puts, gets = self._counts()
        now = time.monotonic()
        self.samples.append((now, puts, gets))
        day = self._day()
        if day != self.morning[0]:
            self.yesterday_morning = self.morning[1:]
            self.morning = (day, puts, gets)

    async def run(self) -> None:
        while True:
            self.sample()
            await anyio.sleep(1.0)

    def _tps(self, index: int) -> str:
        if len(self.samples) < 2:
            return " ".join("0.00" for _ in WINDOWS)
        t1, *last = self.samples[-1]
        out = []
        for w in WINDOWS:
            t0, *first = next((s for s in self.samples if t1 - s[0] <= w), self.samples[0])
            span = t1 - t0
            out.append(f"{(last[index] - first[index]) / span:.2f}" if span > 0 else "0.00")
        return " ".join(out)

    def runtime(self) -> dict[str, str]:
        puts, gets = self._counts()
        s = self.store.stats()
        return {
            "putTps": self._tps(0),
            "getTransferedTps": self._tps(1),
            "msgPutTotalTodayNow": str(puts),
            "msgGetTotalTodayNow": str(gets),
            "msgPutTotalTodayMorning": str(self.morning[1]),
            "msgGetTotalTodayMorning": str(self.morning[2]),
            "msgPutTotalYesterdayMorning": str(self.yesterday_morning[0]),
            "msgGetTotalYesterdayMorning": str(self.yesterday_morning[1]),
            "commitLogDiskRatio": f"{float(s.get('disk_used_ratio') or 0.0):.4f}",
            "dispatchBehindBytes": str(s.get("dispatch_lag_bytes", 0)),
        }
