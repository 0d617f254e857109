"""In-process NameServer + Broker kernels on free loopback ports, and raw-protocol helpers.

The kernel is the real one (TCP remoting, memory or mmap store, tag/sql92 filters,
namesrv, broker and schedule plugins); tests talk to it over TCP with rmq's own
remoting client, exactly as a RocketMQ client would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.broker import BrokerPlugin
from rmq.plugins.filters import Sql92FilterPlugin, TagFilterPlugin
from rmq.plugins.flush import AsyncFlushPlugin
from rmq.plugins.memory import MemoryStoragePlugin
from rmq.plugins.namesrv import NamesrvPlugin
from rmq.plugins.remoting_tcp import TcpRemotingClient, TcpRemotingPlugin
from rmq.plugins.schedule import SchedulePlugin
from rmq.plugins.storage_mmap import MmapStoragePlugin
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import encode_properties
from rmq.testing import make_kernel


class Env:
    """A running kernel plus a client; ``broker``/``namesrv`` are the role services."""

    def __init__(self, kernel: Any, client: TcpRemotingClient) -> None:
        self.kernel = kernel
        self.client = client
        self.broker = kernel.services["broker"]
        self.namesrv = kernel.services.get("namesrv")
        self.addr = self.broker.broker_addr
        self.ns_addr = f"127.0.0.1:{self.namesrv.server.port}" if self.namesrv else ""

    async def call(
        self,
        code: int,
        ext: dict[str, Any] | None = None,
        body: bytes = b"",
        timeout: float = 5.0,
        addr: str | None = None,
    ) -> RemotingCommand:
        ext = {k: str(v) for k, v in (ext or {}).items()}
        return await self.client.invoke(addr or self.addr, RemotingCommand.request(code, ext, body), timeout)

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str = "",
        keys: str = "",
        queue_id: int = 0,
        props: dict[str, str] | None = None,
        code: int = RequestCode.SEND_MESSAGE,
        **ext: Any,
    ) -> RemotingCommand:
        p = dict(props or {})
        if tags:
            p["TAGS"] = tags
        if keys:
            p["KEYS"] = keys
        hdr = {
            "producerGroup": "PG",
            "topic": topic,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": 4,
            "queueId": queue_id,
            "sysFlag": 0,
            "bornTimestamp": 1700000000000,
            "flag": 0,
            "properties": encode_properties(p),
            "reconsumeTimes": 0,
            "unitMode": "0",
            "batch": "0",
        }
        hdr.update(ext)
        if code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            letters = dict(
                zip(
                    [
                        "producerGroup",
                        "topic",
                        "defaultTopic",
                        "defaultTopicQueueNums",
                        "queueId",
                        "sysFlag",
                        "bornTimestamp",
                        "flag",
                        "properties",
                        "reconsumeTimes",
                        "unitMode",
                        "maxReconsumeTimes",
                        "batch",
                    ],
                    "abcdefghijklm",
                    strict=True,
                )
            )
            hdr = {letters[k]: v for k, v in hdr.items() if k in letters}
        return await self.call(code, hdr, body)

    async def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        group: str = "CG",
        sub: str | None = "*",
        suspend_ms: int = 0,
        max_nums: int = 32,
        commit: int | None = None,
        expression_type: str = "TAG",
        timeout: float = 10.0,
    ) -> RemotingCommand:
        flag = (4 if sub is not None else 0) | (2 if suspend_ms else 0) | (1 if commit is not None else 0)
        hdr = {
            "consumerGroup": group,
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": offset,
            "maxMsgNums": max_nums,
            "sysFlag": flag,
            "commitOffset": commit or 0,
            "suspendTimeoutMillis": suspend_ms,
            "subVersion": 0,
            "expressionType": expression_type,
        }
        if sub is not None:
            hdr["subscription"] = sub
        return await self.call(RequestCode.PULL_MESSAGE, hdr, timeout=timeout)


@asynccontextmanager
async def running(
    tmp: Path,
    *,
    store: str = "memory",
    namesrv: bool = True,
    handler: Any = None,
    schedule: bool = True,
    extra_plugins: tuple[Any, ...] = (),
    **broker_conf: Any,
) -> AsyncIterator[Env]:
    conf: dict[str, Any] = {
        "broker": {
            "listenHost": "127.0.0.1",
            "listenPort": 0,
            "brokerIP1": "127.0.0.1",
            "storePathRootDir": str(tmp / "store"),
            "mappedFileSizeCommitLog": 4 * 1024 * 1024,
            **broker_conf,
        }
    }
    if namesrv:
        conf["namesrv"] = {"listenHost": "127.0.0.1", "listenPort": 0, "kvConfigPath": str(tmp / "kvConfig.json")}
    store_plugin = MemoryStoragePlugin({}) if store == "memory" else MmapStoragePlugin({})
    plugins = [
        TcpRemotingPlugin({}),
        store_plugin,
        AsyncFlushPlugin({}),
        TagFilterPlugin({}),
        Sql92FilterPlugin({}),
    ]
    if namesrv:
        plugins.append(NamesrvPlugin({}))
    plugins += [BrokerPlugin({}), *([SchedulePlugin({})] if schedule else []), *extra_plugins]
    kernel = make_kernel(plugins, conf)
    async with kernel:
        async with TcpRemotingClient(RemotingConfig(name="test"), handler) as client:
            yield Env(kernel, client)


@pytest.fixture
def broker_env(tmp_path: Path) -> Callable[..., Any]:
    """``async with broker_env(**broker_conf) as env:`` — a fresh kernel per use."""

    def make(**kw: Any) -> Any:
        return running(tmp_path, **kw)

    return make
