"""Message trace (enableMsgTrace) against rmqd and the Java 4.9.8 broker: the trace records a traced
producer and consumer leave in RMQ_SYS_TRACE_TOPIC read back by ``mqadmin queryMsgTraceById`` alike."""

from __future__ import annotations

import re

import pytest

from rmq.testing import java
from rmq.testing.daemon import eventually

from .judge import Judge, Side, assert_same

pytestmark = pytest.mark.java


def trace_rows(text: str) -> list[list[str]]:
    """queryMsgTraceById's rows without the send/consume time and cost (wall clock and timing)."""
    rows = []
    for line in text.splitlines():
        cols = re.split(r"\s{2,}", line.strip())
        if len(cols) == 6:
            rows.append([cols[0], cols[1], cols[2], cols[5]])
    return rows


def traced_rows(judge: Judge, side: Side, msg_id: str) -> list[list[str]]:
    """The trace rows of ``msg_id`` once both the producer's and the consumer's record are in (each
    client's dispatcher sends its batch on its own schedule, the last one at shutdown)."""
    def rows() -> list[list[str]] | None:
        p = java.mqadmin("queryMsgTraceById", "-n", side.namesrv_addr, "-i", msg_id, scratch=side.scratch,
                         home=judge.home)
        found = trace_rows(p.stdout)
        return found if p.returncode == 0 and {r[0] for r in found} >= {"Pub", "Sub"} else None

    return eventually(rows, 90, f"trace of {msg_id} on {side.name}", interval=1)  # type: ignore[no-any-return]


def test_trace_by_msg_id(judge: Judge, names: str) -> None:
    outs = judge.run("trace", topic=names)
    views = [[{"kind": "row", "cols": r} for r in traced_rows(judge, o.side, o.of("send")[0]["result"]["msgId"])]
             for o in outs]
    assert_same(views, [o.side.name for o in outs])
    assert [r["cols"][0] for r in views[0]] == ["Pub", "Sub"]
