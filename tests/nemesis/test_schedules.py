"""Issue #31's remaining schedules against a 3-controller, 2-broker cluster (controller mode,
``allAckInSyncStateSet``) under two producers and an orderly consumer, each node and client on its
own loopback address: the controller leader isolated, the controllers split 1/2 (leader alone) and
2/1 (leader with the majority), the controllers bridged, a one-way cut master -> slave, a producer cut
from the master only, and clock jumps on the master and on the controller leader.

Each run is judged by rmq.testing.chaos.check (acknowledged-but-lost, queue order, two masters in one
epoch: 0; unacknowledged-but-delivered and duplicates counted; writes back after the heal) plus the
schedule's own invariants (rmq.testing.schedules). ``make chaos`` runs these."""

from __future__ import annotations

import pytest

from rmq.testing.chaos import Chaos, Monitor, report
from rmq.testing.schedules import run_schedule, start_load

pytestmark = [pytest.mark.chaos, pytest.mark.integration]


def _run(ch: Chaos, name: str) -> None:
    mon = Monitor(ch.group.brokers)
    try:
        start_load(ch)
        res = run_schedule(ch, name, mon)
    finally:
        mon.stop()
    report(res)
    assert res.passed, res.line()


@pytest.mark.parametrize("name", ["controller_leader_isolated", "controllers_split_leader_alone",
                                  "controllers_split_leader_with_majority", "controllers_bridged",
                                  "one_way_master_to_slave", "client_cut_from_master",
                                  "master_with_leader_cut_off", "replication_delayed_lossy",
                                  "master_isolated_from_controllers"])
def test_schedule(chaos: Chaos, name: str) -> None:
    _run(chaos, name)


@pytest.mark.parametrize("name", ["clock_jump_master", "clock_jump_controller"])
def test_clock_jump(chaos_clocks: Chaos, name: str) -> None:
    """The wall clock of one node jumps forward and back: no second master, nothing acknowledged lost
    (the figures show whether the master epoch moved: it must not, leases run on the monotonic clock)."""
    _run(chaos_clocks, name)


@pytest.mark.parametrize("name", ["master_with_leader_cut_off"])
def test_schedule_three_brokers(chaos3: Chaos, name: str) -> None:
    """With two slaves, the one not elected switches masters while still connected to the old one
    (stalled by the partition): it must drop that stream before it cuts its log to the new master's, or
    the old master's backlog arrives at the heal and forks it from the new master for good."""
    _run(chaos3, name)
