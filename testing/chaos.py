"""Issue #31's chaos harness and history checker: a controller-mode cluster whose every node (name
server, 3 controllers, the brokers, the client processes) has its own loopback address, so the nemesis
(:mod:`rmq.testing.nemesis`) can cut any link, clients included; a role monitor; and :func:`check`,
which judges one run from the producers' and the consumer's histories (:class:`rmq.testing.faults.History`).

The checker's invariants, and why each is (or is not) a failure:

* acknowledged-but-lost == 0: a SEND_OK under ``allAckInSyncStateSet`` (or SYNC_MASTER) is on every
  replica the broker counted, so no failover may drop it;
* unacknowledged-but-delivered: counted only (a send that timed out may have been stored; RocketMQ
  is at-least-once and the producer cannot know);
* duplicates: counted only (at-least-once redelivers after a rebalance or a failover);
* reordering within one queue for the orderly consumer == 0: a queue's first deliveries come in the
  order the (sequential) producer stored them;
* two masters accepting writes in one epoch == 0: from the monitor (two brokers MASTER, unfenced, in
  one epoch) and from the acks (the broker that acknowledged a send changes more often than the
  epoch does: an old master still taking writes after the new one began);
* the time writes take to come back after the heal, and the longest gap between acknowledgements.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from rmq.protocol.codes import RequestCode
from rmq.protocol.message import decode_offset_msg_id
from rmq.testing import clients
from rmq.testing import faults as F
from rmq.testing.daemon import ControllerGroup, Daemons, RmqdProcess, call, eventually
from rmq.testing.nemesis import Nemesis, clock_env, node_addrs

TIMEOUT_S = F.CONTROLLER_CELL_CONF["controllerHeartBeatTimeoutMills"] / 1000
SLACK_S = 3.0  # a loaded 2-core machine: the fence loop's period, scheduling, a runtime poll
#: client addresses: the producer, the consumer, a second producer, then one for each further client
CLIENTS = 7
SECOND_FIRST = 10**6  # producer k's first id is k * SECOND_FIRST (the ids stay unique, the producer known)


@attrs.define
class Sample:
    t: float
    host: str
    role: str
    epoch: int
    fenced: bool


class Monitor:
    """Polls every broker's role, epoch and fence a few times a second (one thread per broker, so a
    paused broker does not hold the others' samples back)."""

    def __init__(self, brokers: list[RmqdProcess]) -> None:
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._poll, args=(b,), daemon=True) for b in brokers]
        for t in self._threads:
            t.start()

    def _poll(self, b: RmqdProcess) -> None:
        while not self._stop.wait(0.15):
            rt = F.runtime(b)
            if rt is not None:
                self.samples.append(Sample(time.time(), b.host, rt.get("controllerRole", rt.get("brokerRole", "?")),
                                           int(rt.get("masterEpoch", 0)), "fenced" in rt))

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)

    def dual_masters(self) -> list[tuple[Sample, Sample]]:
        """Pairs of samples, from two brokers within 0.3 s, both MASTER and unfenced in one epoch."""
        live = sorted((s for s in self.samples if s.role == "MASTER" and not s.fenced), key=lambda s: s.t)
        out = []
        for i, a in enumerate(live):
            for b in live[i + 1:]:
                if b.t - a.t > 0.3:
                    break
                if b.host != a.host and b.epoch == a.epoch:
                    out.append((a, b))
        return out

    def epochs(self) -> list[int]:
        """The master epochs seen, in order."""
        return sorted({s.epoch for s in self.samples if s.role == "MASTER"})


@attrs.define
class Chaos:
    """One chaos cluster and its clients. ``client_hosts``: the producer's, the consumer's, a second
    producer's address, then the further clients'; ``skews``: each node's clock seam file (when started
    with clocks); ``hosts``/``kinds``: each client worker's address and kind (rmq.testing.clients)."""

    tmp: Path
    daemons: Daemons
    group: ControllerGroup
    cluster: F.Cluster
    nemesis: Nemesis
    ctl_hosts: list[str]
    client_hosts: list[str]
    skews: dict[str, Path] = attrs.field(factory=dict)
    topic: str = "NemesisTopic"
    history: F.History = attrs.field(factory=F.History)
    hosts: dict[str, str] = attrs.field(factory=dict)
    kinds: dict[str, str] = attrs.field(factory=dict)
    orderly: set[str] = attrs.field(factory=set)

    def _client(self, kind: str, cfg: dict[str, Any], host: int, name: str) -> F.Worker:
        assert self.client_hosts[host] not in self.hosts.values(), f"client address {host} taken"
        w = clients.worker(kind, {"namesrv": self.cluster.namesrv, "topic": self.topic, "group": f"{name}-group",
                                  **cfg}, self.client_hosts[host], self.tmp, name)
        self.hosts[name], self.kinds[name] = self.client_hosts[host], kind
        return w

    def producer(self, name: str = "producer", interval_ms: int = 20, host: int = 0, kind: str = "py",
                 **cfg: Any) -> F.Worker:
        """A ``kind`` producer (rmq.testing.clients) of unique ids (sharding key = id mod 8, so the orderly
        consumer can judge order) from client address ``host``."""
        w = self._client(kind, {"mode": "produce", "interval_ms": interval_ms, "kind": "ordered", **cfg}, host, name)
        self.history.producers.append(w)
        return w

    def consumer(self, name: str = "consumer", orderly: bool = True, kind: str = "py", host: int = 1) -> F.Worker:
        """A push consumer of its own group logging every delivery (orderly: its queues' order is
        judged), from client address ``host`` (the second one by default)."""
        w = self._client(kind, {"mode": "push", "orderly": orderly}, host, name)
        self.history.consumers.append(w)
        if orderly:
            self.orderly.add(name)
        w.wait(lambda: w.events("started"), 90, "the consumer started")
        return w

    def workers(self) -> list[F.Worker]:
        return self.history.producers + self.history.consumers

    def acked(self) -> list[dict[str, Any]]:
        return [s for s in self.history.sends() if s.get("ok")]

    def acked_by(self, host: str) -> list[dict[str, Any]]:
        return [s for s in self.acked() if s.get("omid") and decode_offset_msg_id(s["omid"])[0] == host]

    def wait_acks(self, n: int, host: str | None = None, timeout: float = 60) -> None:
        base = len(self.acked_by(host) if host else self.acked())
        eventually(lambda: len(self.acked_by(host) if host else self.acked()) >= base + n, timeout,
                   f"{n} more acknowledged sends" + (f" on {host}" if host else ""), 0.1)

    def controller_leader(self) -> int:
        """The index of the controller that leads the Raft group now."""
        def leader() -> tuple[int] | None:  # a tuple: index 0 is a leader too
            for i, addr in enumerate(self.group.controller_addrs):
                with contextlib.suppress(Exception):
                    r = call(addr, RequestCode.CONTROLLER_GET_METADATA_INFO, timeout=2)
                    if r.code == 0 and r.ext.get("isLeader") == "true":
                        return (i,)
            return None
        return int(eventually(leader, 60, "a controller leader", 0.2)[0])

    def stop_clients(self) -> None:
        F.stop_workers(self.workers())


@contextlib.contextmanager
def chaos_cluster(tmp: Path, brokers: int = 2, clocks: bool = False) -> Iterator[Chaos]:
    """Name server, 3 controllers and ``brokers`` brokers of one group (controller mode,
    ``allAckInSyncStateSet``), settled, with the topic created; every node on its own address.
    ``clocks``: every node gets the clock seam (``Chaos.skews``). Healed, resumed and stopped at exit."""
    hosts = node_addrs(1 + 3 + brokers + CLIENTS)
    nodes = hosts[:4 + brokers]
    skews = {h: tmp / f"skew-{h}" for h in nodes} if clocks else {}
    envs = [clock_env(skews[h]) if clocks else None for h in nodes]
    with Daemons() as d, Nemesis() as n:
        g = d.controller_group(tmp, brokers, controllers=3, raft_password="nemesis-raft", hosts=nodes, envs=envs,
                               **F.CONTROLLER_CELL_CONF, **F.BROKER_BASE)
        g.settled(120)
        c = F.Cluster("controller", tmp, g.namesrv, g.brokers, g.controllers, g.controller_addrs, d)
        ch = Chaos(tmp, d, g, c, n, nodes[1:4], hosts[4 + brokers:], skews)
        F.create_topic(c, ch.topic, order=True)
        try:
            yield ch
        finally:
            n.close()  # resumed and healed before the daemons stop
            for w in ch.workers():
                w.kill()


def commitlog(b: RmqdProcess, upto: int) -> bytes:
    """The first ``upto`` bytes of ``b``'s commitlog, from its segment files."""
    out = bytearray()
    for f in sorted((b.workdir / "store" / "commitlog").iterdir()):
        if len(out) >= upto:
            break
        start = int(f.name)
        assert start == len(out), f"segment {f.name} does not follow byte {len(out)}"
        out += f.read_bytes()
    return bytes(out[:upto])


def converged(ch: Chaos, timeout: float = 60) -> int:
    """Every slave caught up with the master's confirm offset, and every commitlog byte-identical to
    the master's up to it (a slave that kept a forked suffix would differ); the confirm offset."""
    master = eventually(ch.cluster.master, timeout, "a master", 0.2)
    confirm = int((F.runtime(master) or {})["confirmOffset"])
    ref = commitlog(master, confirm)
    for b in ch.group.brokers:
        if b is master:
            continue
        eventually(lambda b=b: int((F.runtime(b) or {}).get("commitLogMaxOffset", -1)) >= confirm, timeout,
                   f"{b.host} caught up with {confirm}")
        mine = commitlog(b, confirm)
        diff = next((i for i in range(confirm) if mine[i] != ref[i]), None) if mine != ref else None
        assert diff is None, f"{b.host}'s commitlog differs from the master's from byte {diff} (confirm {confirm})"
    return confirm


# ----------------------------------------------------------------------------------------- checker
@attrs.define
class RunCheck:
    """One run's figures; ``problems`` empty when every invariant held."""

    name: str
    acked: int = 0
    failed_sends: int = 0
    delivered: int = 0
    lost: int = 0
    unacked_delivered: int = 0
    dups: int = 0
    reordered: int = 0
    dual_masters: int = 0
    ack_switches: int = 0
    epoch_changes: int = 0
    recover_s: float | None = None
    max_gap_s: float = 0.0
    seconds: float = 0.0
    figures: dict[str, Any] = attrs.field(factory=dict)
    problems: list[str] = attrs.field(factory=list)
    kind_recover_s: dict[str, float | None] = attrs.field(factory=dict)  # per client kind, when several ran

    @property
    def passed(self) -> bool:
        return not self.problems

    def line(self) -> str:
        rec = "-" if self.recover_s is None else f"{self.recover_s:.1f}"
        extra = " ".join(f"{k}={v}" for k, v in self.figures.items())
        return (f"{self.name:<28} {'PASS' if self.passed else 'FAIL'} acked={self.acked} failed={self.failed_sends}"
                f" lost={self.lost} unacked_delivered={self.unacked_delivered} dups={self.dups}"
                f" reordered={self.reordered} dual_masters={self.dual_masters}"
                f" switches={self.ack_switches}/{self.epoch_changes} recover_s={rec} max_gap_s={self.max_gap_s:.1f}"
                f" run_s={self.seconds:.0f} {extra}".rstrip() + "".join(f"\n    - {p}" for p in self.problems[:4]))


def _index(mid: str) -> int:
    return int(mid.rsplit("-", 1)[1])


def ack_switches(acked: list[dict[str, Any]]) -> tuple[int, int]:
    """(how often the acknowledging broker changed, acks by an old master begun after its successor's
    first ack). A send begun before the switch and answered after it is in flight, not a switch."""
    switches = stale = 0
    cur, prev, cur_start = "", "", 0.0
    for s in sorted(acked, key=lambda s: s["t"]):
        host = decode_offset_msg_id(s["omid"])[0] if s.get("omid") else ""
        if not host or host == cur:
            continue
        if not cur:
            cur, cur_start = host, s["t"]
            continue
        if host == prev and s["t0"] < cur_start:
            continue  # answered late by the old master, begun before the new one took writes
        if host == prev:
            stale += 1
        switches += 1
        prev, cur, cur_start = cur, host, s["t"]
    return switches, stale


def reorderings(deliveries: list[dict[str, Any]], skip: frozenset[str] | set[str] = frozenset()
                ) -> list[tuple[int, str, str]]:
    """(queue, id, the later id delivered before it) for every first delivery that came after a
    higher id of its queue and producer: the orderly consumer broke the queue's order. ``skip``: ids
    whose place in the queue is not promised (see :func:`unordered_failures`)."""
    seen: set[str] = set()
    top: dict[tuple[int, int], int] = {}  # (queue, producer) -> the highest index delivered
    out = []
    for d in deliveries:
        if d["id"] in seen or d.get("queue") is None or d["id"] in skip:
            continue
        seen.add(d["id"])
        i = _index(d["id"])
        key = (int(d["queue"]), i // SECOND_FIRST)
        if key in top and i < top[key]:
            out.append((key[0], d["id"], f"{d['id'].rsplit('-', 1)[0]}-{top[key]}"))
        top[key] = max(i, top.get(key, i))
    return out


def unordered_failures(ch: Chaos) -> set[str]:
    """Ids of failed sends by the C++ and Java clients: RocketMQ orders a queue's acknowledged sends, and
    these two close a connection whose request timed out and send on a new one, so a timed-out request
    still in the old socket's buffer under a partition reaches the broker after the heal, behind later
    sends (seen with Java 4.9.8 under client_cut_from_master: a timeout, "connect failed", then the
    timed-out id stored behind ids sent after the heal). rmq.client's failed sends stay judged (its
    requests time out on the connection it keeps, whose bytes arrive in order)."""
    return {s["id"] for w in ch.history.producers if ch.kinds.get(w.name, "py") != "py"
            for s in w.events("send") if not s.get("ok")}


def _who_missed(ch: Chaos, missing: set[str]) -> str:
    """Which consumers (and their kinds) did not deliver some of ``missing``."""
    return ", ".join(f"{w.name} ({ch.kinds.get(w.name, 'py')}): {len(missing - {d['id'] for d in w.events('recv')})}"
                     for w in ch.history.consumers)


def kind_figures(ch: Chaos, res: RunCheck, healed_at: float) -> None:
    """When more than one client kind ran, per kind: its producers' acked/failed sends, when they wrote
    again after the heal (``res.kind_recover_s``; r None: not yet) and its consumers' deliveries, as
    ``kind=acked/failed/r<s>/d<deliveries>``."""
    kinds = set(ch.kinds.values())
    if len(kinds) < 2:
        return
    for k in sorted(kinds):
        sends = [s for w in ch.history.producers if ch.kinds.get(w.name) == k for s in w.events("send")]
        dels = sum(len(w.events("recv")) for w in ch.history.consumers if ch.kinds.get(w.name) == k)
        ok = [s for s in sends if s.get("ok")]
        back = [s["t"] for s in ok if s["t0"] >= healed_at]
        if sends:
            res.kind_recover_s[k] = round(min(back) - healed_at, 2) if back else None
        rec = "" if k not in res.kind_recover_s else f"/r{res.kind_recover_s[k]}"
        res.figures[k] = f"{len(ok)}/{len(sends) - len(ok)}{rec}" + (f"/d{dels}" if dels else "")


def check(ch: Chaos, name: str, mon: Monitor | None, fault_at: float, healed_at: float,
          deliver_timeout: float = 90, started: float | None = None) -> RunCheck:
    """Judge a run after the heal (the producers stopped): waits for the consumer to deliver every
    acknowledged id (up to ``deliver_timeout``), then counts. ``fault_at``/``healed_at``: epoch s."""
    res = RunCheck(name)
    sends = ch.history.sends()
    acked = [s for s in sends if s.get("ok")]
    ids = {s["id"] for s in acked}
    res.acked, res.failed_sends = len(ids), len(sends) - len(acked)
    kinds = Counter((s.get("status") or s.get("error", "?")[:70 if os.environ.get("RMQ_CHAOS_KEEP") is None else 200]) for s in sends if not s.get("ok"))
    if kinds:
        res.figures["failures"] = ",".join(f"{k}:{n}" for k, n in kinds.most_common(3))
    if ch.history.consumers:  # each consumer has a group of its own: each must deliver every ack
        def got(w: F.Worker) -> set[str]:
            return {d["id"] for d in w.events("recv")}
        with contextlib.suppress(AssertionError):
            eventually(lambda: all(ids <= got(w) for w in ch.history.consumers), deliver_timeout,
                       "every acknowledged id delivered", 0.5)
        missing, seen, skip = set(), set(), unordered_failures(ch)
        for w in ch.history.consumers:
            dels = sorted(w.events("recv"), key=lambda d: d["t"])
            delivered = {d["id"] for d in dels}
            missing |= ids - delivered
            seen |= delivered
            res.dups += len(dels) - len(delivered)
            bad = reorderings(dels, skip) if w.name in ch.orderly else []
            res.reordered += len(bad)
            if bad:
                res.problems.append(f"{len(bad)} out of order in their queue at {w.name} "
                                    f"({ch.kinds.get(w.name, 'py')}), e.g. {bad[:3]}")
        res.delivered = len(ids - missing)
        # sends answered with a failure yet delivered; not ids sent after ``sends`` was read (the soak
        # judges under load: a long wait for deliveries would count thousands of those)
        res.unacked_delivered = len(seen & ({s["id"] for s in sends} - ids))
    else:
        missing = ids - set(F.pull_all(ch.cluster, ch.topic))
    if missing:
        stored = set(F.pull_all(ch.cluster, ch.topic))
        res.lost = len(missing - stored)
        if res.lost:
            res.problems.append(f"{res.lost} acknowledged but lost, e.g. {sorted(missing - stored)[:5]}")
        if missing & stored:
            res.problems.append(f"{len(missing & stored)} acknowledged and stored, never delivered, "
                                f"e.g. {sorted(missing & stored)[:5]} ({_who_missed(ch, missing & stored)})")
    res.ack_switches, stale = ack_switches(acked)
    if mon is not None:
        dual = mon.dual_masters()
        res.dual_masters = len(dual)
        res.epoch_changes = max(0, len(mon.epochs()) - 1)
        if dual:
            res.problems.append(f"two unfenced masters in one epoch: {dual[:2]}")
        if res.ack_switches > res.epoch_changes:
            res.problems.append(f"the acknowledging broker changed {res.ack_switches} times, the epoch "
                                f"{res.epoch_changes} times ({stale} acks by an old master after its successor's)")
    times = sorted(s["t"] for s in acked if s["t"] >= fault_at - 1)
    res.max_gap_s = round(max((b - a for a, b in zip(times, times[1:], strict=False)), default=0.0), 2)
    back = [s["t"] for s in acked if s["t0"] >= healed_at]
    res.recover_s = round(min(back) - healed_at, 2) if back else None
    if res.recover_s is None:
        res.problems.append("no write acknowledged after the heal")
    kind_figures(ch, res, healed_at)
    res.seconds = time.time() - (started if started is not None else fault_at)
    return res


def report(res: RunCheck) -> None:
    print("\nnemesis " + res.line())


def runtime_json(b: RmqdProcess, key: str, default: str = "[]") -> Any:
    return json.loads((F.runtime(b) or {}).get(key, default))


def raw_send(b: RmqdProcess, topic: str, body: str, timeout: float = 20) -> Any:
    """One SEND_MESSAGE straight to broker ``b`` (no client retries, no route): its RemotingCommand answer."""
    from rmq.protocol.common import encode_properties

    return call(b.broker_addr, RequestCode.SEND_MESSAGE, {
        "producerGroup": "probe-group", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": 0, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
        "properties": encode_properties({"UNIQ_KEY": body}), "reconsumeTimes": 0, "unitMode": "false",
        "batch": "false"}, body.encode(), timeout=timeout)


def keep_logs(ch: Chaos, tag: str) -> Path:
    """Copies every log of the run's cluster and clients (no store files) out of pytest's temporary
    directory, which later sessions' runs rotate away: a failed soak run stays explainable."""
    import shutil

    dest = Path(os.environ.get("RMQ_CHAOS_KEEP", "/tmp")) / f"rmq-chaos-failed-{tag}"
    for f in ch.tmp.rglob("*.log"):
        target = dest / f.relative_to(ch.tmp)
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            shutil.copy2(f, target)
    return dest
