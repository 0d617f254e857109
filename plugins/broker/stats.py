"""Broker statistics as RocketMQ keeps them (BrokerStatsManager).

Broker-wide: a once-a-second sample of the store's put and get counters gives ``putTps`` /
``getTransferedTps`` over the last 10 s, 1 min and 10 min (RocketMQ's three windows,
"%.2f %.2f %.2f") and the day's totals since midnight (``msgPutTotalTodayNow``...).

Per topic and per ``topic@group``: the send and pull processors add to three integers in a
list (messages, bytes, calls) — the only cost on the message path — and the same sampler keeps
minute, hour and day windows of them, which VIEW_BROKER_STATS_DATA, consume stats' ``consumeTps``
and GET_BROKER_CONSUME_STATS read, with RocketMQ's stats names (``TOPIC_PUT_NUMS``...).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import anyio

WINDOWS = (10, 60, 600)


#: VIEW_BROKER_STATS_DATA's statsName -> (table, counter index); BROKER_* are keyed by cluster name
STATS_NAMES = {
    "TOPIC_PUT_NUMS": ("topic_put", 0), "TOPIC_PUT_SIZE": ("topic_put", 1),
    "GROUP_GET_NUMS": ("group_get", 0), "GROUP_GET_SIZE": ("group_get", 1),
    "BROKER_PUT_NUMS": ("broker", 0), "BROKER_GET_NUMS": ("broker", 1),
}


class Series:
    """Samples of one key's counters: every second for the minute, every minute for the hour,
    every hour for the day (RocketMQ's three snapshot windows)."""

    __slots__ = ("sec", "minute", "hour")

    def __init__(self) -> None:
        self.sec: deque[tuple[float, tuple[int, ...]]] = deque(maxlen=61)
        self.minute: deque[tuple[float, tuple[int, ...]]] = deque(maxlen=61)
        self.hour: deque[tuple[float, tuple[int, ...]]] = deque(maxlen=25)

    @staticmethod
    def snapshot(window: deque[tuple[float, tuple[int, ...]]], now: float, cur: tuple[int, ...],
                 index: int) -> dict[str, float]:
        """RocketMQ's StatsSnapshot: the window's sum, its rate per second and the mean per call."""
        if not window:
            return {"sum": 0, "tps": 0.0, "avgpt": 0.0}
        t0, first = window[0]
        total = cur[index] - first[index]
        calls = cur[-1] - first[-1]
        span = now - t0
        return {"sum": total, "tps": round(total / span, 2) if span > 0 else 0.0,
                "avgpt": round(total / calls, 2) if calls else 0.0}


class BrokerStats:
    def __init__(self, store: Any) -> None:
        self.store = store
        # topic -> [messages, bytes, calls]; "topic@group" -> [messages, bytes, calls]
        self.topic_put: dict[str, list[int]] = {}
        self.group_get: dict[str, list[int]] = {}
        self.series: dict[tuple[str, str], Series] = {}
        self._ticks = 0
        self._last_tick = 0.0
        self.samples: deque[tuple[float, int, int]] = deque(maxlen=WINDOWS[-1] + 2)
        self.lookups: deque[tuple[float, int, int]] = deque(maxlen=WINDOWS[-1] + 2)  # (t, reads, reads that found)
        self.morning = (self._day(), 0, 0)  # (day, puts, gets) at the start of today
        self.yesterday_morning = (0, 0)

    @staticmethod
    def _day() -> int:
        return int(time.mktime(time.localtime()[:3] + (0, 0, 0, 0, 0, -1)))

    def _counts(self) -> tuple[int, int]:
        s = self.store.stats()
        return int(s.get("puts", 0)), int(s.get("get_messages", 0))

    def put(self, topic: str, n: int, size: int, calls: int = 1) -> None:
        """Messages stored by ``calls`` sends (the compiled send path counts a read's run of single sends at once)."""
        _count(self.topic_put, topic, n, size, calls)

    def got(self, topic: str, group: str, n: int, size: int) -> None:
        """Messages handed to a consumer group by a pull or pop."""
        _count(self.group_get, f"{topic}@{group}", n, size)

    def _table(self, name: str) -> dict[str, list[int]]:
        return self.topic_put if name == "topic_put" else self.group_get

    def _sample_keys(self, now: float) -> None:
        self._ticks += 1
        minute, hour = self._ticks % 60 == 0, self._ticks % 3600 == 0
        for name in ("topic_put", "group_get"):
            for key, c in self._table(name).items():
                sr = self.series.get((name, key))
                if sr is None:  # a new key counted from zero since the previous sample
                    sr = self.series[(name, key)] = Series()
                    zero = (self._last_tick or now - 1.0, (0, 0, 0))
                    sr.sec.append(zero)
                    sr.minute.append(zero)
                    sr.hour.append(zero)
                cur = (now, tuple(c))
                sr.sec.append(cur)
                if minute or not sr.minute:
                    sr.minute.append(cur)
                if hour or not sr.hour:
                    sr.hour.append(cur)
        self._last_tick = now
        if hour:  # forget keys that did not move for a day (deleted topics, gone groups)
            for (name, key), sr in list(self.series.items()):
                if len(sr.hour) == sr.hour.maxlen and sr.hour[0][1] == sr.hour[-1][1]:
                    del self.series[(name, key)]
                    self._table(name).pop(key, None)

    def stats_data(self, stats_name: str, key: str, cluster: str) -> dict[str, Any] | None:
        """BrokerStatsData (VIEW_BROKER_STATS_DATA): minute, hour and day snapshots; None if unknown."""
        where = STATS_NAMES.get(stats_name)
        if where is None:
            return None
        table, index = where
        now = time.monotonic()
        if table == "broker":
            if key != cluster:
                return None
            puts, gets = self._counts()
            cur = (puts, gets, 0)  # no call count: avgpt 0
            sec = deque(((t, (p, g, 0)) for t, p, g in self.samples if now - t <= 60), maxlen=61)
            longer = deque(((t, (p, g, 0)) for t, p, g in list(self.samples)[:1]), maxlen=2)
            windows = (sec, longer, longer)
        else:
            counters = self._table(table).get(key)
            sr = self.series.get((table, key))
            if counters is None or sr is None:
                return None
            cur = tuple(counters)
            windows = (sr.sec, sr.minute, sr.hour)
        return {name: Series.snapshot(w, now, cur, index)
                for name, w in zip(("statsMinute", "statsHour", "statsDay"), windows, strict=True)}

    def group_tps(self, topic: str, group: str) -> float:
        """Messages per second handed to ``group`` on ``topic`` over the last minute (consumeTps)."""
        sr = self.series.get(("group_get", f"{topic}@{group}"))
        c = self.group_get.get(f"{topic}@{group}")
        if sr is None or c is None:
            return 0.0
        return float(Series.snapshot(sr.sec, time.monotonic(), tuple(c), 0)["tps"])

    def sample(self) -> None:
        puts, gets = self._counts()
        now = time.monotonic()
        self.samples.append((now, puts, gets))
        st = self.store.stats()
        self.lookups.append((now, int(st.get("gets", 0)), int(st.get("found_gets", st.get("gets", 0)))))
        self._sample_keys(now)
        day = self._day()
        if day != self.morning[0]:
            self.yesterday_morning = self.morning[1:]
            self.morning = (day, puts, gets)

    async def run(self) -> None:
        while True:
            self.sample()
            await anyio.sleep(1.0)

    def _tps(self, index: int, samples: deque[tuple[float, int, int]] | None = None, minus: int = -1) -> str:
        """Rates of column ``index`` (less column ``minus``) over RocketMQ's three windows."""
        samples = self.samples if samples is None else samples
        if len(samples) < 2:
            return " ".join("0.00" for _ in WINDOWS)
        t1, *last = samples[-1]
        out = []
        for w in WINDOWS:
            t0, *first = next((s for s in samples if t1 - s[0] <= w), samples[0])
            span = t1 - t0
            n = last[index] - first[index] - ((last[minus] - first[minus]) if minus >= 0 else 0)
            out.append(f"{n / span:.2f}" if span > 0 else "0.00")
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
            "consumeQueueDiskRatio": f"{float(s.get('disk_used_ratio') or 0.0):.4f}",  # one disk for both
            "dispatchBehindBytes": str(s.get("dispatch_lag_bytes", 0)),
            "getTransferredTps": self._tps(1),  # RocketMQ 5's spelling
            "getTotalTps": self._tps(0, self.lookups),
            "getFoundTps": self._tps(1, self.lookups),
            "getMissTps": self._tps(0, self.lookups, minus=1),
            "putMessageTimesTotal": str(puts),
            "putMessageSizeTotal": str(s.get("put_bytes", 0)),
            "putMessageFailedTimes": str(s.get("put_failures", 0)),
            "putMessageAverageSize": f"{(s.get('put_bytes', 0) / puts) if puts else 0.0:.2f}",
            "remainHowManyDataToFlush": human_bytes(max(0, s.get("max_phy_offset", 0) - s.get("flushed_offset", 0))),
            "remainHowManyDataToCommit": "0",  # no transient store pool: writes go to the mapped file
            "remainTransientStoreBufferNumbs": str(2**31 - 1),  # RocketMQ's value when the pool is off
            "pageCacheLockTimeMills": "0",  # appends hold no lock across an await
            "dispatchMaxBuffer": "0",
        }


def human_bytes(n: float) -> str:
    """Bytes as RocketMQ's humanReadableByteCount (SI off) prints them: 0 B, 1.5 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def _count(table: dict[str, list[int]], key: str, n: int, size: int, calls: int = 1) -> None:
    """Add ``n`` messages of ``size`` bytes, one call, to ``key``'s counters (the message path: three additions)."""
    c = table.get(key)
    if c is None:
        c = table[key] = [0, 0, 0]
    c[0] += n
    c[1] += size
    c[2] += calls
