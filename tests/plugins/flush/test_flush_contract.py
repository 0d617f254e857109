"""The bundled flush policies against the FlushPolicy contract suite."""

from __future__ import annotations

from rmq.kernel.hookspecs.flush import FlushPolicy
from rmq.plugins.flush import AsyncFlushPlugin, SyncFlushPlugin
from rmq.roles import BrokerConfig
from rmq.testing.flush import CountingFlushable, FlushPolicyContract


class TestSyncFlushContract(FlushPolicyContract):
    synchronous = True

    def make_policy(self, store: CountingFlushable, config: BrokerConfig) -> FlushPolicy:
        return SyncFlushPlugin({}).rmq_flush_make_policy(kernel=None, store=store, config=config)


class TestAsyncFlushContract(FlushPolicyContract):
    synchronous = False

    def make_policy(self, store: CountingFlushable, config: BrokerConfig) -> FlushPolicy:
        return AsyncFlushPlugin({}).rmq_flush_make_policy(kernel=None, store=store, config=config)
