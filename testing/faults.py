"""The fault matrix's library: clusters of real ``rmqd`` processes, the faults done to them, client
workers in child processes, and a history per flow that judges RocketMQ's delivery contract.

Why child processes for every client: a client must survive the fault without being restarted, and a
C++ or gRPC client that hangs must be killable without taking pytest with it. Every worker prints one
JSON object per line; the history keeps every send attempt with its answer and every delivery with
its time, and ``History.judge`` checks: every acknowledged message delivered at least once, none
before its time, none that must never be delivered, duplicates only where at-least-once allows them
(after the fault, or after the listener failed), and delivery resumed after the fault (its recovery
time).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs

from rmq.protocol.codes import RequestCode
from rmq.testing.daemon import Daemons, RmqdProcess, call, eventually

# Delay levels shortened (RocketMQ's are 1s 5s 10s 30s 1m ...) so retries and DLQ fit in a cell;
# the level semantics (store time + the level's delay, retry level = 3 + reconsume times) are unchanged.
DELAY_LEVELS = "1s 2s 3s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"
BROKER_BASE: dict[str, Any] = {
    "mappedFileSizeCommitLog": 1024 * 1024,
    "registerNameServerPeriod": 2000,
    "messageDelayLevel": DELAY_LEVELS,
    "transactionCheckInterval": 2000,  # RocketMQ: 60 s; a check after the producer died within a cell
    "transactionTimeOut": 2000,
    "timerPrecisionMs": 100,
}


# ----------------------------------------------------------------------------------------- workers
class Worker:
    """One client child process; its JSON lines are collected (with the time they were read)."""

    def __init__(self, argv: list[str], log_path: Path, name: str, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.lines: list[dict[str, Any]] = []
        self.log_path = log_path
        self._err = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                     text=True, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                obj = json.loads(line)
            except ValueError:
                obj = {"raw": line}
            obj.setdefault("t", time.time())
            self.lines.append(obj)

    def events(self, ev: str) -> list[dict[str, Any]]:
        return [ln for ln in list(self.lines) if ln.get("ev") == ev]

    def wait(self, pred: Callable[[], Any], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                if pred():
                    return
                raise AssertionError(f"{self.name}: {what}: not reached in {timeout:g}s (exit {self.proc.poll()});"
                                     f" last lines {self.lines[-3:]}; stderr: {self.stderr_tail()}")
            time.sleep(0.05)

    def ask_stop(self) -> None:
        """Write "stop" to its stdin: the worker finishes what it does and exits."""
        if self.proc.poll() is None and self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except (BrokenPipeError, OSError, ValueError):
                pass

    def stop(self, timeout: float = 20.0) -> None:
        """Ask the worker to finish ("stop" on stdin); kill it when it does not exit in time."""
        if self.proc.poll() is None:
            self.ask_stop()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reader.join(5)
        self._err.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def stderr_tail(self, n: int = 800) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def stop_workers(workers: Iterable[Worker], timeout: float = 10.0) -> None:
    """Ask every worker to stop, then wait for each: they wind down together, not one after another."""
    ws = list(workers)
    for w in ws:
        w.ask_stop()
    for w in ws:
        w.stop(timeout)


# ----------------------------------------------------------------------------------------- clusters
@attrs.define
class Cluster:
    """Processes of one cell. ``brokers`` are the broker processes (one name, broker-a); the name
    server runs alone so a broker fault never takes the routes away."""

    kind: str
    workdir: Path
    ns: RmqdProcess
    brokers: list[RmqdProcess]
    controllers: list[RmqdProcess] = attrs.field(factory=list)
    controller_addrs: list[str] = attrs.field(factory=list)
    all: list[RmqdProcess] = attrs.field(factory=list)

    @property
    def namesrv(self) -> str:
        return self.ns.namesrv_addr

    def alive(self, p: RmqdProcess) -> bool:
        return p.proc is not None and p.proc.poll() is None

    def master(self) -> RmqdProcess | None:
        """The broker that takes writes now (controller mode: the elected one)."""
        for b in self.brokers:
            if not self.alive(b):
                continue
            t = runtime(b)
            if t is None:
                continue
            if self.kind == "controller":
                if t.get("controllerRole") == "MASTER":
                    return b
            elif t.get("brokerRole", "ASYNC_MASTER") != "SLAVE":
                return b
        return None

    def grpc_endpoints(self) -> str:
        return ";".join(b.grpc_endpoint for b in self.brokers)

    def stop(self) -> None:
        """Every process asked to stop at once (SIGTERM), then each waited for (SIGKILL after 10 s)."""
        live = [p.proc for p in self.all if p.proc is not None and p.proc.poll() is None]
        for proc in live:
            proc.terminate()
        deadline = time.monotonic() + 10
        for proc in live:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def runtime(p: RmqdProcess) -> dict[str, str] | None:
    """A broker's runtime figures, or None while it does not answer (a broker down has no role now)."""
    try:
        r = call(p.broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO, timeout=2)
    except Exception:  # noqa: BLE001 - a broker that does not answer has no role now
        return None
    return json.loads(r.body)["table"] if r.code == 0 else None  # type: ignore[no-any-return]


# a cell's controller-mode brokers (on top of Daemons.controller_group's): every replica acks a SYNC
# write, and a dead broker or a lagging slave is noticed within seconds
CONTROLLER_CELL_CONF: dict[str, Any] = {
    "allAckInSyncStateSet": True, "controllerHeartBeatTimeoutMills": 3000, "haMaxTimeSlaveNotCatchup": 5000}


def start_cluster(kind: str, workdir: Path, broker_extra: dict[str, Any] | None = None) -> Cluster:
    """``single`` (one broker), ``classic`` (SYNC_MASTER + SLAVE), ``controller`` (1 controller, or 3
    for ``controller3``, + 2 brokers in controller mode: :meth:`Daemons.controller_group`); returns
    once writes and replication work. ``broker_extra``: more broker settings.

    The name server and the controllers start together (a daemon's Python start-up is most of a cell's
    set-up), then the brokers one after the other: a classic slave learns its master's address from
    its registration, and two controller-mode brokers started together race for one broker id (the
    loser waits a 5 s retry period). If the set-up fails, every daemon it started is stopped."""
    procs = Daemons()
    with contextlib.ExitStack() as cleanup:
        cleanup.enter_context(procs)
        conf = {**BROKER_BASE, **(broker_extra or {})}
        if kind in ("controller", "controller3"):
            group = procs.controller_group(workdir, 2, controllers=3 if kind == "controller3" else 1,
                                           raft_password="fault-matrix-raft", **CONTROLLER_CELL_CONF, **conf)
            c = Cluster("controller", workdir, group.namesrv, group.brokers, group.controllers, group.controller_addrs,
                        procs)
            group.settled(60)
        elif kind in ("single", "classic"):
            ns = procs.start(RmqdProcess(workdir / "ns", broker=False))
            conf["namesrvAddr"] = ns.namesrv_addr
            if kind == "single":
                brokers = [procs.start(RmqdProcess(workdir / "b0", namesrv=False, broker_conf=conf))]
            else:  # the slave after its master: it learns the master from its first registration
                brokers = [procs.start(RmqdProcess(workdir / "b0", namesrv=False,
                                                   broker_conf={**conf, "brokerRole": "SYNC_MASTER"})),
                           procs.start(RmqdProcess(workdir / "b1", namesrv=False,
                                                   broker_conf={**conf, "brokerRole": "SLAVE", "brokerId": 1}))]
                eventually(lambda: int((runtime(brokers[0]) or {}).get("haConnectionCount", 0)) >= 1, 30,
                           "slave connected")
            c = Cluster(kind, workdir, ns, brokers, all=procs)
        else:
            raise ValueError(kind)
        cleanup.pop_all()  # set up: the cell stops them (Cluster.stop)
        return c


def create_topic(c: Cluster, topic: str, queues: int = 4, order: bool = False) -> None:
    """On the master (a slave gets it from there), then wait for its route at the name server."""
    m = eventually(c.master, 30, "a master")
    r = call(m.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": str(order).lower()}, timeout=5)
    assert r.code == 0, r.remark
    eventually(lambda: call(c.namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, timeout=5).code == 0, 10,
               f"route of {topic}")


def pull_all(c: Cluster, topic: str) -> list[str]:
    """Every body of ``topic`` on the current master (or any live broker), from offset 0."""
    b = c.master() or next((b for b in c.brokers if c.alive(b)), None)
    return [] if b is None else [m.body.decode() for m in pull_messages(b, topic)]


def pull_messages(b: RmqdProcess, topic: str, queues: int = 4) -> list[Any]:
    """Every message of ``topic`` on broker ``b`` (decoded: born host, store host, ...), from offset 0."""
    from rmq.protocol.message import decode_message

    out = []
    for q in range(queues):
        offset = 0
        while True:
            r = call(b.broker_addr, RequestCode.PULL_MESSAGE, {
                "consumerGroup": "fault-matrix-audit", "topic": topic, "queueId": q, "queueOffset": offset,
                "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
                "subVersion": 0, "expressionType": "TAG"}, timeout=5)
            if r.code != 0 or not r.body:
                break
            pos = 0
            while pos < len(r.body):
                size = int.from_bytes(r.body[pos:pos + 4], "big")
                out.append(decode_message(r.body[pos:pos + size]))
                pos += size
            offset = int(r.ext["nextBeginOffset"])
    return out


# ----------------------------------------------------------------------------------------- faults
@attrs.define
class Fault:
    """A fault: the cluster it needs, what it does (``inject``), and how the cluster heals (``heal``).
    The fault lasts at least ``hold`` seconds from the moment it is injected, with the clients running
    (an ``inject`` that waits, for a promotion say, counts towards it)."""

    name: str
    cluster: str
    inject: Callable[[Cluster], Any]
    heal: Callable[[Cluster, Any], None]
    hold: float = 3.0


def _kill_restart(which: Callable[[Cluster], RmqdProcess], graceful: bool = False) -> tuple[Any, Any]:
    def inject(c: Cluster) -> RmqdProcess:
        p = which(c)
        if graceful:
            p.stop()
        else:
            p.kill()
        return p

    def heal(c: Cluster, p: RmqdProcess) -> None:
        p.start()

    return inject, heal


def _master(c: Cluster) -> RmqdProcess:
    return eventually(c.master, 30, "a master")  # type: ignore[no-any-return]


def _slave(c: Cluster) -> RmqdProcess:
    m = _master(c)
    return next(b for b in c.brokers if b is not m)


def _controller_leader(c: Cluster) -> RmqdProcess:
    def leader() -> RmqdProcess | None:
        for p, addr in zip(c.controllers, c.controller_addrs, strict=True):
            if c.alive(p):
                r = call(addr, RequestCode.CONTROLLER_GET_METADATA_INFO, timeout=2)
                if r.code == 0 and r.ext.get("isLeader") == "true":
                    return p
        return None

    return eventually(leader, 30, "a controller leader", 0.2)  # type: ignore[no-any-return]


def _failover_inject(c: Cluster) -> RmqdProcess:
    old = _master(c)
    old.kill()
    eventually(lambda: (m := c.master()) is not None and m is not old, 30, "a slave promoted", 0.2)
    return old


FAULTS: dict[str, Fault] = {}
for _name, _cluster, (_inj, _heal) in (
    ("sigkill", "single", _kill_restart(lambda c: c.brokers[0])),
    ("graceful", "single", _kill_restart(lambda c: c.brokers[0], graceful=True)),
    ("master_death", "classic", _kill_restart(_master)),
    ("slave_death", "classic", _kill_restart(_slave)),
    ("controller_leader_loss", "controller3", _kill_restart(_controller_leader)),
):
    FAULTS[_name] = Fault(_name, _cluster, _inj, _heal)
FAULTS["controller_failover"] = Fault("controller_failover", "controller", _failover_inject,
                                      lambda c, p: p.start())


# ----------------------------------------------------------------------------------------- history
@attrs.define
class CellResult:
    """One cell's figures, as the matrix prints them."""

    flow: str
    fault: str
    passed: bool = False
    acked: int = 0
    delivered: int = 0
    lost: int = 0
    early: int = 0
    forbidden: int = 0
    dups: int = 0
    bad_dups: int = 0
    recovery_s: float | None = None
    seconds: float = 0.0
    problems: list[str] = attrs.field(factory=list)


CELL_PROPERTY = "fault_cell"  # the report property carrying a cell's CellResult (as a dict)
RESULTS: list[CellResult] = []  # the cells' reports collected by the matrix's conftest, printed at the end


class History:
    """Every send attempt with its answer and every delivery with its time, for one flow.

    A send line: ``{"ev": "send", "id", "t0" (before), "t" (answered), "ok", "not_before" (epoch s,
    optional), "must": "deliver" | "never" | "any"}``. A delivery line: ``{"ev": "recv", "id", "t",
    "result": "ok" | "fail" | "hold", "topic"}``."""

    def __init__(self) -> None:
        self.producers: list[Worker] = []
        self.consumers: list[Worker] = []
        self.extra_deliveries: list[dict[str, Any]] = []  # e.g. read from a DLQ by the harness

    def sends(self) -> list[dict[str, Any]]:
        return [ln for w in self.producers for ln in w.events("send")]

    def deliveries(self) -> list[dict[str, Any]]:
        return sorted([ln for w in self.consumers for ln in w.events("recv")] + self.extra_deliveries,
                      key=lambda d: d["t"])

    def must_deliver(self) -> set[str]:
        return {s["id"] for s in self.sends() if s.get("ok") and s.get("must", "deliver") == "deliver"}

    def never(self) -> set[str]:
        return {s["id"] for s in self.sends() if s.get("must") == "never"}

    def missing(self) -> set[str]:
        got = {d["id"] for d in self.deliveries() if d.get("result", "ok") in ("ok", "dlq")}
        return self.must_deliver() - got

    def judge(self, flow: str, fault: str, fault_at: float, healed_at: float, *,
              invisible_s: float | None = None, tolerance_s: float = 0.0) -> CellResult:
        res = CellResult(flow, fault)
        sends = self.sends()
        dels = self.deliveries()
        must = self.must_deliver()
        res.acked = len(must)
        never = self.never()
        not_before = {s["id"]: s["not_before"] for s in sends if s.get("not_before")}
        seen: dict[str, list[dict[str, Any]]] = {}
        for d in dels:
            seen.setdefault(d["id"], []).append(d)
        done = {mid for mid, ds in seen.items() if any(d.get("result", "ok") in ("ok", "dlq") for d in ds)}
        res.delivered = len(done & must)
        res.lost = len(must - done)
        res.forbidden = len(set(seen) & never)
        for mid, ds in seen.items():
            nb = not_before.get(mid)
            if nb is not None and ds[0]["t"] < nb - tolerance_s:
                res.early += 1
            for prev, d in zip(ds, ds[1:], strict=False):
                if prev.get("result") == "hold" and invisible_s is not None and d["t"] < prev["t"] + invisible_s - 0.5:
                    res.early += 1  # a received, unacked message back before its invisible time
                if prev.get("result") in ("fail", "hold") or d.get("result") == "dlq":
                    continue  # a redelivery the client asked for
                res.dups += 1
                if d["t"] < fault_at:
                    res.bad_dups += 1  # a duplicate before any fault: not at-least-once's doing
        back = [d["t"] for d in dels if d["t"] >= healed_at]
        if back:
            res.recovery_s = round(min(back) - fault_at, 2)
        sent_after = {s["id"] for s in sends if s.get("ok") and s.get("t0", s["t"]) >= healed_at}
        resumed = bool(sent_after & done) or bool(sent_after and not (sent_after & must))
        if res.lost:
            res.problems.append(f"{res.lost} acknowledged never delivered, e.g. {sorted(must - done)[:5]}")
        if res.early:
            res.problems.append(f"{res.early} delivered before their time")
        if res.forbidden:
            res.problems.append(f"{res.forbidden} delivered that must never be, e.g. {sorted(set(seen) & never)[:5]}")
        if res.bad_dups:
            res.problems.append(f"{res.bad_dups} duplicates before the fault")
        if res.recovery_s is None or not resumed:
            res.problems.append("the flow did not resume after the fault (nothing sent after it was delivered)")
        res.passed = not res.problems
        return res


def python_worker(script: Path, cfg: dict[str, Any], log_dir: Path, name: str,
                  python: str = sys.executable, env: dict[str, str] | None = None) -> Worker:
    """A worker running ``script`` with ``cfg`` (JSON) under ``python`` (in ``env``, default ours)."""
    return Worker([python, str(script), json.dumps(cfg)], log_dir / f"{name}.log", name, env)


SDK5_PYTHON = os.environ.get("RMQ_SDK5_PYTHON", str(Path(__file__).resolve().parents[1] / ".venv5/bin/python"))


def sdk5_python() -> str:
    """The RocketMQ 5 Python SDK's interpreter: this tree's .venv5, else the main checkout's."""
    for cand in (SDK5_PYTHON, "/work/main/.venv5/bin/python"):
        if Path(cand).exists():
            return cand
    raise RuntimeError("no .venv5 with rocketmq-python-client (make install-test builds it)")


def format_matrix(results: Iterable[CellResult]) -> str:
    rows = list(results)
    head = (f"{'flow':<16}{'fault':<24}{'':<6}{'acked':>7}{'deliv':>7}{'lost':>6}{'early':>6}{'never':>6}"
            f"{'dups':>6}{'recov s':>9}{'cell s':>8}")
    out = [head, "-" * len(head)]
    for r in rows:
        rec = "-" if r.recovery_s is None else f"{r.recovery_s:.1f}"
        out.append(f"{r.flow:<16}{r.fault:<24}{'PASS' if r.passed else 'FAIL':<6}{r.acked:>7}{r.delivered:>7}"
                   f"{r.lost:>6}{r.early:>6}{r.forbidden:>6}{r.dups:>6}{rec:>9}{r.seconds:>8.1f}")
        for p in r.problems[:3]:
            out.append(f"{'':<22}- {p}")
    n_ok = sum(r.passed for r in rows)
    out.append(f"{n_ok}/{len(rows)} cells passed")
    return "\n".join(out)
