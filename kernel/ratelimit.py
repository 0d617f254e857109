"""Rate-limited log lines: a peer that repeats a mistake a million times gets a few lines, not a million.

Every warning a stranger can trigger (bad frames, refused requests, resets) goes
through one of these, keyed by the kind of event (not by peer, or a scan from many
addresses would still flood): the first occurrence is logged, repeats within
``interval`` seconds are counted, and the next line that gets through says how
many were suppressed.
"""

from __future__ import annotations

import logging
import time

__all__ = ["RateLimitedLog"]


class RateLimitedLog:
    __slots__ = ("logger", "interval", "max_keys", "_seen")

    def __init__(self, logger: logging.Logger, interval: float = 10.0, max_keys: int = 1024) -> None:
        self.logger = logger
        self.interval = interval
        self.max_keys = max_keys
        self._seen: dict[str, list[float]] = {}  # key -> [last logged at, suppressed since]

    def log(self, level: int, key: str, msg: str, *args: object) -> bool:
        """Log unless ``key`` was logged less than ``interval`` ago; True when a line was written."""
        if not self.logger.isEnabledFor(level):
            return False
        now = time.monotonic()
        entry = self._seen.get(key)
        if entry is not None and now - entry[0] < self.interval:
            entry[1] += 1
            return False
        suppressed = int(entry[1]) if entry is not None else 0
        if entry is None and len(self._seen) >= self.max_keys:
            self._seen.clear()
        self._seen[key] = [now, 0]
        if suppressed:
            msg = f"{msg} ({suppressed} similar suppressed in the last {self.interval:g}s)"
        self.logger.log(level, msg, *args)
        return True

    def warning(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, key, msg, *args)

    def info(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.INFO, key, msg, *args)

    def error(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.ERROR, key, msg, *args)
