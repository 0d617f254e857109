"""Issue #26, bounded resources: what a stranger can make a broker or name server create is bounded,
exhaustion is reported as what it is, and a store full of queues still starts fast.

Every test runs real ``rmqd`` processes on loopback and fails on the code before the fix.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import anyio

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.testing.daemon import RmqdProcess

req = RemotingCommand.request


def call(addr: str, cmd: RemotingCommand) -> RemotingCommand:
    """One request from a fresh client (the tests are synchronous: rmqd is another process)."""

    async def go() -> RemotingCommand:
        async with TcpRemotingClient(RemotingConfig(name="stranger")) as client:
            return await client.invoke(addr, cmd, 10)

    return anyio.run(go)


def calls(addr: str, cmds: list[RemotingCommand]) -> list[RemotingCommand]:
    """Many requests over one connection, in order."""

    async def go() -> list[RemotingCommand]:
        async with TcpRemotingClient(RemotingConfig(name="stranger")) as client:
            return [await client.invoke(addr, c, 10) for c in cmds]

    return anyio.run(go)


# ---------------------------------------------------------------------- name server KV file


def test_namesrv_kv_file_stays_under_its_home(rmqd_factory: Callable[..., RmqdProcess], tmp_path: Path) -> None:
    """RocketMQ's default kvConfigPath is ~/namesrv/kvConfig.json; rmqd's is under its own store:
    the broker's storePathRootDir, or $RMQ_HOME for a name server alone. HOME stays empty (stevedore's
    entry-point cache, the plugin loader's, honours XDG_CACHE_HOME: pointed elsewhere here)."""
    home = tmp_path / "home"
    home.mkdir()
    rmq_home = tmp_path / "rmq-home"
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    put = req(RequestCode.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"})
    alone = rmqd_factory(broker=False, namesrv_conf={"kvConfigPath": ""},
                         env={**env, "RMQ_HOME": str(rmq_home)})
    assert call(alone.namesrv_addr, put).code == ResponseCode.SUCCESS
    assert json.loads((rmq_home / "namesrv" / "kvConfig.json").read_text())["configTable"] == {"n": {"k": "v"}}
    both = rmqd_factory(namesrv_conf={"kvConfigPath": ""}, env={**env, "RMQ_HOME": str(rmq_home / "x")})
    assert call(both.namesrv_addr, put).code == ResponseCode.SUCCESS
    assert (both.workdir / "store" / "namesrv" / "kvConfig.json").is_file()
    assert list(home.iterdir()) == [], f"written outside rmqd's home: {list(home.rglob('*'))}"
    assert not (rmq_home / "x").exists()
