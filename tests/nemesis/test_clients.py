"""Issue #31's schedules with every client kind in the history: beside the two rmq.client producers, a
C++ (librocketmq) and a Java (RocketMQ 4.9.8) producer, each on its own loopback address through the
source-address shim (rmq.testing.bindshim), so the nemesis cuts exactly their links. The checker's
invariants hold for their sends as for rmq.client's (acknowledged-but-lost 0, queue order 0, no second
master), and the C++ and Java clients must write again after the heal."""

from __future__ import annotations

import pytest

from rmq.testing import clients
from rmq.testing.chaos import Chaos, Monitor, report
from rmq.testing.java import require
from rmq.testing.schedules import run_schedule, start_load

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

REWRITE_S = 45  # librocketmq 1.2.3 polls routes every 30 s (fixed): after a failover it finds the new master then


def _run(ch: Chaos, name: str, consumer: str) -> None:
    require()
    assert clients.available("cpp"), "the C++ client (pip install rocketmq==0.4.4: the test extras)"
    mon = Monitor(ch.group.brokers)
    try:
        start_load(ch, extra=("cpp", "java"), consumers=("py", consumer))
        res = run_schedule(ch, name, mon, rewrite_s=REWRITE_S)
    finally:
        mon.stop()
    report(res)
    assert res.passed, res.line()
    assert set(res.kind_recover_s) == {"py", "cpp", "java"}, res.kind_recover_s
    assert None not in res.kind_recover_s.values(), f"a client kind did not write after the heal: {res.line()}"


@pytest.mark.parametrize(("name", "consumer"), [("client_cut_from_master", "java"),
                                              ("master_isolated_from_controllers", "cpp")])
def test_schedule_with_cpp_and_java_clients(chaos: Chaos, name: str, consumer: str) -> None:
    """Beside rmq.client's orderly consumer, one of ``consumer``'s kind (a group of its own) must deliver
    every acknowledged id in its queue's order too."""
    _run(chaos, name, consumer)
