"""Issue #31's nemesis schedules for a :class:`rmq.testing.chaos.Chaos` cluster under load: each injects
a fault, checks what must hold while it lasts, heals, and waits for writes to come back. The fixed
tests (tests/nemesis) run each once; the soak (:func:`soak`) runs random ones back to back and
judges the whole history after each (:func:`rmq.testing.chaos.check`).

A schedule raises AssertionError when an invariant of its own fails (the old leader still elected,
the majority side not taking a change); the checker judges the history.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from rmq.plugins.broker.replicas import CALL_TIMEOUT, LEADER_GRACE
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.message import decode_offset_msg_id
from rmq.testing import faults as F
from rmq.testing.chaos import SLACK_S, Chaos, Monitor, RunCheck, check, converged, keep_logs, raw_send
from rmq.testing.daemon import CONTROLLER_BROKER_CONF, RmqdProcess, call, eventually

HOLD_S = 3.0  # how long a fault lasts once its effect is seen (writes under it)
STEP_DOWN_S = 4.0  # a controller leader without a majority's answer steps down (plugins/controller/raft.py)
JUMP_MS = 90_000  # a clock jump: past every heartbeat timeout, lease and poll period the cluster has
#: send answers of a broker that stored the message (acknowledged or not)
STORED = {ResponseCode.SUCCESS, ResponseCode.FLUSH_DISK_TIMEOUT, ResponseCode.FLUSH_SLAVE_TIMEOUT,
          ResponseCode.SLAVE_NOT_AVAILABLE}
RELAY_DELAY_S = 0.2  # the delayed link's one-way delay (and a lost chunk's resend wait)
LEASE_HOLD_S = 5.0  # a new master must take writes without a break this long from its first one
#: haMaxTimeSlaveNotCatchup, a checkSyncStateSetPeriod, a leader search and a call timeout, the slack
SHRINK_BOUND_S = (F.CONTROLLER_CELL_CONF["haMaxTimeSlaveNotCatchup"] + CONTROLLER_BROKER_CONF["checkSyncStateSetPeriod"]) / 1000 \
    + CALL_TIMEOUT + LEADER_GRACE + SLACK_S


@attrs.define
class Run:
    """What a schedule did: when the fault began and ended (epoch s) and what it measured."""

    name: str
    fault_at: float = 0.0
    healed_at: float = 0.0
    figures: dict[str, Any] = attrs.field(factory=dict)

    def since_fault(self, key: str) -> None:
        self.figures[key] = round(time.time() - self.fault_at, 2)


Schedule = Callable[[Chaos, Run], None]


def _leader_among(ch: Chaos, indices: list[int]) -> int | None:
    for i in indices:
        with contextlib.suppress(Exception):
            r = call(ch.group.controller_addrs[i], RequestCode.CONTROLLER_GET_METADATA_INFO, timeout=2)
            if r.code == 0 and r.ext.get("isLeader") == "true":
                return i
    return None


def _roles(ch: Chaos) -> tuple[RmqdProcess, list[RmqdProcess]]:
    master = eventually(ch.cluster.master, 60, "a master", 0.2)
    return master, [b for b in ch.group.brokers if b is not master]


def _new_master(ch: Chaos, old: RmqdProcess) -> RmqdProcess | None:
    """A broker other than ``old`` that says it is master (``Cluster.master`` names the first one)."""
    return next((b for b in ch.group.brokers if b is not old
                 and (F.runtime(b) or {}).get("controllerRole") == "MASTER"), None)


def _fenced_refusals(ch: Chaos, new: RmqdProcess, since: float) -> list[dict[str, Any]]:
    """Sends begun after ``since`` that ``new`` refused as fenced ("no controller leader confirmed its
    epoch"): its election grants it a lease, so only a lost controller should cause these."""
    return [s for s in ch.history.sends() if not s.get("ok") and s["t0"] > since
            and f"from {new.host}:" in s.get("error", "") and "confirmed its epoch" in s.get("error", "")]


def _new_master_holds(ch: Chaos, run: Run, old: RmqdProcess) -> RmqdProcess:
    """The newly elected master takes writes without a break from when it is seen master until
    LEASE_HOLD_S after its first acknowledged send: no send begun then refused because its lease
    lapsed (its election grants it one; only losing the controller leader may end it)."""
    new = eventually(lambda: _new_master(ch, old), 60, "a new master", 0.1)
    elected = time.time()
    first = eventually(lambda: min((s["t"] for s in ch.acked_by(new.host) if s["t"] > run.fault_at), default=None), 60,
                       f"a send acknowledged by the new master {new.host}", 0.1)
    eventually(lambda: time.time() >= first + LEASE_HOLD_S, LEASE_HOLD_S + 5, "the watch window over", 0.2)
    refused = [s for s in _fenced_refusals(ch, new, elected) if s["t0"] <= first + LEASE_HOLD_S]
    acks = sorted(s["t"] for s in ch.acked_by(new.host) if first <= s["t"] <= first + LEASE_HOLD_S)
    run.figures["new_master_fenced"] = len(refused)
    run.figures["new_master_gap_s"] = round(max((b - a for a, b in zip(acks, acks[1:], strict=False)), default=0), 2)
    assert not refused, (f"the new master {new.host} fenced itself within {LEASE_HOLD_S:.0f} s of its first write: "
                         f"{len(refused)} sends refused, e.g. {refused[:2]}")
    return new  # type: ignore[no-any-return]


def _shrinks(ch: Chaos, run: Run, master: RmqdProcess, cut_at: float, what: str) -> None:
    """The SyncStateSet loses the slave cut at ``cut_at`` by RocketMQ 5's rule: once its last catch-up
    is ``haMaxTimeSlaveNotCatchup`` old, at the master's next check (``checkSyncStateSetPeriod``), through
    the controller leader (a search for it and a call timeout when the one it knew was cut off)."""
    try:
        eventually(lambda: len(_sss(master)) == len(ch.group.brokers) - 1, 60, what, 0.2)
    except AssertionError as e:  # what the master saw, for the failure's report
        rt = F.runtime(master) or {}
        raise AssertionError(f"{e}; master {master.host}: syncStateSet {rt.get('syncStateSet')} epoch "
                             f"{rt.get('masterEpoch')} leader {rt.get('controllerLeader')} fenced {rt.get('fenced')} "
                             f"links {[(x.get('addr'), x.get('brokerId'), x.get('lagBytes')) for x in _ha_slaves(master)]}") from None
    took = round(time.time() - cut_at, 2)
    run.since_fault("sss_shrunk_s")
    run.figures["shrink_after_cut_s"] = took
    assert took <= SHRINK_BOUND_S, f"the SyncStateSet shrank {took} s after the cut (bound {SHRINK_BOUND_S} s)"


def _elected_at(ch: Chaos, epoch: int) -> float:
    """When a controller logged the election of master epoch ``epoch`` (epoch s, from its log line)."""
    for c in ch.group.controllers:
        for line in c.log_path.read_text(errors="replace").splitlines():
            if "elected broker" in line and line.rstrip().endswith(f"epoch {epoch}"):
                return _log_time(line)
    raise AssertionError(f"no controller logged the election of epoch {epoch}")


def _step_down_window(ch: Chaos, run: Run, old: RmqdProcess, new: RmqdProcess) -> list[dict[str, Any]]:
    """The old master's last stored write and first fenced refusal against the new master's election
    (figures: seconds before it, negative when after); the sends begun after the election that the
    old master still stored (its omid names it, acknowledged or not)."""
    elected = _elected_at(ch, int((F.runtime(new) or {}).get("masterEpoch", 0)))
    stored = [s for s in ch.history.sends() if s["t0"] >= run.fault_at - 1 and s.get("omid")
              and decode_offset_msg_id(s["omid"])[0] == old.host]
    fenced = _fenced_refusals(ch, old, run.fault_at - 1)
    if stored:
        run.figures["old_last_write_before_election_s"] = round(elected - max(s["t"] for s in stored), 2)
    if fenced:
        run.figures["old_fenced_before_election_s"] = round(elected - min(s["t"] for s in fenced), 2)
    late = [s for s in stored if s["t0"] > elected]
    run.figures["old_stored_after_election"] = len(late)
    lease_end = _lease_ended_at(old, run.fault_at)
    if lease_end is not None:
        run.figures["old_lease_end_before_election_s"] = round(elected - lease_end, 3)
        # by construction (plugins/broker/replicas.py lease_held, plugins/controller/service.py
        # lease_may_run): the lease ends before any election; both log times are ms-rounded
        assert lease_end <= elected + 0.002, f"the old master's lease ended {lease_end - elected:.3f} s after " \
                                             f"its successor's election"
    return late


def _lease_ended_at(b: RmqdProcess, since: float) -> float | None:
    """When ``b``'s lease ended, from its first fence line after ``since`` (its time less "ended x s ago")."""
    for line in b.log_path.read_text(errors="replace").splitlines():
        if " fenced: " not in line or "lease ended " not in line:
            continue
        at = _log_time(line)
        if at >= since:
            return at - float(line.split("lease ended ", 1)[1].split()[0])
    return None


def _log_time(line: str) -> float:
    whole, _, frac = line.split()[0].partition(".")
    return time.mktime(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + int(frac or 0) / 1000


def _ha_slaves(b: RmqdProcess) -> list[dict[str, Any]]:
    v = (F.runtime(b) or {}).get("haSlaves", "[]")
    return json.loads(v) if isinstance(v, str) else list(v)  # type: ignore[no-any-return]


def _sss(b: RmqdProcess) -> list[int]:
    return json.loads((F.runtime(b) or {}).get("syncStateSet", "[]"))  # type: ignore[no-any-return]


def _all_hosts(ch: Chaos) -> list[str]:
    return [ch.group.namesrv.host, *ch.ctl_hosts, *(b.host for b in ch.group.brokers), *ch.client_hosts]


def _heal(ch: Chaos, run: Run, acks: int = 10) -> None:
    """Heal, then wait for writes (``acks`` more) and for every broker back in the SyncStateSet."""
    ch.nemesis.heal()
    run.healed_at = time.time()
    ch.wait_acks(acks, timeout=120)
    eventually(lambda: ch.group.roles(), 120, "every broker back in the SyncStateSet", 0.5)
    run.figures["settled_s"] = round(time.time() - run.healed_at, 2)
    converged(ch)


def _stepped_down(ch: Chaos, run: Run, lone: int) -> None:
    """The controller ``lone``, cut off from the others, does not (or no longer) claim to lead: it
    steps down within twice the election timeout (2 s), so brokers stop asking it."""
    eventually(lambda: _leader_among(ch, [lone]) is None, STEP_DOWN_S + 5, "the cut-off controller stepped down", 0.2)
    run.since_fault("lone_not_leader_s")


def controller_leader_isolated(ch: Chaos, run: Run) -> None:
    """The Raft leader loses every other node: the two others elect a new leader, the brokers find it,
    writes go on (a broker needs the controllers only to change roles)."""
    old = ch.controller_leader()
    rest = [i for i in range(3) if i != old]
    run.fault_at = time.time()
    ch.nemesis.isolate(ch.ctl_hosts[old], [h for h in _all_hosts(ch) if h != ch.ctl_hosts[old]])
    eventually(lambda: _leader_among(ch, rest) is not None, 60, "a leader among the other two", 0.2)
    run.since_fault("elect_s")
    ch.wait_acks(20)
    _stepped_down(ch, run, old)
    master, slaves = _roles(ch)
    run.figures["master_kept"] = master.host
    _heal(ch, run)


def _controllers_split(ch: Chaos, run: Run, leader_alone: bool) -> None:
    """One controller cut from the other two (the brokers see all three): the majority side elects or
    keeps a leader and takes a change of the replica set (a slave cut from its master leaves the
    SyncStateSet only through it); the lone controller takes none."""
    leader = ch.controller_leader()
    lone = leader if leader_alone else (leader + 1) % 3
    majority = [i for i in range(3) if i != lone]
    run.fault_at = time.time()
    ch.nemesis.partition([ch.ctl_hosts[lone]], [ch.ctl_hosts[i] for i in majority])
    eventually(lambda: _leader_among(ch, majority) is not None, 60, "a leader on the majority side", 0.2)
    run.since_fault("majority_leader_s")
    ch.wait_acks(20)
    master, slaves = _roles(ch)
    cut_at = time.time()
    ch.nemesis.cut(master.host, slaves[0].host)  # a change only the controller leader can make
    _shrinks(ch, run, master, cut_at, "the SyncStateSet shrunk through the majority side")
    ch.wait_acks(20, host=master.host)
    _stepped_down(ch, run, lone)
    _heal(ch, run)


def controllers_split_leader_alone(ch: Chaos, run: Run) -> None:
    """Controllers 1/2 with the leader on the lone side."""
    _controllers_split(ch, run, leader_alone=True)


def controllers_split_leader_with_majority(ch: Chaos, run: Run) -> None:
    """Controllers 2/1 with the leader on the majority side."""
    _controllers_split(ch, run, leader_alone=False)


def controllers_bridged(ch: Chaos, run: Run) -> None:
    """Two controllers cannot reach each other; the third (the bridge) sees both: a quorum exists on
    either side of the bridge, so writes and a SyncStateSet change must go on."""
    leader = ch.controller_leader()
    a, b = leader, (leader + 1) % 3
    bridge = 3 - a - b
    run.fault_at = time.time()
    ch.nemesis.bridge([ch.ctl_hosts[a]], [ch.ctl_hosts[b]], ch.ctl_hosts[bridge])
    ch.wait_acks(20)
    time.sleep(HOLD_S)
    eventually(lambda: _leader_among(ch, [0, 1, 2]) is not None, 60, "a controller leader under the bridge", 0.2)
    ch.wait_acks(20)
    run.figures["leader_now"] = _leader_among(ch, [0, 1, 2])
    _heal(ch, run)


def one_way_master_to_slave(ch: Chaos, run: Run) -> None:
    """The master's packets to a slave are dropped, the slave's to the master are not (its reports
    still arrive, its data does not): the slave stops catching up and leaves the SyncStateSet; sends
    go on; after the heal it catches up and comes back."""
    master, slaves = _roles(ch)
    run.fault_at = time.time()
    ch.nemesis.cut(master.host, slaves[0].host, both=False)
    _shrinks(ch, run, master, run.fault_at, "the SyncStateSet shrunk")
    ch.wait_acks(20, host=master.host)
    _heal(ch, run)


def client_cut_from_master(ch: Chaos, run: Run) -> None:
    """Every producer but the second cannot reach the master (they still reach the name server): their
    sends fail or time out, the second producer and the consumers go on; after the heal each writes
    again. With C++ and Java producers in the load, their links are cut as well (the shim's address)."""
    p1 = ch.history.producers[1]
    cut = [w for w in ch.history.producers if w is not p1]
    master, _ = _roles(ch)
    run.fault_at = time.time()
    for w in cut:
        ch.nemesis.cut(ch.hosts[w.name], master.host)
    base1 = len([s for s in p1.events("send") if s.get("ok")])
    eventually(lambda: len([s for s in p1.events("send") if s.get("ok")]) >= base1 + 30, 60,
               "the second producer writes on", 0.2)
    for w in cut:
        w.wait(lambda w=w: any(not s.get("ok") and s["t0"] >= run.fault_at for s in w.events("send")), 60,
               "a failed send of the cut producer")
    run.since_fault("first_failure_s")
    late = [s for w in cut for s in w.events("send") if s.get("ok") and s["t0"] > run.fault_at + 0.5]
    eventually(lambda: ch.cluster.master() is master, 5, "the master unchanged")
    assert not late, f"the cut producers had {len(late)} sends acknowledged: {late[:2]}"
    ch.nemesis.heal()
    run.healed_at = time.time()
    for w in cut:
        w.wait(lambda w=w: any(s.get("ok") and s["t0"] >= run.healed_at for s in w.events("send")), 120,
               "the cut producer writes again")
        key = "" if len(cut) == 1 else f"_{ch.kinds[w.name]}"
        back = min(s["t"] for s in w.events("send") if s.get("ok") and s["t0"] >= run.healed_at)
        run.figures[f"cut_recover{key}_s"] = round(back - run.healed_at, 2)
    run.figures["cut_failed"] = sum(1 for w in cut for s in w.events("send")
                                    if not s.get("ok") and s["t0"] >= run.fault_at)


def _clock_jump(ch: Chaos, run: Run, host: str) -> None:
    """``host``'s wall clock jumps forward, then back past where it was, then returns; writes go on
    (leases and heartbeat expiry run on the monotonic clock, which a jump does not move)."""
    skew = ch.skews[host]
    run.fault_at = time.time()
    before = _epoch(ch)
    for ms in (JUMP_MS, -JUMP_MS):
        ch.nemesis.jump_clock(skew, ms)
        ch.wait_acks(20)
        time.sleep(HOLD_S / 2)
    ch.nemesis.jump_clock(skew, 0)
    run.figures["epoch_moved"] = _epoch(ch) - before
    run.healed_at = time.time()
    ch.wait_acks(10)


def _epoch(ch: Chaos) -> int:
    master, _ = _roles(ch)
    return int((F.runtime(master) or {}).get("masterEpoch", 0))


def clock_jump_master(ch: Chaos, run: Run) -> None:
    master, _ = _roles(ch)
    _clock_jump(ch, run, master.host)


def clock_jump_controller(ch: Chaos, run: Run) -> None:
    _clock_jump(ch, run, ch.ctl_hosts[ch.controller_leader()])


def master_isolated_from_controllers(ch: Chaos, run: Run) -> None:
    """The master loses every controller: it fences, a slave is elected, the old master rejoins."""
    old, _ = _roles(ch)
    run.fault_at = time.time()
    ch.nemesis.isolate(old.host, ch.ctl_hosts)
    eventually(lambda: "fenced" in (F.runtime(old) or {}), 60, "the old master fenced", 0.1)
    run.since_fault("fence_s")
    eventually(lambda: _new_master(ch, old), 60, "a new master", 0.1)
    run.since_fault("elect_s")
    new = _new_master_holds(ch, run, old)
    late = _step_down_window(ch, run, old, new)
    assert not late, f"the isolated master stored {len(late)} sends begun after its successor's election: {late[:2]}"
    _heal(ch, run)


def master_paused(ch: Chaos, run: Run) -> None:
    """The master stops (SIGSTOP) past the heartbeat timeout: a slave is elected; on resume the old
    master fences until it learns the new epoch."""
    old, _ = _roles(ch)
    assert old.proc is not None
    run.fault_at = time.time()
    ch.nemesis.pause(old.proc.pid, "master")
    eventually(lambda: _new_master(ch, old), 60, "a new master", 0.1)
    run.since_fault("elect_s")
    _new_master_holds(ch, run, old)
    ch.nemesis.resume(old.proc.pid)
    run.healed_at = time.time()
    ch.wait_acks(10, timeout=120)
    eventually(lambda: ch.group.roles(), 120, "every broker back in the SyncStateSet", 0.5)


def master_with_leader_cut_off(ch: Chaos, run: Run) -> None:
    """The master and the controller leader on one side, the other controllers and the slaves on the
    other (name server and clients see both): the majority elects a new leader, which elects a slave;
    the old master must stop writing before that, though the old leader, cut off from its followers,
    still answers it."""
    old, _ = _roles(ch)
    leader = ch.controller_leader()
    run.fault_at = time.time()
    ch.nemesis.partition([old.host, ch.ctl_hosts[leader]],
                         [*(h for i, h in enumerate(ch.ctl_hosts) if i != leader),
                          *(b.host for b in ch.group.brokers if b is not old)])
    eventually(lambda: _new_master(ch, old), 60, "a new master", 0.1)
    run.since_fault("elect_s")
    probe: dict[str, Any] = {}  # a send straight to the old master once its successor is seen elected
    prober = threading.Thread(target=lambda: probe.update(r=raw_send(old, ch.topic, "probe-after-election")),
                              daemon=True)
    prober.start()
    new = _new_master_holds(ch, run, old)
    late = _step_down_window(ch, run, old, new)
    prober.join(30)
    r = probe.get("r")
    run.figures["old_answer_after_election"] = f"{r.code} {(r.remark or '')[:40]}" if r is not None else "none"
    # the old leader, cut off from its followers, leads on until it steps down: its answers must not
    # renew the old master's lease meanwhile (plugins/controller/service.py: LEASE_READ_S)
    assert r is None or r.code not in STORED, f"the old master stored a send after its successor's election: " \
                                              f"{r.code} {r.remark}"
    assert not late, f"the old master stored {len(late)} sends begun after its successor's election: {late[:2]}"
    run.figures["old_fenced"] = "fenced" in (F.runtime(old) or {})
    _stepped_down(ch, run, leader)
    _heal(ch, run)


def slave_cut_from_master(ch: Chaos, run: Run) -> None:
    """Master and a slave cannot reach each other: the SyncStateSet shrinks, sends go on."""
    master, slaves = _roles(ch)
    run.fault_at = time.time()
    ch.nemesis.cut(master.host, slaves[0].host)
    _shrinks(ch, run, master, run.fault_at, "the SyncStateSet shrunk")
    ch.wait_acks(20, host=master.host)
    _heal(ch, run)


def replication_delayed_lossy(ch: Chaos, run: Run) -> None:
    """The master's stream to a slave goes through a relay (rmq.testing.relay) that delays it 200 ms and
    loses chunks (a resend 200 ms later holding back the rest) and, rarely, breaks the connection; the
    slave's acknowledgements go back undelayed. Sends wait for the slow slave or go on without it once
    it leaves the SyncStateSet; nothing acknowledged may be lost, and after the heal it catches up."""
    from rmq.testing.nemesis import BLOCK, node_addrs
    from rmq.testing.relay import Impair, Relay

    master, slaves = _roles(ch)
    slave = slaves[0]
    relay_host = node_addrs(BLOCK - 1)[-1]  # the block's last address: no node of the cluster has it
    lossy = Impair(delay_s=RELAY_DELAY_S, loss=0.05, rto_s=RELAY_DELAY_S, cut=0.002)
    with Relay(relay_host, f"{master.host}:{master.ha_port}", to_client=lossy, lifetime_s=300) as relay:
        run.fault_at = time.time()
        ch.nemesis.redirect(slave.host, master.host, master.ha_port, relay.addr)
        eventually(lambda: relay.stats.conns >= 1 and relay.stats.bytes_to_client > 0, 60,
                   "the slave following its master through the relay", 0.2)
        run.since_fault("relayed_s")
        # the slave's old stream was reset at its end only: the master must not keep waiting on it
        sid = int((F.runtime(slave) or {}).get("controllerBrokerId", -1))
        stale = [x for x in _ha_slaves(master) if x.get("brokerId") == sid and not x["addr"].startswith(f"{relay_host}:")]
        assert not stale, f"the master still counts the slave's dead stream: {stale}"
        sizes = []
        end = time.time() + 3 * HOLD_S
        while time.time() < end:
            sizes.append(len(_sss(master)))
            ch.wait_acks(1, host=master.host)
        run.figures["in_sync_share"] = round(sum(n > 1 for n in sizes) / max(1, len(sizes)), 2)
        ch.nemesis.heal()  # new connections go straight to the master; the relayed one ends with the relay
    st = relay.stats
    run.figures.update(relay_conns=st.conns, relay_lost=st.lost, relay_cuts=st.cuts, relayed_kib=st.bytes_to_client // 1024)
    _heal(ch, run)


SCHEDULES: dict[str, Schedule] = {f.__name__: f for f in (
    replication_delayed_lossy,
    controller_leader_isolated, controllers_split_leader_alone, controllers_split_leader_with_majority,
    controllers_bridged, one_way_master_to_slave, client_cut_from_master, clock_jump_master,
    clock_jump_controller, master_isolated_from_controllers, master_with_leader_cut_off, master_paused, slave_cut_from_master)}


def start_load(ch: Chaos, producers: int = 2, interval_ms: int = 20, extra: Sequence[str] = (),
               consumers: Sequence[str] = ("py",)) -> None:
    """An orderly consumer of each kind in ``consumers``, each in a group of its own (the first on the
    second client address), ``producers`` rmq.client producers (the second on the third address) and
    one producer of each kind in ``extra`` (C++, Java: rmq.testing.clients) on the addresses after;
    producer k's ids from k * SECOND_FIRST. Returns once every producer had a send acknowledged and 30 were."""
    from rmq.testing.chaos import SECOND_FIRST

    for j, kind in enumerate(consumers):
        ch.consumer("consumer" if j == 0 else f"consumer{j}-{kind}", kind=kind,
                    host=1 if j == 0 else 2 + len(extra) + j)
    for k in range(producers):
        ch.producer(f"producer{k}", interval_ms, host=2 * k, first=k * SECOND_FIRST)
    for j, kind in enumerate(extra):
        k = producers + j
        ch.producer(f"producer{k}-{kind}", interval_ms, host=3 + j, kind=kind, first=k * SECOND_FIRST)
    for w in ch.history.producers:
        w.wait(lambda w=w: any(s.get("ok") for s in w.events("send")), 120, "a first acknowledged send")
    ch.wait_acks(30)


def pick_clients(seed: int | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The soak's client kinds beside rmq.client's two producers and orderly consumer, drawn from the
    seed among the kinds this machine has (rmq.testing.clients.available): (extra producers, consumers)."""
    from rmq.testing import clients

    rnd = random.Random(f"clients-{seed}")
    avail = [k for k in ("cpp", "java") if clients.available(k)]
    extra = tuple(k for k in avail if rnd.random() < 0.7)
    more = rnd.choice([None, *avail])
    return extra, ("py",) if more is None else ("py", more)


def run_schedule(ch: Chaos, name: str, mon: Monitor, stop_load: bool = True, rewrite_s: float = 0) -> RunCheck:
    """Run one schedule against the loaded cluster and judge the history (every invariant, over every
    run so far). ``stop_load``: stop the producers before the check (a fixed test); the soak keeps them.
    ``rewrite_s``: first wait up to this long for every producer to write again after the heal (a C++
    producer learns a new master only at its next route poll, every 30 s in librocketmq 1.2.3)."""
    t0 = time.time()
    run = Run(name)
    SCHEDULES[name](ch, run)
    for w in ch.history.producers if rewrite_s else []:
        with contextlib.suppress(AssertionError):  # the checker reports who did not (kind_recover_s)
            w.wait(lambda w=w: any(s.get("ok") and s["t0"] >= run.healed_at for s in w.events("send")),
                   rewrite_s, "a write after the heal")
    if stop_load:
        F.stop_workers(ch.history.producers)
    res = check(ch, name, mon, run.fault_at, run.healed_at, started=t0)
    res.figures.update(run.figures)
    return res


def soak(ch: Chaos, seconds: float, seed: int | None = None, names: list[str] | None = None,
         out: Callable[[str], None] = print) -> list[RunCheck]:
    """Random schedules back to back for ``seconds`` (the last one finishes), one line each, then a
    summary line; the load runs throughout."""
    rnd = random.Random(seed)
    names = names or sorted(SCHEDULES)
    mon = Monitor(ch.group.brokers)
    results: list[RunCheck] = []
    end = time.time() + seconds
    try:
        while time.time() < end or not results:
            name = rnd.choice(names)
            try:
                res = run_schedule(ch, name, mon, stop_load=False)
            except AssertionError as e:
                res = RunCheck(name, problems=[f"schedule failed: {str(e)[:300]}"])
                reset(ch)
            results.append(res)
            out(f"soak run {len(results):>3}: {res.line()}")
            if not res.passed:
                out(f"soak run {len(results):>3}: the nodes' logs are kept in {keep_logs(ch, f'{seed}-{len(results)}')}")
                break
    finally:
        mon.stop()
    out(summary(results, seed))
    return results


def reset(ch: Chaos) -> None:
    """Undo whatever a failed schedule left: cuts healed, processes resumed, clocks back."""
    ch.nemesis.heal()
    ch.nemesis.resume()
    for f in ch.skews.values():
        ch.nemesis.jump_clock(f, 0)


def summary(results: list[RunCheck], seed: int | None) -> str:
    judged = [r for r in results if r.acked]  # a run whose schedule failed was not judged
    last = judged[-1] if judged else RunCheck("none")
    per: dict[str, int] = {}
    for r in results:
        per[r.name] = per.get(r.name, 0) + 1
    recs = [r.recover_s for r in results if r.recover_s is not None]
    return (f"soak summary: {sum(r.passed for r in results)}/{len(results)} runs passed (seed {seed}); "
            f"acked {last.acked}, lost {last.lost}, unacked delivered {last.unacked_delivered}, "
            f"duplicates {last.dups}, reordered {last.reordered}, dual masters {last.dual_masters}, "
            f"master changes {last.epoch_changes}; recovery after heal max {max(recs, default=0):.1f} s, "
            f"longest write gap {max((r.max_gap_s for r in results), default=0):.1f} s; runs: "
            + ", ".join(f"{k}×{v}" for k, v in sorted(per.items())))
