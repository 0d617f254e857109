"""Flush policies: group commit, timeouts, periodic flushing with least-pages, final flush."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.kernel.hookspecs.flush import Flushable, FlushPolicy
from rmq.kernel.markers import hookimpl
from rmq.kernel.model import MessageRecord, PutStatus
from rmq.plugins.flush import AsyncFlushPlugin, AsyncFlushPolicy, SyncFlushPlugin, SyncFlushPolicy
from rmq.plugins.storage_mmap import MmapStoragePlugin
from rmq.roles import BrokerConfig
from rmq.testing import make_kernel
from rmq.testing.flush import CountingFlushable
from rmq.testing.storage import attach_from_hooks


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Disk(CountingFlushable):
    """The contract's counting store, but its flush takes ``delay`` seconds (a slow or stalled disk) and
    each call's ``least_pages`` is kept."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay
        self.calls: list[int] = []

    @property
    def flushed(self) -> int:
        return self._flushed

    def flush(self, least_pages: int) -> int:
        target = self.written
        with self._lock:
            self.calls.append(least_pages)
            if least_pages and target // 4096 - self._flushed // 4096 < least_pages:
                return self._flushed
            time.sleep(self.delay)
            self._flushed = max(self._flushed, target)
            return self._flushed


async def until(pred: Any, timeout: float = 10.0) -> None:
    """Wait for a condition of the policy's background flushes (their intervals are minimums under load)."""
    with anyio.fail_after(timeout):
        while not pred():  # noqa: ASYNC110 - the flushes run on a thread; polling is the simple way
            await anyio.sleep(0.01)


def cfg(**kw: Any) -> BrokerConfig:
    return BrokerConfig(**kw)


def test_policies_satisfy_the_protocol_and_plugins_check_options() -> None:
    disk = Disk()
    assert isinstance(disk, Flushable)
    assert isinstance(SyncFlushPolicy(disk, cfg()), FlushPolicy) and SyncFlushPolicy(disk, cfg()).synchronous
    assert (
        isinstance(AsyncFlushPolicy(disk, cfg()), FlushPolicy)
        and not AsyncFlushPolicy(disk, cfg()).synchronous
    )
    for plugin in (AsyncFlushPlugin, SyncFlushPlugin):
        with pytest.raises(ValueError, match="unknown option.*interval"):
            plugin({"interval": 5})
        policy = plugin({}).rmq_flush_make_policy(kernel=None, store=disk, config=cfg())
        assert isinstance(policy, FlushPolicy)


@pytest.mark.anyio
async def test_group_commit_shares_flushes() -> None:
    disk = Disk(delay=0.01)
    async with SyncFlushPolicy(disk, cfg()) as policy:
        results: list[bool] = []

        async def putter() -> None:
            for _ in range(10):
                disk.written += 100
                results.append(await policy.wait_flushed(disk.written))

        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(putter)
    assert results == [True] * 200
    assert len(disk.calls) <= 40  # ~10 rounds of 20 waiters, not 200 flushes
    assert disk.flushed == disk.written


@pytest.mark.anyio
async def test_sync_timeout_reports_false_then_recovers() -> None:
    disk = Disk(delay=2.0)
    async with SyncFlushPolicy(disk, cfg(syncFlushTimeout=100)) as policy:
        disk.written = 10
        t0 = time.monotonic()
        assert await policy.wait_flushed(10) is False
        assert disk.flushed == 0  # the watchdog ended the wait, not the stalled flush ...
        assert time.monotonic() - t0 < 2.0  # ... (also when a loaded machine stretches the 100 ms)
        await until(lambda: disk.flushed == 10)  # the stalled flush completes
        assert await policy.wait_flushed(10) is True


@pytest.mark.anyio
async def test_sync_lone_waiters_flush_inline_on_a_fast_disk_and_a_slow_flush_returns_rounds_to_the_thread() -> None:
    disk = Disk()
    async with SyncFlushPolicy(disk, cfg(syncFlushTimeout=5000)) as policy:

        async def put() -> None:
            disk.written += 100
            end = disk.written
            assert await policy.wait_flushed(end)
            assert disk.flushed >= end

        for _ in range(policy.INLINE_AFTER):  # one durable put at a time
            await put()
        assert policy.inline_rounds == 0  # the thread serves until the disk has proved fast
        for _ in range(500):  # a fast disk (a busy machine may delay some rounds): lone puts go inline
            await put()
            if policy.inline_rounds:
                break
        assert policy.inline_rounds >= 1
        inline = policy.inline_rounds
        disk.delay = policy.FAST_FLUSH_S * 2  # the disk stalls once, on the loop
        await put()
        assert policy.inline_rounds == inline + 1
        disk.delay = 0.0
        await put()
        assert policy.inline_rounds == inline + 1  # after the slow one, the thread serves again

        rounds = policy.rounds
        async with anyio.create_task_group() as tg:  # many waiters in one turn share thread rounds
            for _ in range(8):
                tg.start_soon(put)
        assert policy.inline_rounds == inline + 1 and 1 <= policy.rounds - rounds < 8


@pytest.mark.anyio
async def test_a_lone_producer_flushes_each_unit_once_when_it_completes_and_company_goes_back_to_shared_rounds() -> None:
    """Units (the puts of one socket read, then ``settle``), one per loop turn, turn after turn, on a
    proven-fast disk: ``settle`` flushes on the spot, one flush however many puts the unit holds;
    ``want_flushed`` itself never flushes. Two units in one turn end that."""
    disk = Disk()
    async with SyncFlushPolicy(disk, cfg(syncFlushTimeout=5000)) as policy:
        assert disk.durable.settle == policy.settle  # what a connection calls after a read

        def ask() -> tuple[int, bool]:
            disk.written += 100
            return disk.written, policy.want_flushed(disk.written)

        settled = False
        for _ in range(policy.INLINE_AFTER + policy.SOLO_AFTER + 500):
            end, pending = ask()
            assert pending and disk.flushed < end  # a put alone never flushes
            policy.settle()
            if disk.durable.value >= end:  # flushed on the spot, inside settle
                settled = True
                break
            assert await disk.durable.wait_for(end, 5)
            await anyio.lowlevel.checkpoint()  # the next read comes in a later turn
        assert settled

        for n in (1, 5, 32):  # a lone pipelining producer: one flush per read, whatever the read carries
            await anyio.lowlevel.checkpoint()
            calls = len(disk.calls)
            ends = [ask() for _ in range(n)]
            assert all(pending for _, pending in ends) and len(disk.calls) == calls
            policy.settle()
            assert disk.durable.value >= ends[-1][0] and len(disk.calls) == calls + 1

        # company: two units in one turn; the first may flush on the spot, the second waits for the
        # turn's round, and after that turn units wait for rounds again
        await anyio.lowlevel.checkpoint()
        ask()
        policy.settle()
        end2, pending2 = ask()
        policy.settle()
        assert pending2 and disk.flushed < end2
        assert await disk.durable.wait_for(end2, 5)
        await anyio.lowlevel.checkpoint()
        end3, pending3 = ask()
        policy.settle()
        assert pending3 and disk.flushed < end3  # no longer a lone producer
        assert await disk.durable.wait_for(end3, 5)
    assert disk.durable.settle is None


@pytest.mark.anyio
async def test_async_policy_least_pages_and_thorough() -> None:
    disk = Disk()
    conf = cfg(flushIntervalCommitLog=20, flushCommitLogLeastPages=4, flushCommitLogThoroughInterval=400)
    async with AsyncFlushPolicy(disk, conf) as policy:
        disk.written = 3 * 4096  # below 4 dirty pages: periodic flushes skip it ...
        await until(lambda: 0 in disk.calls)  # ... until the thorough interval flushes whatever is written
        first_thorough = disk.calls.index(0)
        assert first_thorough >= 1 and set(disk.calls[:first_thorough]) == {4}
        assert disk.flushed == 3 * 4096
        disk.written += 5 * 4096  # 5 dirty pages: the next periodic flush takes them
        await until(lambda: disk.flushed == 8 * 4096)
        disk.written += 10
        with anyio.fail_after(1):  # a waiter asks for a full flush now
            assert await policy.wait_flushed(disk.written)
        disk.written += 10
    assert disk.flushed == disk.written  # final flush on exit


@pytest.mark.anyio
async def test_sync_store_puts_are_durable_before_ack(tmp_path: Path) -> None:
    kernel = make_kernel(
        [MmapStoragePlugin(), SyncFlushPlugin()],
        {
            "broker": {
                "storePathRootDir": str(tmp_path),
                "mappedFileSizeCommitLog": 1 << 20,
                "flushDiskType": "SYNC_FLUSH",
            }
        },
    )
    store = attach_from_hooks(kernel, kernel.hook.rmq_storage_make_store(kernel=kernel, config=kernel.config.broker))
    async with store:
        assert store.policy.synchronous

        async def put(i: int) -> None:
            r = await store.put_message(MessageRecord("T", i % 4, b"x" * 500))
            assert r.status == PutStatus.PUT_OK
            assert store.flushed_offset >= r.wrote_offset + r.wrote_bytes

        async with anyio.create_task_group() as tg:
            for i in range(64):
                tg.start_soon(put, i)
        assert store.policy.rounds < 64
        r = await store.put_message(MessageRecord("T", 0, b"y", properties="WAIT\x01false"))
        assert r.ok  # WAIT=false: stored without waiting for the disk


class NeverDurable:
    """A third-party flush plugin whose disk never confirms: puts must say FLUSH_DISK_TIMEOUT."""

    class Policy:
        synchronous = True

        async def __aenter__(self) -> Any:
            return self

        async def __aexit__(self, *exc: object) -> None:
            pass

        async def wait_flushed(self, end_offset: int) -> bool:
            return False

        def wake(self) -> None:
            pass

    @hookimpl
    def rmq_flush_make_policy(self, kernel: Any, store: Any, config: Any) -> Any:
        return self.Policy()


@pytest.mark.anyio
async def test_flush_timeout_status(tmp_path: Path) -> None:
    kernel = make_kernel(
        [MmapStoragePlugin(), NeverDurable()], {"broker": {"storePathRootDir": str(tmp_path)}}
    )
    store = attach_from_hooks(kernel, kernel.hook.rmq_storage_make_store(kernel=kernel, config=kernel.config.broker))
    async with store:
        r = await store.put_message(MessageRecord("T", 0, b"x"))
        assert r.status == PutStatus.FLUSH_DISK_TIMEOUT and r.wrote_offset == 0
        await store.wait_dispatched()
        assert store.get_max_offset("T", 0) == 1  # stored all the same
