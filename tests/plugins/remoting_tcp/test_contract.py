"""The tcp transport against the remoting contract suite."""

from __future__ import annotations

from rmq.kernel.testing.remoting import RemotingContract
from rmq.plugins.remoting_tcp import TcpRemotingPlugin


class TestTcpRemotingContract(RemotingContract):
    def make_plugin(self) -> object:
        return TcpRemotingPlugin({})
