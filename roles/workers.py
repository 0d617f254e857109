"""``[broker] workers = N``: one rmqd, N shared-nothing broker processes under one supervisor.

RocketMQ scales out on one host by running several brokers (RocketMQ 5's BrokerContainer, RIP-31, hosts
them in one JVM); a Python broker uses one core, so here each broker is a child ``rmqd`` process of its
own. Nothing new goes on the wire: every worker is an ordinary broker of ``brokerClusterName``, so a topic
created on the cluster spreads its queues over the workers and routing, rebalance, per-queue order,
transactions and timers work as they do across any brokers.

The rules for worker K (0 <= K < N; with N = 1 none applies and rmqd runs its broker in-process):

- ``brokerName`` is ``<brokerName>-K`` (broker-a-0, broker-a-1, ...);
- every port it opens is the configured one plus ``4*K``: ``listenPort`` (so its VIP channel,
  listenPort - 2, and its default HA port, listenPort + 1, are each worker's own and never another's),
  an explicit ``haListenPort``, ``metricsPromExporterPort``, ``[proxy] grpcServerPort``, ``[dashboard]
  listenPort`` (a port of 0 stays 0);
- its store is ``<storePathRootDir>/worker-K`` (and an explicit ``storePathCommitLog`` gets ``/worker-K``);
- with HA, a slave rmqd configured with the same ``workers`` pairs its worker K with the master's worker K:
  both are ``<brokerName>-K``, so the slave learns its master from the name server as RocketMQ slaves do;
  an explicit ``haMasterAddress`` host:port is moved by ``4*K`` like every other port;
- the name server (and a controller) of the config run in the supervisor, not in a worker: they must
  outlive a worker's crash and restart, or clients would lose every route at once. Workers register
  there (``namesrvAddr`` empty = the supervisor's name server).

The supervisor starts the workers side by side, says ready once all are, restarts a worker that dies
(after 1 s, doubling to 30 s while it keeps dying within a minute of starting, each time logging why),
and on SIGTERM stops them all (each flushes and unregisters as a lone broker does) and exits 0.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
from anyio.abc import Process, TaskStatus
from anyio.streams.buffered import BufferedByteReceiveStream

from rmq.kernel import ConfigError

log = logging.getLogger("rmq.workers")

PORT_STEP = 4  # a worker's ports: the configured ones + 4*K; room for VIP (-2), listen, HA (+1)
SUPERVISOR_PID_ENV = "RMQ_SUPERVISOR_PID"
READY_TIMEOUT = 300.0  # s a worker may take to start (recovering a big store takes a while)
STOP_TIMEOUT = 60.0  # s a worker gets to flush and unregister after SIGTERM, then SIGKILL
BACKOFF_FIRST, BACKOFF_MAX, STABLE_AFTER = 1.0, 30.0, 60.0


class WorkerStartError(ConfigError):
    """A worker did not get ready at the supervisor's start: rmqd refuses to start, as a lone broker that
    cannot start does (the worker's own log lines say why: a bad value, a port in use)."""


def _moved(port: int, k: int) -> int:
    return port + PORT_STEP * k if port else 0


def _moved_addr(addr: str, k: int) -> str:
    host, sep, port = addr.rpartition(":")
    return f"{host}:{_moved(int(port), k)}" if sep and port.isdigit() else addr


def worker_config(root: Any, k: int) -> Any:
    """``root`` as worker ``k`` runs it: its broker (the rules above), its proxy and dashboard ports, and
    no name server or controller (the supervisor's)."""
    b = root.broker
    if not 0 <= k < b.workers:
        raise ValueError(f"worker {k}: broker.workers is {b.workers}")
    namesrv_addr = b.namesrvAddr
    ns = root.tables.get("namesrv")
    if not namesrv_addr and ns is not None:
        host = ns.listenHost if ns.listenHost not in ("", "0.0.0.0", "::") else "127.0.0.1"
        namesrv_addr = f"{host}:{ns.listenPort}"
    acl_file = b.plainAclFile
    if not acl_file and not Path(root.source).is_file():  # the plain ACL's fallback is under the store root
        acl_file = str(b.store_root() / "conf" / "plain_acl.yml")
    broker = attrs.evolve(
        b, workers=1, brokerName=f"{b.brokerName}-{k}", namesrvAddr=namesrv_addr,
        listenPort=_moved(b.listenPort, k), haListenPort=_moved(b.haListenPort, k),
        haMasterAddress=_moved_addr(b.haMasterAddress, k),
        metricsPromExporterPort=_moved(b.metricsPromExporterPort, k),
        storePathRootDir=str(b.store_root() / f"worker-{k}"),
        storePathCommitLog=str(Path(b.storePathCommitLog) / f"worker-{k}") if b.storePathCommitLog else "",
        plainAclFile=acl_file,
    )
    tables = {name: t for name, t in root.tables.items() if name not in ("namesrv", "controller")}
    tables["broker"] = broker
    for name, key in (("proxy", "grpcServerPort"), ("dashboard", "listenPort")):
        t = tables.get(name)
        if t is not None and hasattr(t, key):
            tables[name] = attrs.evolve(t, **{key: _moved(getattr(t, key), k)})
    return attrs.evolve(root, tables=tables)


def supervisor_config(root: Any) -> Any:
    """What the supervisor process serves itself: the name server and controller of ``root``, if any (the
    name server keeps its kvConfig under the broker's store root, as in a one-process rmqd)."""
    b = root.broker
    tables = {name: t for name, t in root.tables.items() if name not in ("broker", "proxy", "dashboard")}
    ns = tables.get("namesrv")
    if ns is not None and not ns.kvConfigPath:
        tables["namesrv"] = attrs.evolve(ns, kvConfigPath=str(ns.kv_config_path(b.store_root())))
    return attrs.evolve(root, tables=tables)


def attach_to_supervisor() -> None:
    """In a worker: die with the supervisor (Linux's parent-death signal), so a supervisor killed with
    SIGKILL leaves no broker behind holding ports and stores; exit at once if it is gone already."""
    expected = os.environ.get(SUPERVISOR_PID_ENV)
    if expected is None:
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != int(expected):
        raise SystemExit("rmqd worker: its supervisor is gone")


def exit_reason(rc: int | None) -> str:
    if rc is None:
        return "no exit status"
    if rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"exit code {rc}"


def _start_error(e: BaseException) -> WorkerStartError | None:
    if isinstance(e, WorkerStartError):
        return e
    for sub in getattr(e, "exceptions", ()):
        if (found := _start_error(sub)) is not None:
            return found
    return None


@attrs.define
class Worker:
    """One worker as the supervisor sees it: the ports it reported when it last got ready."""

    k: int
    name: str
    pid: int = 0
    ports: dict[str, int] = attrs.field(factory=dict)
    restarts: int = 0
    proc: Process | None = None

    def describe(self) -> str:
        ports = ", ".join(f"{n} {p}" for n, p in self.ports.items())
        return f"{self.name} (pid {self.pid}: {ports})"


class Supervisor:
    """Runs ``broker.workers`` child rmqd processes; :meth:`run` returns once all are ready."""

    def __init__(self, root: Any, argv: list[str]) -> None:
        self.root = root
        self.argv = argv
        self.own = supervisor_config(root)
        b = root.broker
        self.workers = [Worker(k, f"{b.brokerName}-{k}") for k in range(b.workers)]

    def describe(self) -> str:
        """The workers' ports, for rmqd's ready line."""
        return f"{len(self.workers)} broker workers: " + "; ".join(w.describe() for w in self.workers)

    def command(self, k: int) -> list[str]:
        return [sys.executable, "-m", "rmq.kernel.daemon", *self.argv, "--worker", str(k)]

    @asynccontextmanager
    async def run(self) -> AsyncIterator[list[Worker]]:
        """Start every worker and keep each running until the block ends; then stop them all. A worker
        that cannot start stops the others and raises its :class:`WorkerStartError`."""
        try:
            async with anyio.create_task_group() as tg:
                async with anyio.create_task_group() as starting:
                    for w in self.workers:
                        starting.start_soon(tg.start, self._keep, w)
                try:
                    yield self.workers
                finally:
                    tg.cancel_scope.cancel()  # each _keep stops its worker on the way out
        except BaseExceptionGroup as group:
            first = _start_error(group)
            if first is None:
                raise
            raise first from None

    async def _keep(self, w: Worker, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        backoff, first = BACKOFF_FIRST, True
        env = {**os.environ, SUPERVISOR_PID_ENV: str(os.getpid())}
        while True:
            proc = await anyio.open_process(self.command(w.k), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                            stderr=None, env=env, start_new_session=True)
            w.proc = proc
            try:
                info = await self._ready(proc)
                if info is None:
                    rc = await proc.wait()
                    why = f"worker {w.k} ({w.name}, pid {proc.pid}) exited with {exit_reason(rc)} before it was ready"
                    if first:
                        raise WorkerStartError(why)
                    log.warning("%s; restarting in %.0fs", why, backoff)
                else:
                    w.pid, w.ports = proc.pid, {k: int(v) for k, v in info.get("ports", {}).items()}
                    if first:
                        first = False
                        task_status.started()
                    else:
                        log.info("worker %d restarted: %s", w.k, w.describe())
                    since = time.monotonic()
                    rc = await proc.wait()
                    if time.monotonic() - since > STABLE_AFTER:
                        backoff = BACKOFF_FIRST
                    log.warning("worker %d (%s, pid %d) exited with %s; restarting in %.0fs", w.k, w.name,
                                proc.pid, exit_reason(rc), backoff)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._stop(w, proc)
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)
            w.restarts += 1

    async def _ready(self, proc: Process) -> dict[str, Any] | None:
        """The JSON line a worker prints on stdout once it serves; None if it exits first."""
        assert proc.stdout is not None
        stream = BufferedByteReceiveStream(proc.stdout)
        with anyio.move_on_after(READY_TIMEOUT):
            while True:
                try:
                    line = await stream.receive_until(b"\n", 1 << 20)
                except (anyio.EndOfStream, anyio.IncompleteRead):
                    return None
                try:
                    info = json.loads(line)
                except ValueError:
                    continue
                if isinstance(info, dict) and "ports" in info:
                    return info
        log.warning("worker (pid %d) not ready after %.0fs: stopping it", proc.pid, READY_TIMEOUT)
        proc.kill()
        return None

    async def _stop(self, w: Worker, proc: Process) -> None:
        """SIGTERM (the worker flushes and unregisters), SIGKILL after STOP_TIMEOUT."""
        if proc.returncode is None:
            proc.terminate()
            with anyio.move_on_after(STOP_TIMEOUT):
                await proc.wait()
            if proc.returncode is None:
                log.warning("worker %d (%s, pid %d) did not stop in %.0fs: SIGKILL", w.k, w.name, proc.pid,
                            STOP_TIMEOUT)
                proc.kill()
                await proc.wait()
        await proc.aclose()
