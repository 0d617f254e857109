"""An in-process NameServer on a free loopback port, plus a remoting client to talk to it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.namesrv import NamesrvPlugin
from rmq.plugins.remoting_tcp import TcpRemotingClient, TcpRemotingPlugin
from rmq.testing import make_kernel


@pytest.fixture
async def namesrv(tmp_path: Path) -> AsyncIterator[tuple[Any, TcpRemotingClient, str]]:
    kernel = make_kernel(
        [TcpRemotingPlugin({}), NamesrvPlugin({})],
        {"namesrv": {"listenHost": "127.0.0.1", "listenPort": 0, "scanNotActiveBrokerInterval": 200,
                     "brokerChannelExpiredTime": 600, "kvConfigPath": str(tmp_path / "kvConfig.json")}},
    )
    async with kernel:
        svc = kernel.services["namesrv"]
        addr = f"127.0.0.1:{svc.server.port}"
        async with TcpRemotingClient(RemotingConfig(name="test")) as client:
            yield svc, client, addr
