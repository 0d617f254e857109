"""The fault matrix (issue #27 item 9): every message flow through every fault, with real clients.

A cell starts its cluster (``rmq.testing.faults.start_cluster``), starts the flow's clients as child
processes (rmq.client: ``pyworker.py``; the C++ client: ``cppw.py``; the RocketMQ 5 SDK over gRPC:
``sdk5worker.py``), lets traffic flow, does the fault, heals it, waits until traffic sent after the
fault is delivered, stops the clients and judges the history (``History.judge``): every acknowledged
message delivered at least once, none before its time, none that must never be, duplicates counted
(an unexplained one before the fault fails the cell), and the flow resumed with the same clients.

``make faults`` runs every cell (mark ``faults``) and prints the matrix; ``make test`` runs the fast
slice (unmarked): normal, retry and delay through SIGKILL + restart with rmq.client.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from rmq.testing import faults as F
from rmq.testing.daemon import eventually

HERE = Path(__file__).parent
PY = HERE / "pyworker.py"
CPP = HERE / "cppw.py"
SDK5 = HERE / "sdk5worker.py"


@attrs.define
class Ctx:
    cluster: F.Cluster
    history: F.History
    tmp: Path
    topic: str
    group: str
    workers: list[F.Worker] = attrs.field(factory=list)
    extra: dict[str, Any] = attrs.field(factory=dict)

    def py(self, role: str, name: str, **cfg: Any) -> F.Worker:
        w = F.python_worker(PY, {"mode": cfg.pop("mode"), "namesrv": self.cluster.namesrv, **cfg}, self.tmp, name)
        return self._add(role, w)

    def cpp(self, role: str, name: str, **cfg: Any) -> F.Worker:
        w = F.python_worker(CPP, {"namesrv": self.cluster.namesrv, **cfg}, self.tmp, name)
        return self._add(role, w)

    def sdk5(self, role: str, name: str, **cfg: Any) -> F.Worker:
        w = F.python_worker(SDK5, {"endpoint": self.cluster.grpc_endpoints(), **cfg}, self.tmp, name,
                            python=F.sdk5_python())
        return self._add(role, w)

    def _add(self, role: str, w: F.Worker) -> F.Worker:
        self.workers.append(w)
        if role == "producer":
            self.history.producers.append(w)
        elif role == "consumer":
            self.history.consumers.append(w)
        return w


@attrs.define
class Flow:
    """A message flow: ``begin`` starts its consumers and producers; ``before_fault`` / ``after_heal``
    act around the fault; ``finish`` adds what the harness reads itself (a DLQ)."""

    name: str
    begin: Callable[[Ctx], None]
    before_fault: Callable[[Ctx], None] = lambda ctx: None
    after_heal: Callable[[Ctx], None] = lambda ctx: None
    finish: Callable[[Ctx], None] = lambda ctx: None
    invisible_s: float | None = None
    tolerance_s: float = 0.0
    settle_s: float = 30.0
    order: bool = False
    producer_stop: str = "stop"  # "kill" for clients that do not read stdin while sending
    dlq_mod: int = 0  # bodies whose index is a multiple always fail: they end in the DLQ (checked by finish)


def _consumer_started(w: F.Worker) -> None:
    w.wait(lambda: w.events("started") or w.lines and any("started" in ln for ln in w.lines), 60, "consumer started")


def push_flow(kind: str, **prod: Any) -> Callable[[Ctx], None]:
    def begin(ctx: Ctx) -> None:
        _consumer_started(ctx.py("consumer", "push", mode="push", topic=ctx.topic, group=ctx.group,
                                 orderly=kind == "ordered"))
        ctx.py("producer", "produce", mode="produce", topic=ctx.topic, group="PG_" + ctx.group, kind=kind,
               interval_ms=50, **prod)
    return begin


def retry_begin(ctx: Ctx) -> None:
    _consumer_started(ctx.py("consumer", "push", mode="push", topic=ctx.topic, group=ctx.group, fail_always_mod=7,
                             fail_once_mod=3, max_reconsume=2))
    ctx.py("producer", "produce", mode="produce", topic=ctx.topic, group="PG_" + ctx.group, interval_ms=50)


def _doomed(ctx: Ctx, mod: int) -> set[str]:
    return {s["id"] for s in ctx.history.sends() if mod and s.get("ok") and int(s["id"].rsplit("-", 1)[1]) % mod == 0}


def retry_finish(ctx: Ctx) -> None:
    """Messages that always fail end in the group's DLQ after 1 + max_reconsume deliveries."""
    doomed = _doomed(ctx, 7)

    def in_dlq() -> set[str]:
        return set(F.pull_all(ctx.cluster, f"%DLQ%{ctx.group}")) & doomed

    try:
        eventually(lambda: in_dlq() >= doomed, 40, "every always-failing message in the DLQ", 0.5)
    except AssertionError:
        pass  # judged below: the ones not there count as lost
    now = time.time()
    ctx.history.extra_deliveries.extend({"id": b, "t": now, "result": "dlq"} for b in in_dlq())
    missing = doomed - in_dlq()
    if missing:
        ctx.extra["problems"] = [f"{len(missing)} always-failing messages not in the DLQ, e.g. {sorted(missing)[:5]}"]


def request_begin(ctx: Ctx) -> None:
    _consumer_started(ctx.py("consumer", "responder", mode="push", topic=ctx.topic, group=ctx.group, reply=True))
    ctx.py("producer", "requester", mode="produce", topic=ctx.topic, group="PG_" + ctx.group, kind="request",
           interval_ms=50)


def tx_begin(tx: str) -> Callable[[Ctx], None]:
    def begin(ctx: Ctx) -> None:
        _consumer_started(ctx.py("consumer", "push", mode="push", topic=ctx.topic, group=ctx.group))
        if tx == "unknown":
            _consumer_started(ctx.py("checker", "checker", mode="checker", group="PG_" + ctx.group))
        ctx.py("producer", "tx", mode="produce", topic=ctx.topic, group="PG_" + ctx.group, kind="tx", tx=tx,
               interval_ms=50)
    return begin


def tx_producer_dies(ctx: Ctx) -> None:
    """The producer that sent the halves is SIGKILLed before the fault: only checks can end them."""
    w = ctx.history.producers[0]
    w.kill()


def tx_second_producer(ctx: Ctx) -> None:
    """Halves of its own ids (from 100000), so only a check after the fault can deliver them."""
    ctx.py("producer", "tx2", mode="produce", topic=ctx.topic, group="PG_" + ctx.group, kind="tx", tx="unknown",
           interval_ms=50, first=100_000)


def pop_begin(ctx: Ctx) -> None:
    _consumer_started(ctx.py("consumer", "simple", mode="simple", topic=ctx.topic, group=ctx.group,
                             invisible_s=10, hold_mod=4))
    ctx.py("producer", "produce", mode="produce", topic=ctx.topic, group="PG_" + ctx.group, interval_ms=50)


def cpp_begin(ctx: Ctx) -> None:
    _consumer_started(ctx.cpp("consumer", "cpp-push", mode="push", topic=ctx.topic, group=ctx.group,
                              instance="fm1"))
    ctx.cpp("producer", "cpp-produce", mode="produce", topic=ctx.topic, count=10**6, method="sync",
            interval_ms=50, stop_on_error=False, body=ctx.topic + "-{i}", group="PG_" + ctx.group)


def grpc_begin(mode: str) -> Callable[[Ctx], None]:
    def begin(ctx: Ctx) -> None:
        _consumer_started(ctx.sdk5("consumer", f"sdk5-{mode}", mode=mode, topic=ctx.topic, group=ctx.group,
                                   invisible_s=10, hold_mod=4 if mode == "simple" else 0))
        ctx.sdk5("producer", "sdk5-produce", mode="produce", topic=ctx.topic, interval_ms=50)
    return begin


FLOWS: dict[str, Flow] = {f.name: f for f in (
    Flow("normal", push_flow("normal")),
    Flow("normal_cpp", cpp_begin, producer_stop="kill"),
    Flow("ordered", push_flow("ordered"), order=True),
    Flow("delay", push_flow("delay", delay_level=3, delay_s=3.0)),
    Flow("timer", push_flow("timer", delay_s=3.0), tolerance_s=0.1),
    Flow("tx_commit", tx_begin("commit")),
    Flow("tx_rollback", tx_begin("mix")),
    Flow("tx_check", tx_begin("unknown"), before_fault=tx_producer_dies, after_heal=tx_second_producer),
    Flow("retry_dlq", retry_begin, finish=retry_finish, dlq_mod=7),
    Flow("pop", pop_begin, invisible_s=10.0),
    Flow("request_reply", request_begin),
    # a receive whose answer the SIGKILL swallowed is popped, not lost: it comes back after the proxy's
    # defaultInvisibleTimeMills (60 s, RocketMQ's) — the window must outlast it (CI caught 1 such in 43)
    Flow("grpc_push", grpc_begin("push"), settle_s=75.0),
    Flow("grpc_simple", grpc_begin("simple"), invisible_s=10.0),
)}
# the slice `make test` runs; pop under SIGKILL guards the durable POP records (invisible time kept)
FAST = {("normal", "sigkill"), ("retry_dlq", "sigkill"), ("delay", "sigkill"), ("pop", "sigkill")}


def _cells() -> list[Any]:
    out = []
    for flow in FLOWS:
        for fault in F.FAULTS:
            marks = [] if (flow, fault) in FAST else [pytest.mark.faults]
            out.append(pytest.param(flow, fault, marks=marks, id=f"{flow}-{fault}"))
    return out


def check_order(h: F.History) -> list[str]:
    """Orderly: per sharding key, first deliveries come in send order (a replay after a fault may
    repeat a prefix, which at-least-once allows)."""
    key_of = {s["id"]: s.get("key") for s in h.sends() if s.get("ok")}
    last: dict[str, int] = {}
    first: set[str] = set()
    bad = []
    for d in h.deliveries():
        mid = d["id"]
        if mid in first or mid not in key_of:
            continue
        first.add(mid)
        i = int(mid.rsplit("-", 1)[1])
        k = key_of[mid] or ""
        if i < last.get(k, -1):
            bad.append(f"{mid} after {k}'s #{last[k]}")
        last[k] = max(i, last.get(k, -1))
    return [f"{len(bad)} out of order, e.g. {bad[:3]}"] if bad else []


@pytest.mark.timeout(420)
@pytest.mark.parametrize(("flow_name", "fault_name"), _cells())
def test_cell(flow_name: str, fault_name: str, tmp_path: Path, record_property: Callable[[str, Any], None]) -> None:
    flow, fault = FLOWS[flow_name], F.FAULTS[fault_name]
    t_cell = time.time()
    phases: dict[str, float] = {}  # seconds per phase, printed with the cell: where a slow cell spends its time
    last = [t_cell]

    def phase(name: str) -> None:
        now = time.time()
        phases[name] = round(now - last[0], 1)
        last[0] = now

    cluster = F.start_cluster(fault.cluster, tmp_path)
    phase("cluster")
    ctx = Ctx(cluster, F.History(), tmp_path, f"FM_{flow_name}", f"CG_{flow_name}")
    res = F.CellResult(flow_name, fault_name)
    fault_at = healed_at = 0.0
    setup_error = ""
    try:
        F.create_topic(cluster, ctx.topic, order=flow.order)
        flow.begin(ctx)
        phase("clients")
        eventually(lambda: len([s for s in ctx.history.sends() if s.get("ok")]) >= 20, 60, "traffic before the fault")
        phase("traffic")
        flow.before_fault(ctx)
        fault_at = time.time()
        state = fault.inject(cluster)
        time.sleep(max(0.0, fault.hold - (time.time() - fault_at)))  # the fault lasts this long at least
        fault.heal(cluster, state)
        healed_at = time.time()
        phase("fault")
        flow.after_heal(ctx)

        def resumed() -> bool:
            """20 sends after the heal that were acknowledged and must be delivered: a rolled-back half
            counts as done even when its send failed, so counting those would stop the producers before
            a SYNC_MASTER whose slave has not reconnected yet acknowledged anything."""
            return sum(1 for s in ctx.history.sends() if s.get("ok") and s.get("must", "deliver") == "deliver"
                       and s.get("t0", s["t"]) >= healed_at) >= 20

        try:
            eventually(resumed, 90, "20 acknowledged sends after the fault", 0.2)
        except AssertionError:
            pass  # judged: the cell fails as not resumed
        phase("resume")
        for w in ctx.history.producers:
            w.kill() if flow.producer_stop == "kill" else w.stop()
        try:
            eventually(lambda: not ctx.history.missing() - _doomed(ctx, flow.dlq_mod), flow.settle_s, "every acknowledged message delivered", 0.2)
            if flow.invisible_s:  # held receipts come back after their invisible time
                eventually(lambda: all(d["id"] in {x["id"] for x in ctx.history.deliveries() if x.get("result") == "ok"}
                                       for d in ctx.history.deliveries() if d.get("result") == "hold"),
                           flow.invisible_s * 4 + 10, "held messages back", 0.2)
        except AssertionError:
            pass  # judged below
        phase("settle")
        flow.finish(ctx)
        phase("finish")
    except AssertionError as e:  # no traffic before the fault, a worker that did not start: a failed cell
        setup_error = str(e)[:300]
    finally:
        F.stop_workers(reversed(ctx.workers))
        phase("clients_stop")
        cluster.stop()
        phase("cluster_stop")
    (tmp_path / "history.json").write_text(json.dumps({  # the cell's evidence, kept with the daemons' logs
        "fault_at": fault_at, "healed_at": healed_at, "sends": ctx.history.sends(),
        "deliveries": ctx.history.deliveries()}, indent=0))
    if ctx.history.sends():
        res = ctx.history.judge(flow_name, fault_name, fault_at, healed_at, invisible_s=flow.invisible_s,
                                tolerance_s=flow.tolerance_s)
        if flow.order:
            res.problems += check_order(ctx.history)
        res.problems += ctx.extra.get("problems", [])
        res.passed = not res.problems
    else:
        res.problems.append("nothing was sent")
    if setup_error:
        res.problems.append(setup_error)
        res.passed = False
    res.seconds = round(time.time() - t_cell, 1)
    record_property(F.CELL_PROPERTY, attrs.asdict(res))  # to the matrix at the end, from any xdist worker
    print(F.format_matrix([res]))
    print("phases (s):", ", ".join(f"{k} {v:g}" for k, v in phases.items()))
    assert res.passed, res.problems
