"""Start real ``rmqd`` processes for tests: free loopback ports, a temp store, clean stop.

Used by rmq's own suites and usable by plugin authors' integration tests.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import anyio

from rmq.protocol.tomledit import toml_value

if TYPE_CHECKING:
    from rmq.protocol.command import RemotingCommand

# Ports come from blocks below Linux's ephemeral range (32768-60999), so no outgoing connection's local
# port can take one between free_port() and the daemon's bind. Each process (a pytest run, an xdist
# worker) owns a block through an flock on a file in the temp dir: xdist workers and other test runs on
# the same machine never hand out the same port. A block's ports are handed out in turn, groups of four
# (port-2 .. port+1: RocketMQ's VIP and HA neighbours), and are reused only after the whole block went round.
PORT_LOW, PORT_HIGH, PORT_BLOCK = 12000, 32768, 256


def lock_dir() -> Path:
    """Where test runs on this machine keep their lock files (port blocks, RocketMQ's default ports)."""
    d = Path(tempfile.gettempdir()) / "rmq-test-locks"
    d.mkdir(exist_ok=True)
    return d


class _Block:
    """The port block this process hands out from (its lock file held open), and the next group to hand out."""

    def __init__(self) -> None:
        self.pid = 0
        self.start = 0
        self.next = 0
        self.locks: list[IO[bytes]] = []  # every block this process took; a former one may still have daemons

    def claim(self, after: int | None) -> None:
        """Own the first free block, trying from this xdist worker's own (or the one after ``after``).
        A forked child starts afresh: its inherited descriptors keep the parent's blocks locked."""
        count = (PORT_HIGH - PORT_LOW) // PORT_BLOCK
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
        first = after + 1 if after is not None else (int(worker) if worker.isdigit() else 0)
        for i in range(count):
            n = (first + i) % count
            f = open(lock_dir() / f"ports-{n}.lock", "wb")  # noqa: SIM115 - held for the process's life
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                continue
            self.pid, self.start, self.next = os.getpid(), PORT_LOW + n * PORT_BLOCK, 0
            self.locks.append(f)
            return
        raise RuntimeError(f"all {count} test port blocks are taken (lock files in {lock_dir()})")


_block = _Block()


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(run: int = 1) -> int:
    """A port free on 127.0.0.1 now whose neighbours (port-2, port+1: RocketMQ's VIP and HA ports) are too,
    from this process's own block (see above): daemons are often configured together and started later,
    so "free now" alone would let one's gRPC port be another's HA port, or another worker's daemon's.
    ``run`` > 1: ``run`` such groups in a row (port, port+4, ...), the ports of ``[broker] workers = run``."""
    if _block.pid != os.getpid():
        _block.claim(None)
    groups = PORT_BLOCK // 4
    if not 1 <= run <= groups:
        raise ValueError(f"run: 1..{groups} groups of ports")
    for _ in range(2):
        for _ in range(groups):
            if _block.next % groups + run > groups:  # a run does not wrap round the block's end
                _block.next += groups - _block.next % groups
            port = _block.start + 4 * (_block.next % groups) + 2
            _block.next += run
            if all(_bindable(p) for p in range(port - 2, port + 4 * run - 2)):
                return port
        _block.claim((_block.start - PORT_LOW) // PORT_BLOCK)  # all held by others: the next free block
    raise RuntimeError("no free port found")


def write_toml(path: Path, doc: dict[str, Any]) -> Path:
    """A tiny TOML writer for test configs (tables of scalars/lists, nested plugin tables)."""
    lines: list[str] = []

    def table(prefix: str, d: dict[str, Any]) -> None:
        scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
        subs = {k: v for k, v in d.items() if isinstance(v, dict)}
        if scalars or not subs:
            lines.append(f"[{prefix}]")
            lines.extend(f"{k} = {toml_value(v)}" for k, v in scalars.items())
        for k, v in subs.items():
            table(f"{prefix}.{k}", v)

    for section, body in doc.items():
        table(section, body)
    path.write_text("\n".join(lines) + "\n")
    return path


class LoopbackBroker:
    """Where a test reaches a broker it started on loopback, 127.0.0.1 unless ``host`` names another
    loopback address (rmqd here, Apache RocketMQ's in rmq.testing.java)."""

    namesrv_port: int | None
    broker_port: int
    host: str = "127.0.0.1"

    @property
    def namesrv_addr(self) -> str:
        if self.namesrv_port is None:
            raise RuntimeError("this broker's process runs no namesrv")
        return f"{self.host}:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"{self.host}:{self.broker_port}"

    @property
    def ha_port(self) -> int:
        """RocketMQ's default HA port: the listen port + 1."""
        return self.broker_port + 1


class RmqdProcess(LoopbackBroker):
    """One ``rmqd`` child process. ``start()`` returns once it logged ready (or raises with its log).

    ``workers`` > 1: ``[broker] workers``, the broker and gRPC ports reserved for every worker
    (:meth:`worker_port`, :meth:`worker_addr`; :meth:`worker_pids` finds the worker processes). ``kill()``
    kills the supervisor only: its workers then stop as on SIGTERM (their parent-death signal)."""

    def __init__(
        self,
        workdir: Path,
        *,
        namesrv: bool = True,
        broker: bool = True,
        broker_conf: dict[str, Any] | None = None,
        namesrv_conf: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        namesrv_port: int | None = None,
        broker_port: int | None = None,
        env: dict[str, str] | None = None,
        proxy: bool = True,
        workers: int = 1,
        host: str = "127.0.0.1",
    ) -> None:
        """``host``: the loopback address every role of the process listens on and connects from (the
        nemesis gives each node its own: rmq.testing.nemesis)."""
        if not host.startswith("127."):
            raise ValueError(f"host {host!r}: test daemons live on 127.0.0.0/8")
        self.host = host
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workers = workers  # [broker] workers: worker K's ports are the configured ones + 4K
        self.namesrv_port = namesrv_port or (free_port() if namesrv else None)
        self.broker_port = broker_port or (free_port(workers) if broker else None)
        # RocketMQ 5 clients: the broker's gRPC endpoint, opened only with a [proxy] table (proxy=False: none)
        self.grpc_port = free_port(workers) if broker and proxy else 0
        doc: dict[str, Any] = {}
        if namesrv:
            doc["namesrv"] = {"listenPort": self.namesrv_port, "listenHost": host,
                              "kvConfigPath": str(self.workdir / "kvConfig.json"), **(namesrv_conf or {})}
        if broker:
            b = {
                "listenPort": self.broker_port,
                "listenHost": host,
                "brokerIP1": host,
                "storePathRootDir": str(self.workdir / "store"),
                "mappedFileSizeCommitLog": 64 * 1024 * 1024,
                # a shared CI disk past 90 % must not fail every send of the suite; the guard itself
                # is tested with a usage probe
                "diskSpaceWarningLevelRatio": 0.98,
                # nor a busy shared machine, whose scheduler stalls a daemon for a few hundred ms: past
                # 200 ms RocketMQ's flow control answers SYSTEM_BUSY, and a client that does not retry
                # (the C++ producer) loses the send; flow control is tested with its own settings
                "waitTimeMillsInSendQueue": 1000,
            }
            if namesrv and "namesrvAddr" not in (broker_conf or {}):
                b["namesrvAddr"] = f"{host}:{self.namesrv_port}"
            if workers != 1:
                b["workers"] = workers
            b.update(broker_conf or {})
            doc["broker"] = b
            if proxy:
                doc["proxy"] = {"grpcServerPort": self.grpc_port}
        doc.update(extra or {})
        self.config_path = write_toml(self.workdir / "rmqd.toml", doc)
        self.log_path = self.workdir / "rmqd.log"
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self._lines: list[str] = []
        self._ready = threading.Event()
        self._registered = threading.Event()
        # one process serving both roles is "ready" for clients once its broker's first registration with
        # its own name server ended: a loaded host can time the start-up round out, and a client asking
        # then (the C++ producer does not retry a route) would see "no route info"
        self._await_registration = (namesrv and broker and "namesrvAddr" not in (broker_conf or {})
                                    and (extra or {}).get("log", {}).get("level", "INFO") in ("INFO", "DEBUG"))

    @property
    def grpc_endpoint(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    def worker_port(self, k: int) -> int:
        """Worker ``k``'s listenPort (``[broker] workers``: listenPort + 4K; rmq.roles.workers)."""
        return self.broker_port + 4 * k

    def worker_addr(self, k: int) -> str:
        return f"{self.host}:{self.worker_port(k)}"

    def worker_pids(self) -> dict[int, int]:
        """Each worker's pid, from the supervisor's child processes (/proc): {K: pid}."""
        assert self.proc is not None
        out = {}
        for child in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split():
            try:
                argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--worker" in argv:
                out[int(argv[argv.index(b"--worker") + 1])] = int(child)
        return out

    def command(self, extra_args: Iterable[str] = ()) -> list[str]:
        return [sys.executable, "-m", "rmq.kernel.daemon", "--config", str(self.config_path), *extra_args]

    def start(self, timeout: float = 30.0, extra_args: Iterable[str] = ()) -> RmqdProcess:
        self._ready.clear()
        self._registered.clear()
        logf = open(self.log_path, "ab")  # noqa: SIM115 - owned by the reader thread
        self.proc = subprocess.Popen(
            self.command(extra_args), stderr=subprocess.PIPE, stdout=logf, cwd=self.workdir, env=self.env
        )

        def pump(stream: Any) -> None:
            for raw in stream:
                logf.write(raw)
                logf.flush()
                line = raw.decode("utf-8", "replace").rstrip()
                self._lines.append(line)
                if " ready: " in line:
                    self._ready.set()
                elif ("registered to namesrv" in line and "unregistered" not in line) or (
                        "register to namesrv" in line and " failed: " in line):
                    self._registered.set()  # the first round ended (a refusal, e.g. TLS client auth, is an answer)
            logf.close()

        self._pump = threading.Thread(target=pump, args=(self.proc.stderr,), daemon=True)
        self._pump.start()
        deadline = time.monotonic() + timeout
        while not (self._ready.wait(0.05) and (self._registered.is_set() or not self._await_registration)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                self._pump.join(5)  # every line it wrote before exiting is in the log and the error
                raise RuntimeError(f"rmqd did not start (exit {self.proc.returncode}):\n" + self.log_tail())
        return self

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self._lines[-n:])

    def log_lines(self) -> list[str]:
        return list(self._lines)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        """SIGTERM (clean shutdown) and wait; SIGKILL if it does not exit in time."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    def kill(self) -> None:
        """SIGKILL: a crash, for recovery tests."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def __enter__(self) -> RmqdProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Daemons(list[RmqdProcess]):
    """The daemons one test or bench starts, in order: ``with Daemons() as procs`` stops them all, last
    first, however the block ends (a daemon it stopped or killed itself included); then removes the
    ``scratch`` folder when one is given (benches' stores of GiB-sized segments)."""

    def __init__(self, scratch: Path | None = None) -> None:
        super().__init__()
        self.scratch = scratch

    def start(self, proc: RmqdProcess) -> RmqdProcess:
        self.append(proc)
        return proc.start()

    def start_all(self, *procs: RmqdProcess) -> list[RmqdProcess]:
        """Start ``procs`` side by side (a daemon's Python start-up is most of a cluster's set-up);
        only for daemons that need nothing of each other to start."""
        self.extend(procs)
        with ThreadPoolExecutor(len(procs)) as pool:
            return list(pool.map(lambda p: p.start(), procs))

    def __enter__(self) -> Daemons:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            for proc in reversed(self):
                proc.stop()
        finally:
            if self.scratch is not None:
                shutil.rmtree(self.scratch, ignore_errors=True)

    def controller_group(self, workdir: Path, brokers: int, *, controllers: int = 1, raft_password: str | None = None,
                         broker_extra: dict[str, Any] | None = None, hosts: Sequence[str] | None = None,
                         envs: Sequence[dict[str, str] | None] | None = None, **broker_conf: Any) -> ControllerGroup:
        """A name server, ``controllers`` controllers (one Raft group) and ``brokers`` brokers of broker-a in
        controller mode (:data:`CONTROLLER_BROKER_CONF`, then ``broker_conf``; ``broker_extra``: more tables
        of the brokers' rmqd.toml, e.g. plugin options), each in a folder of ``workdir``. Returns once all
        have started (the name server and the controllers together); :meth:`ControllerGroup.settled`
        waits for the roles. ``hosts``: each node's loopback address, in the order name server,
        controllers, brokers (default: all on 127.0.0.1); ``envs``: each node's extra environment, in the
        same order (the nemesis's clock seam)."""
        hosts = list(hosts) if hosts is not None else ["127.0.0.1"] * (1 + controllers + brokers)
        envs = list(envs) if envs is not None else [None] * len(hosts)
        if len(hosts) != 1 + controllers + brokers or len(envs) != len(hosts):
            raise ValueError(f"hosts, envs: {1 + controllers + brokers} each (name server, controllers, brokers)")
        ns = RmqdProcess(workdir / "ns", broker=False, host=hosts[0], env=envs[0])
        ports = [free_port() for _ in range(controllers)]
        addrs = [f"{hosts[1 + i]}:{p}" for i, p in enumerate(ports)]
        peers = ";".join(f"n{i}-{a}" for i, a in enumerate(addrs))
        secret = {"raftPassword": raft_password} if raft_password else {}
        ctls = [RmqdProcess(workdir / f"c{i}", namesrv=False, broker=False, host=hosts[1 + i], env=envs[1 + i],
                            extra={"controller": {
            "controllerDLegerPeers": peers, "controllerDLegerSelfId": f"n{i}", "listenHost": hosts[1 + i],
            "scanNotActiveBrokerInterval": 1000, "controllerStorePath": str(workdir / f"c{i}" / "ctl"), **secret}})
            for i in range(controllers)]
        self.start_all(ns, *ctls)
        conf = {**CONTROLLER_BROKER_CONF, "namesrvAddr": ns.namesrv_addr, "controllerAddr": ";".join(addrs),
                **broker_conf}
        # one after the other: started together, two brokers take the same next broker id from the controller
        members = [self.start(RmqdProcess(workdir / f"b{i}", namesrv=False, broker_conf=conf, extra=broker_extra,
                                          host=hosts[1 + controllers + i], env=envs[1 + controllers + i]))
                   for i in range(brokers)]
        return ControllerGroup(ns, ctls, members, addrs)


# controller-mode brokers for tests: 1 MiB segments, and heartbeats, metadata sync and SyncStateSet checks
# often enough that a role change settles within seconds
CONTROLLER_BROKER_CONF: dict[str, Any] = {
    "enableControllerMode": True, "mappedFileSizeCommitLog": 1024 * 1024, "brokerHeartbeatInterval": 500,
    "syncBrokerMetadataPeriod": 1000, "checkSyncStateSetPeriod": 1000}


class ControllerGroup(NamedTuple):
    """The processes of :meth:`Daemons.controller_group`: the smallest set-up in which a broker is promoted
    and demoted (failover, ``electMaster``). The brokers start as RocketMQ's do in controller mode (fenced,
    then the controller names the master), so none is a master "at start": wait for :meth:`settled`."""

    namesrv: RmqdProcess
    controllers: list[RmqdProcess]
    brokers: list[RmqdProcess]
    controller_addrs: list[str]

    def roles(self) -> tuple[RmqdProcess, ...] | None:
        """(master, *slaves) once one broker is master, the others slaves, and all of them in its sync
        state set; None before (for ``eventually``)."""
        roles = [runtime_info(b.broker_addr)["controllerRole"] for b in self.brokers]
        if roles.count("MASTER") != 1 or roles.count("SLAVE") != len(roles) - 1:
            return None
        master = self.brokers[roles.index("MASTER")]
        if len(json.loads(runtime_info(master.broker_addr)["syncStateSet"])) != len(roles):
            return None
        return master, *(b for b in self.brokers if b is not master)

    def settled(self, timeout: float = 60, master: RmqdProcess | None = None) -> tuple[RmqdProcess, ...]:
        """Wait for :meth:`roles` (with ``master`` the master, when given)."""
        what = "a master with every broker in its sync state set" + (f" ({master.broker_addr})" if master else "")
        return eventually(lambda: (r := self.roles()) and (master is None or r[0] is master) and r,  # type: ignore[no-any-return]
                          timeout, what, interval=0.2)

    def elect(self, broker: RmqdProcess, timeout: float = 60) -> tuple[RmqdProcess, ...]:
        """electMaster ``broker`` (through the name server's admin client, as an operator would) and wait
        until it serves as master; returns (it, *the others). The others may still be rejoining as slaves:
        :meth:`settled` waits for that (seconds that a test with a deadline of its own may not have)."""
        from rmq.client import Admin

        target = int(runtime_info(broker.broker_addr)["controllerBrokerId"])

        async def elect() -> dict[str, str]:
            async with Admin(self.namesrv.namesrv_addr) as admin:
                return await admin.elect_master(self.controller_addrs[0], "DefaultCluster", "broker-a", target)

        answer = anyio.run(elect)
        assert answer["masterBrokerId"] == str(target), answer
        eventually(lambda: runtime_info(broker.broker_addr)["controllerRole"] == "MASTER", timeout,
                   f"{broker.broker_addr} serving as master")
        return broker, *(b for b in self.brokers if b is not broker)


def eventually(pred: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    """``pred()``'s first truthy value within ``timeout`` seconds (an exception counts as not yet);
    AssertionError naming ``what`` otherwise. For tests that wait on other processes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = pred()
        except Exception:
            v = None
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached in {timeout:g}s")
        time.sleep(interval)


def call(addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes = b"",
         timeout: float = 10.0) -> RemotingCommand:
    """One remoting request to a daemon from synchronous test code, on a connection of its own.
    ``ext`` values may be ints or bools (each sent as its ``str``); the response is returned
    whatever its code."""
    from rmq.protocol.command import RemotingCommand

    cmd = RemotingCommand.request(code, {k: str(v) for k, v in (ext or {}).items()}, body)
    return anyio.run(_invoke, addr, cmd, timeout)


async def _invoke(addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
    from rmq.kernel.hookspecs.remoting import RemotingConfig
    from rmq.plugins.remoting_tcp import TcpRemotingClient

    async with TcpRemotingClient(RemotingConfig(name="test")) as client:
        return await client.invoke(addr, cmd, timeout)


def runtime_info(addr: str) -> dict[str, str]:
    """A broker's runtime figures (GET_BROKER_RUNTIME_INFO's table); AssertionError if it refuses."""
    from rmq.protocol.codes import RequestCode

    r = call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    assert r.code == 0, r.remark
    return json.loads(r.body)["table"]  # type: ignore[no-any-return]
