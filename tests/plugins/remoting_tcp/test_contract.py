"""The tcp transport against the remoting contract suite."""

from __future__ import annotations

from rmq.plugins.remoting_tcp import TcpRemotingPlugin
from rmq.testing.remoting import RemotingContract


class TestTcpRemotingContract(RemotingContract):
    def make_plugin(self) -> object:
        return TcpRemotingPlugin({})
