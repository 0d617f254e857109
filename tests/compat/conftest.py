"""Fixtures for compatibility tests: real rmqd processes and real C++ clients in child processes.

Order matters: C++ clients hang on shutdown when the broker is gone, so the
``cpp`` fixture depends on ``rmqd_factory`` and is torn down first (workers stopped,
killed if they do not exit in time) before any rmqd is stopped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.acl import sign
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.testing.daemon import RmqdProcess
from rmq.testing.faults import Worker as ChildWorker

WORKER = Path(__file__).with_name("cppworker.py")


class Worker(ChildWorker):
    """One C++ client process (cppworker.py); its JSON lines are collected by the base's reader thread."""

    def __init__(self, cfg: dict[str, Any], log_dir: Path) -> None:
        self.cfg = cfg
        super().__init__([sys.executable, str(WORKER), json.dumps(cfg)],
                         log_dir / f"cpp-{cfg['mode']}-{id(self):x}.log", f"C++ {cfg['mode']} worker")

    def messages(self) -> list[dict[str, Any]]:
        return [ln["msg"] for ln in list(self.lines) if "msg" in ln]

    def results(self) -> list[dict[str, Any]]:
        return [ln for ln in list(self.lines) if "i" in ln]

    def has(self, key: str) -> bool:
        return any(key in ln for ln in list(self.lines))

    def finish(self, timeout: float) -> list[dict[str, Any]]:
        """Wait for a self-terminating worker (produce/pull) and return its lines."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"C++ {self.cfg['mode']} worker did not finish in {timeout:g}s; "
                                 f"last lines {self.lines[-3:]}") from None
        self._reader.join(5)
        return list(self.lines)


@pytest.fixture
def cpp(rmqd_factory: Any, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start C++ client workers; all are stopped (then killed) before any rmqd stops."""
    workers: list[Worker] = []

    def start(mode: str, **cfg: Any) -> Worker:
        w = Worker({"mode": mode, **cfg}, tmp_path)
        workers.append(w)
        return w

    yield start
    for w in reversed(workers):
        w.stop(20)


def admin(addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes = b"",
          timeout: float = 5.0, credentials: tuple[str, str] | None = None) -> RemotingCommand:
    """One raw request with rmq's own remoting client, from synchronous test code (signed for ACL
    when ``credentials`` are given)."""

    async def go() -> RemotingCommand:
        async with TcpRemotingClient(RemotingConfig(name="compat-admin")) as c:
            cmd = RemotingCommand.request(code, {k: str(v) for k, v in (ext or {}).items()}, body)
            if credentials:
                sign(cmd.ext, cmd.body, *credentials)
            return await c.invoke(addr, cmd, timeout)

    return anyio.run(go)


def create_topic(proc: RmqdProcess, topic: str, queues: int = 4) -> None:
    r = admin(proc.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
        "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
    assert r.code == 0, r.remark
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if admin(proc.namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).code == 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"route of {topic} never appeared")


def held_pulls(proc: RmqdProcess) -> int:
    r = admin(proc.broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    return int(json.loads(r.body)["table"]["pullHeld"])


def consumer_ids(proc: RmqdProcess, group: str) -> list[str]:
    r = admin(proc.broker_addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    return json.loads(r.body)["consumerIdList"] if r.code == 0 else []


@pytest.fixture
def compat() -> types.SimpleNamespace:
    """The admin helpers above, for test modules (conftest modules are not importable by name)."""
    return types.SimpleNamespace(admin=admin, create_topic=create_topic, held_pulls=held_pulls,
                                 consumer_ids=consumer_ids)
