"""The wall clock of the places where a clock jump matters (the timer's due times), with a test seam.

A test that jumps one process's clock (issue #31's nemesis) cannot move the machine's, which other
processes share. ``now_ms`` adds an offset read from the file named by ``RMQ_CLOCK_SKEW_FILE`` (an
integer of milliseconds; re-read at most every 100 ms). The variable is read from the environment
once, at start-up: only whoever starts the process can set it, nothing over the network. Without
it ``now_ms`` is plain ``time.time``. Durations (heartbeat expiry, leases) use ``time.monotonic``,
which a wall-clock jump does not move.
"""

from __future__ import annotations

import os
import time

ENV = "RMQ_CLOCK_SKEW_FILE"
_path = os.environ.get(ENV) or None
_state = [0.0, 0]  # [monotonic time of the next read, offset ms]


def offset_ms() -> int:
    """The current skew (0 without the seam, or when the file is missing or not an integer)."""
    if _path is None:
        return 0
    now = time.monotonic()
    if now >= _state[0]:
        try:
            with open(_path) as f:
                _state[1] = int(f.read().strip() or 0)
        except (OSError, ValueError):
            _state[1] = 0
        _state[0] = now + 0.1
    return int(_state[1])


def now_ms() -> int:
    """Epoch milliseconds, shifted by the test seam's offset."""
    return time.time_ns() // 1_000_000 + offset_ms()
