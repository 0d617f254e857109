"""machine_room and machine_room_nearby: room filtering, Java split rules, nearby-first allocation."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from rmq.kernel.hookspecs.allocation import AllocateStrategy, StrategyRegistry
from rmq.kernel.model import MessageQueue
from rmq.plugins.allocators.averagely import (
    AllocateAveragelyByCircle,
    AveragelyByCirclePlugin,
    AveragelyPlugin,
)
from rmq.plugins.allocators.machine_room import (
    AllocateByMachineRoom,
    AllocateMachineRoomNearby,
    MachineRoomNearbyPlugin,
    MachineRoomPlugin,
    java_split,
    room_rule,
)
from rmq.testing.allocation import AllocateStrategyContract

MQ = MessageQueue


def room_queues(n: int) -> list[MessageQueue]:
    """Queues over rooms IDC1, IDC2 (served), IDC3 (not) and brokers without a room, sorted."""
    brokers = ["IDC1@broker-a", "IDC2@broker-b", "IDC3@broker-c", "broker-d", "IDC1@x@y"]
    return sorted(MQ("T", brokers[k % len(brokers)], k // len(brokers)) for k in range(n))


class TestMachineRoomContract(AllocateStrategyContract):
    def make_strategy(self) -> AllocateStrategy:
        return AllocateByMachineRoom(["IDC1", "IDC2"])

    def make_queues(self, n: int) -> list[MessageQueue]:
        return room_queues(n)

    def eligible(self, mq_all: Sequence[MessageQueue]) -> set[MessageQueue]:
        return {mq for mq in mq_all if mq.broker_name in ("IDC1@broker-a", "IDC2@broker-b")}


class TestMachineRoomNearbyContract(AllocateStrategyContract):
    """Rooms from the broker prefix and the client-id suffix; some rooms without consumers."""

    def make_strategy(self) -> AllocateStrategy:
        registry = StrategyRegistry()
        for plugin in (AveragelyPlugin(), MachineRoomNearbyPlugin({"consumer_room": "suffix"})):
            plugin.rmq_allocation_register_strategies(registry)
        return registry.create("machine_room_nearby")

    def make_queues(self, n: int) -> list[MessageQueue]:
        return room_queues(n)

    def make_cids(self, c: int) -> list[str]:
        return sorted(f"10.0.0.{k}@{('IDC1', 'IDC2', 'IDC9')[k % 3]}" for k in range(c))


class TestMachineRoomNearbyDefaultsContract(AllocateStrategyContract):
    """With the default rules no consumer room matches a broker room: every room is shared."""

    def make_strategy(self) -> AllocateStrategy:
        return MachineRoomNearbyPlugin().create(inner=AllocateAveragelyByCircle())

    def make_queues(self, n: int) -> list[MessageQueue]:
        return room_queues(n)


def ids(mqs: list[MessageQueue]) -> list[str]:
    return [f"{mq.broker_name}:{mq.queue_id}" for mq in mqs]


def test_machine_room_hand_derived() -> None:
    mq_all = sorted(
        [MQ("T", "IDC1@broker-a", q) for q in range(4)]
        + [MQ("T", "IDC2@broker-b", q) for q in range(4)]
        + [MQ("T", "broker-c", q) for q in range(2)]
        + [MQ("T", "IDC1@x@y", 0)]
    )
    cid_all = ["c0", "c1", "c2"]
    s = AllocateByMachineRoom(["IDC1"])
    # eligible: IDC1@broker-a 0..3 (m=4); c=3 -> q=1, r=1: c0 takes m[0] and the leftover m[3]
    assert ids(s.allocate("g", "c0", mq_all, cid_all)) == ["IDC1@broker-a:0", "IDC1@broker-a:3"]
    assert ids(s.allocate("g", "c1", mq_all, cid_all)) == ["IDC1@broker-a:1"]
    assert ids(s.allocate("g", "c2", mq_all, cid_all)) == ["IDC1@broker-a:2"]
    both = AllocateByMachineRoom(["IDC1", "IDC2"])  # m=8, c=3 -> q=2, r=2
    assert ids(both.allocate("g", "c0", mq_all, cid_all)) == [
        "IDC1@broker-a:0",
        "IDC1@broker-a:1",
        "IDC2@broker-b:2",
    ]
    assert ids(both.allocate("g", "c1", mq_all, cid_all)) == [
        "IDC1@broker-a:2",
        "IDC1@broker-a:3",
        "IDC2@broker-b:3",
    ]
    assert ids(both.allocate("g", "c2", mq_all, cid_all)) == ["IDC2@broker-b:0", "IDC2@broker-b:1"]


def test_machine_room_with_no_eligible_queue() -> None:
    s = AllocateByMachineRoom(["IDC7"])
    assert s.allocate("g", "c0", [MQ("T", "IDC1@b", 0)], ["c0"]) == []


@pytest.mark.parametrize(
    ("broker", "eligible"),
    [
        ("IDC1@broker-a", True),
        ("IDC1@broker-a@", True),  # Java's split drops trailing empty parts: 2 parts
        ("IDC1@broker-a@@", True),
        ("IDC1@", False),  # 1 part
        ("@broker-a", False),  # room "" is not served
        ("IDC1@x@y", False),  # 3 parts
        ("IDC1", False),
        ("idc1@broker-a", False),  # rooms are case-sensitive
        ("", False),
    ],
)
def test_machine_room_broker_names(broker: str, eligible: bool) -> None:
    assert AllocateByMachineRoom(["IDC1"]).in_rooms(MQ("T", broker, 0)) is eligible


def test_java_split() -> None:
    assert java_split("a@b", "@") == ["a", "b"]
    assert java_split("a@b@", "@") == ["a", "b"]
    assert java_split("@a", "@") == ["", "a"]
    assert java_split("@@", "@") == []
    assert java_split("", "@") == [""]


def test_machine_room_needs_rooms() -> None:
    with pytest.raises(ValueError, match="idc is empty"):
        AllocateByMachineRoom([])
    with pytest.raises(ValueError, match="idc is empty"):
        MachineRoomPlugin({}).create()
    assert MachineRoomPlugin({"idc": ["IDC1"]}).create().idc == {"IDC1"}  # type: ignore[attr-defined]
    s = MachineRoomPlugin({"idc": ["IDC1"]}).create(idc=["IDC2", "IDC3"])  # the caller overrides TOML
    assert s.idc == {"IDC2", "IDC3"}  # type: ignore[attr-defined]
    assert (s.name, s.rocketmq_name) == ("machine_room", "MACHINE_ROOM")  # type: ignore[attr-defined]


NEARBY_QUEUES = sorted(
    [MQ("T", "IDC1@b1", q) for q in range(4)]
    + [MQ("T", "IDC2@b2", q) for q in range(4)]
    + [MQ("T", "IDC3@b3", q) for q in range(2)]
)
NEARBY_CIDS = ["10.0.0.1@IDC1", "10.0.0.2@IDC1", "10.0.0.3@IDC2"]


def nearby(**options: object) -> AllocateStrategy:
    registry = StrategyRegistry()
    for plugin in (AveragelyPlugin(), AveragelyByCirclePlugin(), MachineRoomNearbyPlugin()):
        plugin.rmq_allocation_register_strategies(registry)
    return registry.create("machine_room_nearby", **options)


def test_nearby_hand_derived() -> None:
    s = nearby(consumer_room="suffix")
    # own room first (averagely among the room's consumers), then IDC3 (no consumer) among all three
    assert ids(s.allocate("g", NEARBY_CIDS[0], NEARBY_QUEUES, NEARBY_CIDS)) == [
        "IDC1@b1:0",
        "IDC1@b1:1",
        "IDC3@b3:0",
    ]
    assert ids(s.allocate("g", NEARBY_CIDS[1], NEARBY_QUEUES, NEARBY_CIDS)) == [
        "IDC1@b1:2",
        "IDC1@b1:3",
        "IDC3@b3:1",
    ]
    assert ids(s.allocate("g", NEARBY_CIDS[2], NEARBY_QUEUES, NEARBY_CIDS)) == [
        f"IDC2@b2:{q}" for q in range(4)
    ]


def test_nearby_with_callables_and_inner_by_name() -> None:
    s = nearby(
        inner="averagely_by_circle",
        broker_room=lambda mq: mq.broker_name[:4],
        consumer_room=lambda cid: cid[-4:],
    )
    assert s.rocketmq_name == "MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE"  # type: ignore[attr-defined]
    assert ids(s.allocate("g", NEARBY_CIDS[0], NEARBY_QUEUES, NEARBY_CIDS)) == [
        "IDC1@b1:0",
        "IDC1@b1:2",
        "IDC3@b3:0",
    ]


def test_nearby_defaults_share_every_room() -> None:
    s = nearby()  # prefix rules: consumer rooms are IPs, so no broker room has a consumer
    assert s.rocketmq_name == "MACHINE_ROOM_NEARBY-AVG"  # type: ignore[attr-defined]
    mine = s.allocate("g", NEARBY_CIDS[2], NEARBY_QUEUES, NEARBY_CIDS)
    assert ids(mine) == ["IDC1@b1:3", "IDC2@b2:3"]  # each room split 2/1/1 (IDC3: 1/1/0)


def test_room_rules() -> None:
    assert room_rule("prefix")("IDC1@broker-a") == "IDC1"
    assert room_rule("prefix")("broker-a") == "broker-a"
    assert room_rule("suffix")("10.0.0.1@4000@IDC2") == "IDC2"
    assert room_rule("suffix", "#")("10.0.0.1#IDC2") == "IDC2"
    assert room_rule(str.upper)("x") == "X"
    with pytest.raises(ValueError, match="unknown room rule"):
        room_rule("middle")


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"inner": "machine_room_nearby"}, "inner cannot be 'machine_room_nearby' itself"),
        ({"broker_room": "middle"}, "option broker_room: expected 'prefix', 'suffix'"),
        ({"consumer_room": 3}, "option consumer_room"),
        ({"separator": ""}, "option separator must not be empty"),
        ({"inner": 5}, "option inner: expected a strategy name or an AllocateStrategy"),
        ({"inner": AllocateAveragelyByCircle(), "inner_options": {"x": 1}}, "inner_options only apply"),
        ({"inner_options": {"x": 1}}, "rmq.allocation:averagely: unknown option 'x'"),
        ({"room": "x"}, "unknown option 'room'"),
    ],
)
def test_nearby_option_errors(options: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        nearby(**options)


def test_nearby_needs_the_registry_for_a_named_inner() -> None:
    with pytest.raises(ValueError, match="needs the strategy registry"):
        MachineRoomNearbyPlugin().create()
    assert isinstance(
        MachineRoomNearbyPlugin().create(inner=AllocateAveragelyByCircle()), AllocateMachineRoomNearby
    )
