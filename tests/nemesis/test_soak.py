"""The soak (issue #31): random schedules from rmq.testing.schedules, back to back, against a
3-controller, 3-broker cluster (every node with the clock seam) under two producers and an orderly
consumer, plus C++ and Java producers and a second orderly consumer of either kind picked from the seed
(rmq.testing.schedules.pick_clients); after each heal the whole history so far is judged. One line per
run, then a summary.

``make chaos SECONDS=N`` runs only this, for N seconds (RMQ_CHAOS_SECONDS); ``make chaos`` runs it for
SHORT_S after the fixed schedules. RMQ_CHAOS_SEED fixes the schedule order (default: time-based,
printed in the summary)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rmq.testing.chaos import chaos_cluster
from rmq.testing.schedules import pick_clients, soak, start_load

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

SHORT_S = 75  # the tier's short soak: with the cluster's start, well under 2 minutes


def test_soak(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seconds = float(os.environ.get("RMQ_CHAOS_SECONDS") or SHORT_S)
    seed = int(os.environ.get("RMQ_CHAOS_SEED") or time.time())
    lines: list[str] = []

    def out(line: str) -> None:
        lines.append(line)
        with capsys.disabled():
            print(line, flush=True)

    extra, consumers = pick_clients(seed)  # C++ and Java clients beside rmq.client's, at random
    out(f"soak clients: producers py,py{''.join(',' + k for k in extra)}; consumers {','.join(consumers)}")
    with chaos_cluster(tmp_path, brokers=3, clocks=True) as ch:
        start_load(ch, extra=extra, consumers=consumers)
        results = soak(ch, seconds, seed, out=out)
    failed = [r for r in results if not r.passed]
    assert not failed, "\n".join(lines)
