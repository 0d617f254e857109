"""The proxy's FIFO queue choice: Java's ``String.hashCode`` fed to Guava's ``Hashing.consistentHash``.

RocketMQ 5's proxy picks the queue of a message group as
``Hashing.consistentHash(group.hashCode(), writeQueues.size())`` (``SendMessageActivity``): the
same group must land on the same queue here as there, so both functions are reproduced bit for
bit (Java's 32/64-bit wrap-around, ``(int)`` truncation included).
"""

from __future__ import annotations

_M32 = 0xFFFF_FFFF
_M64 = 0xFFFF_FFFF_FFFF_FFFF
_LCG_A = 2862933555777941757  # Guava's LinearCongruentialGenerator multiplier


def java_string_hash(s: str) -> int:
    """``String.hashCode()``: s[0]*31^(n-1) + ... over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _M32
    return h - (1 << 32) if h & 0x8000_0000 else h


def consistent_hash(value: int, buckets: int) -> int:
    """Guava's ``Hashing.consistentHash(long, int)``: a bucket in [0, buckets) that moves only to
    the new bucket when ``buckets`` grows by one."""
    if buckets <= 0:
        raise ValueError(f"buckets must be positive: {buckets}")
    state = value & _M64
    candidate = 0
    while True:
        state = (_LCG_A * state + 1) & _M64
        x = (state >> 33) + 1  # Java: (int)(state >>> 33) + 1, an int: 2^31 wraps to -2^31
        if x == 1 << 31:
            x = -(1 << 31)
        nxt = int((candidate + 1) / (x / 2.0**31))  # (int): toward zero (x never 0, so never NaN)
        if not 0 <= nxt < buckets:
            return candidate
        candidate = nxt
