"""DefaultLitePullConsumer (subscribe and assign; seek, commit) and DefaultMQPullConsumer against rmqd and
the Java 4.9.8 broker: what each poll/pull returns, the offsets the broker answers and those committed."""

from __future__ import annotations

import pytest

from .judge import Judge

pytestmark = pytest.mark.java


def test_lite_subscribe_and_commit(judge: Judge, names: str) -> None:
    """subscribe, poll, commitSync; the group started again resumes at the committed offsets."""
    seen = judge.same("lite-subscribe", topic=names, group=f"G_{names}", n=8)
    assert len([x for x in seen if x["kind"] == "polled-again"]) == 2


def test_lite_assign_and_seek(judge: Judge, names: str) -> None:
    """assign all queues, then seek / seekToEnd / seekToBegin / offsetForTimestamp; an offset past the
    end is refused with the same exception."""
    seen = judge.same("lite-assign", topic=names, group=f"G_{names}", n=8, expect=5)
    assert len([x for x in seen if x["kind"] == "polled"]) == 5


def test_pull_consumer(judge: Judge, names: str) -> None:
    """min/max/search offsets, pulls (all, one, tag, SQL92, at and past the end), a blocking pull woken by
    a send, and a consume offset stored and read back."""
    seen = judge.same("pull", topic=names, group=f"G_{names}", n=8)
    statuses = [x["result"]["status"] for x in seen if x["kind"] == "pull"]
    assert statuses == ["FOUND", "FOUND", "FOUND", "FOUND", "NO_NEW_MSG", "OFFSET_ILLEGAL", "FOUND"]
