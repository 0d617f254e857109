"""by_config: a fixed list, returned as configured, inputs ignored."""

from __future__ import annotations

import pytest

from rmq.kernel.hookspecs.allocation import AllocateStrategy
from rmq.kernel.model import MessageQueue
from rmq.plugins.allocators.by_config import AllocateByConfig, ByConfigPlugin

TOML_QUEUES = [
    {"topic": "T", "broker_name": "broker-b", "queue_id": 3},
    {"topic": "T", "broker_name": "broker-a", "queue_id": 0},
]
EXPECTED = [MessageQueue("T", "broker-b", 3), MessageQueue("T", "broker-a", 0)]


def test_returns_the_configured_queues_in_order() -> None:
    s = ByConfigPlugin({"queues": TOML_QUEUES}).create()
    assert isinstance(s, AllocateStrategy)
    assert (s.name, s.rocketmq_name) == ("by_config", "CONFIG")  # type: ignore[attr-defined]
    assert s.allocate("g", "c0", [MessageQueue("T", "x", 0)], ["c0"]) == EXPECTED
    assert s.allocate("g", "", [], []) == EXPECTED  # no checks: the inputs do not matter


def test_each_call_returns_a_fresh_list() -> None:
    s = AllocateByConfig(EXPECTED)
    first = s.allocate("g", "c", [], [])
    first.clear()
    assert s.allocate("g", "c", [], []) == EXPECTED


def test_python_callers_may_pass_message_queues() -> None:
    s = ByConfigPlugin().create(queues=[EXPECTED[0], TOML_QUEUES[1]])
    assert s.allocate("g", "c", [], []) == EXPECTED


def test_empty_by_default() -> None:
    assert ByConfigPlugin().create().allocate("g", "c", [], []) == []


@pytest.mark.parametrize(
    ("queues", "words"),
    [
        ("T:broker-a:0", "option queues: expected a list, got str"),
        (
            [{"topic": "T", "broker_name": "b"}],
            r"option queues\[0\]: a queue needs exactly topic, broker_name, queue_id",
        ),
        ([{"topic": "T", "broker_name": "b", "queue_id": 0, "x": 1}], r"unknown \['x'\]"),
        ([{"topic": "T", "broker_name": "b", "queue_id": "0"}], r"queue_id: int >= 0"),
        ([{"topic": "T", "broker_name": "b", "queue_id": -1}], r"queue_id: int >= 0"),
        ([{"topic": "T", "broker_name": "b", "queue_id": True}], r"queue_id: int >= 0"),
        (["T"], r"option queues\[0\]: expected a table"),
    ],
)
def test_bad_queue_lists(queues: object, words: str) -> None:
    with pytest.raises(ValueError, match=r"rmq\.allocation:by_config: .*" + words):
        ByConfigPlugin({"queues": queues})


def test_direct_construction_checks_items() -> None:
    with pytest.raises(ValueError, match="expected MessageQueue items"):
        AllocateByConfig([("T", "b", 0)])  # type: ignore[list-item]
