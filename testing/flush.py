"""Contract tests every ``FlushPolicy`` must pass; subclass to run them against yours.

    from rmq.testing.flush import FlushPolicyContract

    class TestMyPolicy(FlushPolicyContract):
        synchronous = True
        def make_policy(self, store, config):
            return MyFlushPlugin({}).rmq_flush_make_policy(kernel=None, store=store, config=config)

The store side is ``CountingFlushable``: an in-memory ``Flushable`` that counts forced
flushes, so the checks see exactly what the policy asked of the disk.
"""

from __future__ import annotations

import threading
from typing import ClassVar

import anyio
import pytest

from rmq.kernel.hookspecs.flush import Flushable, FlushPolicy
from rmq.kernel.watermark import Watermark
from rmq.roles import BrokerConfig


class CountingFlushable:
    """A ``Flushable`` whose 'disk' is an integer; ``flush`` may run in any thread."""

    def __init__(self) -> None:
        self.durable = Watermark()
        self._lock = threading.Lock()
        self.written = 0
        self._flushed = 0
        self.flush_calls = 0

    @property
    def max_phy_offset(self) -> int:
        return self.written

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def append(self, n: int) -> int:
        self.written += n
        return self.written

    def flush(self, least_pages: int) -> int:
        with self._lock:
            self.flush_calls += 1
            dirty_pages = (self.written - self._flushed) // 4096
            if least_pages <= 0 or dirty_pages >= least_pages:
                self._flushed = self.written
            return self._flushed


class FlushPolicyContract:
    """Base class (no ``Test`` prefix, so pytest collects only your subclass)."""

    #: whether puts wait for the disk under this policy
    synchronous: ClassVar[bool] = False

    def make_policy(self, store: CountingFlushable, config: BrokerConfig) -> FlushPolicy:
        raise NotImplementedError("subclass provides make_policy(store, config)")

    def config(self) -> BrokerConfig:
        return BrokerConfig(flushIntervalCommitLog=20, flushCommitLogThoroughInterval=100, syncFlushTimeout=2000)

    @pytest.mark.anyio
    async def test_satisfies_the_protocol(self) -> None:
        disk = CountingFlushable()
        assert isinstance(disk, Flushable)
        policy = self.make_policy(disk, self.config())
        assert isinstance(policy, FlushPolicy)
        assert policy.synchronous is self.synchronous

    @pytest.mark.anyio
    async def test_leaving_flushes_everything(self) -> None:
        store = CountingFlushable()
        async with self.make_policy(store, self.config()) as policy:
            store.append(100)
            policy.wake()
        assert store.flushed_offset == store.written == 100

    @pytest.mark.anyio
    async def test_wait_flushed_returns_once_durable(self) -> None:
        store = CountingFlushable()
        async with self.make_policy(store, self.config()) as policy:
            end = store.append(10)
            policy.wake()
            with anyio.fail_after(5):
                assert await policy.wait_flushed(end) is True
            assert store.flushed_offset >= end
            assert store.durable.value >= end, "a policy advances store.durable after each flush"

    @pytest.mark.anyio
    async def test_concurrent_waiters_share_flushes(self) -> None:
        if not self.synchronous:
            return  # asynchronous policies flush on their own schedule
        store = CountingFlushable()
        ok: list[bool] = []
        async with self.make_policy(store, self.config()) as policy:

            async def put() -> None:
                end = store.append(64)
                policy.wake()
                ok.append(await policy.wait_flushed(end))

            with anyio.fail_after(5):
                async with anyio.create_task_group() as tg:
                    for _ in range(64):
                        tg.start_soon(put)
        assert ok == [True] * 64
        assert store.flush_calls < 64, "group commit: waiters must share flushes"

    @pytest.mark.anyio
    async def test_idle_policy_does_not_spin(self) -> None:
        store = CountingFlushable()
        async with self.make_policy(store, self.config()):
            await anyio.sleep(0.3)
        assert store.flush_calls < 100

