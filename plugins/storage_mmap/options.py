"""``MmapOptions``: the ``[plugin.storage.mmap]`` table (every store setting proper is in ``[broker]``)."""

from __future__ import annotations

import attrs


@attrs.define(frozen=True)
class MmapOptions:
    """The ``[plugin.storage.mmap]`` table."""

    preallocate: bool = True  # create the next commitlog segment on a background thread
    # Reserve disk blocks before writing any file. false leaves files sparse: a full disk then ends
    # the process with SIGBUS. Only for a filesystem whose posix_fallocate is too slow.
    fallocate: bool = True
    # most records handed to dispatchers in one call (one loop turn): 4096 took 20-45 ms a step and,
    # measured, 1024 produced batches over TCP ~25 % faster with no loop stall above 70 ms
    dispatch_batch: int = 1024
    backlog_bytes: int = 32 * 1024 * 1024  # a put yields to the reput loop when dispatch lags this much
    # Start-up checks: "all" validates every commitlog record (CRC) and checks every consume-queue
    # unit against its record, which reads the whole store at each start (~3.5 s per GiB of 1 KiB
    # messages, cached); "recent" does so only in RocketMQ's window (the last three segments, or
    # from the checkpoint after a crash); "auto": "all" up to verify_all_max_gib, else "recent".
    verify: str = "auto"
    verify_all_max_gib: float = 8.0
    disk_retry_ms: int = 1000  # how often writes refused for a full disk retry on their own
    # Consume queues mapped at once (a descriptor and a mapping per file); idle ones beyond are
    # unmapped and mapped again when read or written. Never above an eighth of RLIMIT_NOFILE
    # (two descriptors a file).
    max_mapped_queues: int = 4096

    def __attrs_post_init__(self) -> None:
        if self.dispatch_batch < 1:
            raise ValueError("dispatch_batch must be >= 1")
        if self.backlog_bytes < 1:
            raise ValueError("backlog_bytes must be >= 1")
        if self.verify not in ("auto", "all", "recent"):
            raise ValueError(f"verify must be 'auto', 'all' or 'recent', got {self.verify!r}")
        if self.disk_retry_ms < 1:
            raise ValueError("disk_retry_ms must be >= 1")
        if self.max_mapped_queues < 1:
            raise ValueError("max_mapped_queues must be >= 1")
