"""TransactionMQProducer against rmqd and the Java 4.9.8 broker: half messages committed, rolled back, or
left unknown and resolved by the broker's check-back - also after the producer process was restarted."""

from __future__ import annotations

from typing import Any

import pytest

from .judge import Judge, rotate_queues

pytestmark = pytest.mark.java

# how often the broker has checked a half message before this answer: its checks run on its own timer
# (transactionCheckInterval) from transactionTimeOut on, so the count at any one moment is timing
CHECK_TIMES = ("TRANSACTION_CHECK_TIMES",)


def checked_without_half_offset(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A checked message's queueOffset is its place in RMQ_SYS_TRANS_HALF_TOPIC, where every check puts
    a copy: how many checks came before (while the producer was down, too) is timing."""
    out = rotate_queues(lines)
    for line in out:
        if line["kind"] == "checked":
            line["message"].pop("queueOffset")
    return out


def test_commit_rollback_and_check(judge: Judge, names: str) -> None:
    """COMMIT and ROLLBACK from the local transaction; UNKNOW resolved by a check-back answered COMMIT."""
    seen = judge.same("tx-send", topic=names, group=f"PG_{names}", outcomes="commit,rollback,unknown,commit",
                      check="commit", checks=1, expect=3, normalise=checked_without_half_offset, drop=CHECK_TIMES)
    stored = sorted(x["message"]["body"] for x in seen if x["kind"] == "stored")
    assert stored == ["body-0-x", "body-2-x", "body-3-x"]


def test_check_back_after_producer_restart(judge: Judge, names: str) -> None:
    """The producer dies with two transactions unknown; started again in its group, it answers the
    broker's check-backs: one COMMIT (the message appears), and the rollback stays invisible."""
    common = {"topic": names, "group": f"PG_{names}"}
    seen = judge.same_steps([
        ("tx-send", {**common, "outcomes": "unknown,rollback,commit,unknown", "crash": True}),
        ("tx-check", {**common, "check": "commit", "checks": 2, "expect": 3}),
    ], normalise=checked_without_half_offset, drop=CHECK_TIMES)
    stored = sorted(x["message"]["body"] for x in seen if x["kind"] == "stored" and x["step"] == "tx-check")
    assert stored == ["body-0-x", "body-2-x", "body-3-x"]
