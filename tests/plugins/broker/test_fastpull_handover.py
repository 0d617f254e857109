"""The plan a per-read pull leaves to the Python path (fastpull's ``Handed``) serves only the frame it was
decided from: the same opaque and the same fields (the subVersion where the plan read it); a plan that failed
raises its exception there (the Python path's error answer). The slot it waits in is taken by the next pull
and cleared by the next read. The end-to-end comparison is test_fastpull_diff.py's (real rmqd processes)."""

from __future__ import annotations

from typing import Any

import pytest

from rmq.kernel import GetResult, GetStatus
from rmq.plugins.broker.fastpull import FastReads, Handed, take
from rmq.plugins.broker.pull import Plan, _planned
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand

FIELDS = {"consumerGroup": "g", "topic": "T", "queueId": "1", "queueOffset": "7", "maxMsgNums": "32",
          "sysFlag": "6", "subVersion": "5"}


def _cmd(opaque: int = 9, **changes: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {**FIELDS, **changes}, opaque=opaque)


def _fields(cmd: RemotingCommand) -> tuple[Any, ...]:
    """What PullProcessor.process parses, in ``Handed.fields``' order."""
    e = cmd.ext
    return (e["consumerGroup"], e["topic"], int(e["queueId"]), int(e["queueOffset"]), int(e["maxMsgNums"]),
            int(e["sysFlag"]), e.get("expressionType") or None, e.get("subscription") or None)


def _handed(plan: Any, opaque: int = 9, sys_flag: int = 6, sub_version: int = 5) -> Handed:
    return Handed(opaque, "g", "T", 1, 7, 32, sys_flag, None, None, sub_version, plan)


PLAN = Plan(GetResult(GetStatus.OFFSET_OVERFLOW_ONE, 7, 0, 7), b"", 0, -1, ResponseCode.PULL_NOT_FOUND, 7, None, None)


def test_the_frame_it_was_decided_from_gets_the_plan() -> None:
    cmd = _cmd()
    assert _planned(_handed(PLAN), cmd, _fields(cmd)) is PLAN


@pytest.mark.parametrize("changes", [{"opaque": 10}, {"queueOffset": "8"}, {"queueId": "2"}, {"topic": "U"},
                                     {"consumerGroup": "h"}, {"maxMsgNums": "1"}, {"sysFlag": "7"},
                                     {"subscription": "TagA"}, {"expressionType": "SQL92"}])
def test_another_frame_plans_afresh(changes: dict[str, Any]) -> None:
    opaque = changes.pop("opaque", 9)
    cmd = _cmd(opaque, **changes)
    assert _planned(_handed(PLAN), cmd, _fields(cmd)) is None


def test_the_subversion_counts_where_the_plan_read_it() -> None:
    cmd = _cmd(sysFlag="2")  # no SUBSCRIPTION flag: the plan compared the heartbeat's subVersion with it
    assert _planned(_handed(PLAN, sys_flag=2, sub_version=4), cmd, _fields(cmd)) is None
    assert _planned(_handed(PLAN, sys_flag=2), cmd, _fields(cmd)) is PLAN
    cmd = _cmd()  # SUBSCRIPTION: not read
    assert _planned(_handed(PLAN, sub_version=4), cmd, _fields(cmd)) is PLAN


def test_a_failed_plan_raises_its_exception_for_its_frame_only() -> None:
    failure = RuntimeError("the store broke")
    cmd = _cmd()
    with pytest.raises(RuntimeError, match="the store broke"):
        _planned(_handed(failure), cmd, _fields(cmd))
    other = _cmd(10)
    assert _planned(_handed(failure), other, _fields(other)) is None


class _Conn:
    """A connection's one attribute the slot lives on (the transport's ``fast_send``)."""

    def __init__(self, reads: Any) -> None:
        self.fast_send = reads


def test_the_slot_is_taken_once_and_cleared_by_the_next_read() -> None:
    reads = FastReads()
    conn = _Conn(reads)
    reads.handed = h = _handed(PLAN)
    assert take(conn) is h  # type: ignore[arg-type]
    assert take(conn) is None and reads.handed is None  # type: ignore[arg-type]
    reads.handed = _handed(PLAN)
    assert reads(b"", 1 << 20) == (0, None, None)  # a read (no half given: nothing served)
    assert reads.handed is None
    assert take(_Conn(False)) is None and take(_Conn(None)) is None  # type: ignore[arg-type]
