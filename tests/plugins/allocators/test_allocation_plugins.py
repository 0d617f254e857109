"""The six strategy plugins behind the registry hook; options; partition properties; determinism."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.kernel.hookspecs.allocation import AllocateStrategy, StrategyRegistry
from rmq.kernel.markers import hookimpl
from rmq.kernel.model import MessageQueue
from rmq.plugins.allocators import (
    AllocateAveragely,
    AveragelyByCirclePlugin,
    AveragelyPlugin,
    ByConfigPlugin,
    ConsistentHashPlugin,
    MachineRoomNearbyPlugin,
    MachineRoomPlugin,
)
from rmq.testing.allocation import registry_via_hook as via_hook

PLUGINS = {
    "averagely": AveragelyPlugin,
    "averagely_by_circle": AveragelyByCirclePlugin,
    "consistent_hash": ConsistentHashPlugin,
    "machine_room": MachineRoomPlugin,
    "machine_room_nearby": MachineRoomNearbyPlugin,
    "by_config": ByConfigPlugin,
}


def registry_via_hook(options: dict[str, dict[str, Any]] | None = None, *extra: object) -> StrategyRegistry:
    return via_hook(PLUGINS, options, *extra)


def test_every_name_is_registered() -> None:
    registry = registry_via_hook()
    assert registry.names() == sorted(PLUGINS)
    for name in ("averagely", "averagely_by_circle", "consistent_hash", "machine_room_nearby", "by_config"):
        strategy = registry.create(name)
        assert isinstance(strategy, AllocateStrategy) and strategy.name == name
    assert registry.create("machine_room", idc=["IDC1"]).name == "machine_room"


def test_toml_options_are_defaults_the_caller_overrides() -> None:
    registry = registry_via_hook({"consistent_hash": {"virtual_nodes": 4}, "machine_room": {"idc": ["IDC1"]}})
    assert registry.create("consistent_hash").virtual_nodes == 4  # type: ignore[attr-defined]
    assert registry.create("consistent_hash", virtual_nodes=20).virtual_nodes == 20  # type: ignore[attr-defined]
    assert registry.create("machine_room").idc == {"IDC1"}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "options", "words"),
    [
        ("averagely", {"x": 1}, "rmq.allocation:averagely: unknown option 'x'; known options: none"),
        (
            "consistent_hash",
            {"virtual_node": 3},
            "unknown option 'virtual_node' (did you mean 'virtual_nodes'?)",
        ),
        ("consistent_hash", {"virtual_nodes": "10"}, "option virtual_nodes: expected int, got str '10'"),
        ("consistent_hash", {"virtual_nodes": 0}, "option virtual_nodes must be >= 1, got 0"),
        ("machine_room", {"idc": "IDC1"}, "option idc: expected a list, got str 'IDC1'"),
        ("machine_room", {"idc": [1]}, "option idc[0]: expected str, got int 1"),
        ("machine_room_nearby", {"broker_room": "middle"}, "option broker_room"),
        ("by_config", {"queues": [{}]}, "option queues[0]"),
    ],
)
def test_bad_toml_options_fail_at_load(name: str, options: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError) as info:
        PLUGINS[name](options)
    assert words in str(info.value)
    assert str(info.value).startswith(f"rmq.allocation:{name}: ")


def test_options_must_be_a_table() -> None:
    with pytest.raises(ValueError, match="options must be a table"):
        AveragelyPlugin([])  # type: ignore[arg-type]


def test_a_taken_name_is_refused() -> None:
    class Again:
        @hookimpl
        def rmq_allocation_register_strategies(self, registry: StrategyRegistry) -> None:
            registry.register("averagely", lambda **_: AllocateAveragely())

    with pytest.raises(ValueError, match="registered twice"):
        registry_via_hook(None, Again())


# ---------------------------------------------------------------------------------------------------
# properties over random groups

ROOMS = ["IDC1", "IDC2", "IDC3"]


@st.composite
def groups(draw: st.DrawFn) -> tuple[list[MessageQueue], list[str]]:
    brokers = draw(
        st.lists(
            st.sampled_from(["b1", "b2", "IDC1@b3", "IDC2@b4", "IDC3@b5", "IDC1@"]), min_size=1, unique=True
        )
    )
    mq_all = sorted(
        MessageQueue(t, b, q)
        for t in ("T", "%RETRY%g")
        for b in brokers
        for q in range(draw(st.integers(1, 8)))
    )
    cid_all = sorted(
        draw(
            st.lists(
                st.builds(
                    lambda ip, room: f"10.0.0.{ip}@{room}", st.integers(1, 250), st.sampled_from(ROOMS)
                ),
                min_size=1,
                max_size=30,
                unique=True,
            )
        )
    )
    return mq_all, cid_all


PARTITIONING = [
    ("averagely", {}),
    ("averagely_by_circle", {}),
    ("consistent_hash", {}),
    ("consistent_hash", {"virtual_nodes": 1}),
    ("machine_room", {"idc": ["IDC1", "IDC2"]}),
    ("machine_room_nearby", {"consumer_room": "suffix"}),
    ("machine_room_nearby", {"inner": "consistent_hash", "inner_options": {"virtual_nodes": 2}}),
]


def eligible(name: str, options: dict[str, Any], mq_all: list[MessageQueue]) -> set[MessageQueue]:
    if name == "machine_room":
        return {
            mq
            for mq in mq_all
            if mq.broker_name.split("@")[0] in options["idc"]
            and mq.broker_name.count("@") == 1
            and not mq.broker_name.endswith("@")
        }
    return set(mq_all)


@pytest.mark.parametrize(("name", "options"), PARTITIONING)
@settings(max_examples=60, deadline=None)
@given(group=groups())
def test_union_is_everything_and_shares_are_disjoint(
    name: str, options: dict[str, Any], group: tuple[list[MessageQueue], list[str]]
) -> None:
    mq_all, cid_all = group
    strategy = registry_via_hook().create(name, **options)
    shares = [strategy.allocate("g", cid, mq_all, cid_all) for cid in cid_all]
    owned = [mq for share in shares for mq in share]
    assert len(owned) == len(set(owned))
    assert set(owned) == eligible(name, options, mq_all)


# ---------------------------------------------------------------------------------------------------
# determinism across processes (hash randomisation, dict order, caches)

PROGRAM = r"""
import json, sys
from rmq.kernel.model import MessageQueue
from rmq.testing.allocation import bundled_plugins, registry_via_hook
registry = registry_via_hook(bundled_plugins())
cases = json.loads(sys.argv[1])
mq_all = sorted(MessageQueue("T", b, q) for b in ("IDC1@a", "IDC2@b", "c") for q in range(22))
cid_all = sorted(f"10.0.0.{i}@IDC{i % 3}" for i in range(8))
out = {}
for name, options in cases:
    s = registry.create(name, **options)
    out[name + json.dumps(options, sort_keys=True)] = {
        cid: [str(mq) for mq in s.allocate("g", cid, mq_all, cid_all)] for cid in cid_all
    }
print(json.dumps(out, sort_keys=True))
"""


def run_elsewhere(seed: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, json.dumps(PARTITIONING)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.integration
def test_same_allocation_in_other_processes() -> None:
    first, second = run_elsewhere("1"), run_elsewhere("2")
    assert first == second
    assert len(first) == len(PARTITIONING)
    # and this process agrees with both
    registry = registry_via_hook()
    mq_all = sorted(MessageQueue("T", b, q) for b in ("IDC1@a", "IDC2@b", "c") for q in range(22))
    cid_all = sorted(f"10.0.0.{i}@IDC{i % 3}" for i in range(8))
    for name, options in PARTITIONING:
        s = registry.create(name, **options)
        here = {cid: [str(mq) for mq in s.allocate("g", cid, mq_all, cid_all)] for cid in cid_all}
        assert first[name + json.dumps(options, sort_keys=True)] == here


def test_entry_points_name_these_classes() -> None:
    from importlib.metadata import entry_points

    found = {ep.name: ep.load() for ep in entry_points(group="rmq.allocation") if ep.name in PLUGINS}
    assert found == PLUGINS
