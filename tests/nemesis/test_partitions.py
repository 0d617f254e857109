"""Issue #31's first schedules: a 3-controller, master/slave cluster (controller mode,
``allAckInSyncStateSet``, SYNC replication), each node on its own loopback address, under a producer
writing unique ids; the nemesis cuts links or pauses the master, heals, and the history is checked.

Invariants (per schedule, where they apply):

* acknowledged-but-lost == 0: every SEND_OK id is in the topic after the heal;
* never two masters taking writes at once: no SEND_OK from the old master for a send that started
  after the new master's first SEND_OK, and no two brokers seen MASTER, unfenced, in one epoch;
* the old master fences itself within ``controllerHeartBeatTimeoutMills`` (+ slack for a loaded
  machine) when cut off from the controllers, and rejoins as a slave whose commitlog is byte for byte
  the master's up to the confirm offset.

The producer runs on its own address, outside every cut here: it reaches both halves, as the clients
of a real partition that leaves the client side whole (the ``chaos`` fixture: tests/nemesis/conftest.py). ``make chaos`` runs these (root and nftables needed).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from rmq.protocol.codes import ResponseCode
from rmq.testing import faults as F
from rmq.testing.chaos import SLACK_S, TIMEOUT_S, Chaos, Monitor, converged, raw_send
from rmq.testing.daemon import RmqdProcess, eventually
from rmq.testing.nemesis import tcp_unread

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

def converge_and_check(ch: Chaos, old: RmqdProcess, new: RmqdProcess) -> dict[str, Any]:
    """After the heal: ``old`` back as a slave of ``new`` with both in the SyncStateSet, the commitlogs
    byte-identical up to the confirm offset, and every acknowledged id in the topic."""
    ch.group.settled(120, master=new)
    confirm = converged(ch)
    acked = {s["id"] for s in ch.acked()}
    stored = set(F.pull_all(ch.cluster, ch.topic))
    lost = acked - stored
    assert not lost, f"{len(lost)} acknowledged but lost, e.g. {sorted(lost)[:5]}"
    return {"acked": len(acked), "stored": len(stored), "unacked_stored": len(stored - acked), "confirm": confirm}


def no_concurrent_masters(ch: Chaos, old: RmqdProcess, new: RmqdProcess, mon: Monitor) -> None:
    first_new = min(s["t"] for s in ch.acked_by(new.host))
    late_old = [s for s in ch.acked_by(old.host) if s["t0"] > first_new]
    assert not late_old, f"the old master acknowledged {len(late_old)} sends begun after the new one took writes: " \
                         f"{late_old[:3]}"
    assert not mon.dual_masters(), mon.dual_masters()[:3]


def report(name: str, figures: dict[str, Any]) -> None:
    print(f"\nnemesis {name}: " + json.dumps(figures))


def test_master_isolated_from_controllers(chaos: Chaos) -> None:
    """(a) The master loses every controller: it fences itself, the slave is elected on the majority
    side, and after the heal the old master rejoins as a slave and converges."""
    old, new = chaos.group.settled(60)
    mon = Monitor(chaos.group.brokers)
    chaos.producer()
    chaos.wait_acks(50)
    t_cut = time.time()
    chaos.nemesis.isolate(old.host, chaos.ctl_hosts)
    eventually(lambda: "fenced" in (F.runtime(old) or {}), TIMEOUT_S + SLACK_S + 5, "the old master fenced", 0.1)
    t_fenced = time.time()
    eventually(lambda: (F.runtime(new) or {}).get("controllerRole") == "MASTER", 60, "the slave elected", 0.1)
    t_elected = time.time()
    chaos.wait_acks(30, host=new.host)
    t_writes = time.time()
    chaos.nemesis.heal()
    t_heal = time.time()
    chaos.wait_acks(30, host=new.host)
    F.stop_workers(chaos.history.producers)
    figures = converge_and_check(chaos, old, new)
    mon.stop()
    no_concurrent_masters(chaos, old, new, mon)
    figures.update(fence_s=round(t_fenced - t_cut, 2), elect_s=round(t_elected - t_cut, 2),
                   writes_back_s=round(t_writes - t_cut, 2), rejoin_s=round(time.time() - t_heal, 2),
                   failed_sends=sum(1 for s in chaos.history.sends() if not s.get("ok")))
    report("master_isolated_from_controllers", figures)
    assert t_fenced - t_cut <= TIMEOUT_S + SLACK_S, figures


def test_slave_partitioned_from_master(chaos: Chaos) -> None:
    """(b) Master and slave cannot reach each other (both still reach the controllers): the
    SyncStateSet shrinks to the master, sends go on; after the heal the slave is back in it."""
    master, slave = chaos.group.settled(60)
    mon = Monitor(chaos.group.brokers)
    chaos.producer()
    chaos.wait_acks(50)
    t_cut = time.time()
    chaos.nemesis.cut(master.host, slave.host)
    eventually(lambda: json.loads((F.runtime(master) or {}).get("syncStateSet", "[]")).__len__() == 1, 60,
               "the SyncStateSet shrunk to the master", 0.1)
    t_shrunk = time.time()
    chaos.wait_acks(50, host=master.host)
    t_writes = time.time()
    chaos.nemesis.heal()
    t_heal = time.time()
    chaos.wait_acks(30, host=master.host)
    F.stop_workers(chaos.history.producers)
    figures = converge_and_check(chaos, slave, master)
    mon.stop()
    assert not mon.dual_masters(), mon.dual_masters()[:3]
    assert not chaos.acked_by(slave.host), "the slave acknowledged sends"
    figures.update(shrink_s=round(t_shrunk - t_cut, 2), writes_back_s=round(t_writes - t_cut, 2),
                   rejoin_s=round(time.time() - t_heal, 2),
                   failed_sends=sum(1 for s in chaos.history.sends() if not s.get("ok")))
    report("slave_partitioned_from_master", figures)


def test_master_paused_past_heartbeat_timeout(chaos: Chaos) -> None:
    """(c) The master stops (SIGSTOP) for longer than the heartbeat timeout, the slave is elected;
    on resume the old master must not acknowledge a write before it learns the new epoch."""
    old, new = chaos.group.settled(60)
    assert old.proc is not None
    mon = Monitor(chaos.group.brokers)
    chaos.producer()
    chaos.wait_acks(50)
    t_pause = time.time()
    chaos.nemesis.pause(old.proc.pid, "master")
    eventually(lambda: (F.runtime(new) or {}).get("controllerRole") == "MASTER", 60, "the slave elected", 0.1)
    t_elected = time.time()
    chaos.wait_acks(30, host=new.host)
    # a send addressed to the old master while it is stopped: the kernel queues it on the listener,
    # and the broker reads it first thing on resume, before any controller answer can reach it
    probe: dict[str, Any] = {}
    unread = tcp_unread(old.host, old.broker_port)
    sender = threading.Thread(target=lambda: probe.update(r=raw_send(old, chaos.topic, "probe-on-resume")))
    sender.start()
    eventually(lambda: tcp_unread(old.host, old.broker_port) > unread, 20, "the probe queued at the stopped broker")
    t_resume = time.time()
    chaos.nemesis.resume(old.proc.pid)
    sender.join(30)
    chaos.wait_acks(30, host=new.host)
    F.stop_workers(chaos.history.producers)
    figures = converge_and_check(chaos, old, new)
    mon.stop()
    r = probe.get("r")
    assert r is not None, "the probe got no answer"
    assert r.code != ResponseCode.SUCCESS, f"the old master took a write on resume: {r.code} {r.remark}"
    figures["probe_answer"] = f"{r.code} {r.remark}"[:160]
    after_resume = [s for s in chaos.acked_by(old.host) if s["t"] > t_resume]
    assert not after_resume, f"the old master acknowledged {len(after_resume)} sends after its resume: " \
                             f"{after_resume[:3]}"
    no_concurrent_masters(chaos, old, new, mon)
    figures.update(elect_s=round(t_elected - t_pause, 2), paused_s=round(t_resume - t_pause, 2),
                   failed_sends=sum(1 for s in chaos.history.sends() if not s.get("ok")))
    report("master_paused_past_heartbeat_timeout", figures)
