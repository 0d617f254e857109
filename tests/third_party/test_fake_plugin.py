"""A third party's distribution (tests/fake_plugin, installed like any package) swaps behaviour from TOML alone.

Selected in TOML, its storage wrapper decorates the bundled mmap store, its dispatcher sees every
stored message and its allocation strategy is what a client gets by name; removed from TOML, all
three are gone. No kernel code knows the package. The daemons open no gRPC endpoint (``proxy=False``): the C++
producer speaks remoting, and the endpoint's start-up is ~80 ms CPU of each.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rmq.kernel.config import load_config
from rmq.kernel.hookspecs.allocation import StrategyRegistry
from rmq.kernel.kernel import Kernel
from rmq.kernel.model import MessageQueue
from rmq.testing.daemon import RmqdProcess


def produce_with_cpp_client(namesrv: str, topic: str, n: int) -> None:
    from rocketmq.client import Message, Producer

    producer = Producer("fake-plugin-test")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for i in range(n):
            msg = Message(topic)
            msg.set_keys(f"k{i}")
            msg.set_tags("t")
            msg.set_body(f"body-{i}")
            producer.send_sync(msg)
    finally:
        producer.shutdown()


@pytest.mark.integration
def test_storage_wrapper_and_dispatcher_come_and_go_with_the_toml(tmp_path: Path) -> None:
    plugins = {
        "plugins": {"storage": ["mmap", "counting"], "dispatch": ["audit"]},
        "plugin": {"dispatch": {"audit": {"file": "audit.log"}}},
    }
    rmqd = RmqdProcess(tmp_path / "on", extra=plugins, proxy=False)
    store = Path(rmqd.config_path.parent / "store")
    with rmqd:
        produce_with_cpp_client(rmqd.namesrv_addr, "FakePluginTopic", 20)
        deadline = time.monotonic() + 10
        audit = store / "audit.log"
        while time.monotonic() < deadline and (
            not audit.exists() or len([ln for ln in audit.read_text().splitlines() if "FakePluginTopic" in ln]) < 20
        ):
            time.sleep(0.05)
    lines = [ln.split() for ln in audit.read_text().splitlines() if ln.startswith("FakePluginTopic ")]
    assert len(lines) == 20
    assert sorted(int(ln[3]) for ln in lines) == [int(ln[3]) for ln in lines]  # commitlog order
    report = json.loads((store / "counting-store.json").read_text())
    assert report["puts"] >= 20 and report["inner"] != "CountingStore"

    # Same store, plugins removed from the TOML: neither runs any more.
    (store / "counting-store.json").unlink()
    before = audit.read_text()
    off = RmqdProcess(tmp_path / "on", broker_conf={"storePathRootDir": str(store)}, proxy=False)
    with off:
        produce_with_cpp_client(off.namesrv_addr, "FakePluginTopic", 5)
    assert audit.read_text() == before
    assert not (store / "counting-store.json").exists()


def test_allocation_strategy_is_selected_by_toml_and_absent_otherwise(tmp_path: Path) -> None:
    toml = tmp_path / "client.toml"
    toml.write_text('[broker]\n[plugins]\nallocation = ["averagely", "fake_reverse"]\n')
    mqs = [MessageQueue("T", "b", i) for i in range(4)]

    kernel = Kernel.from_config(load_config(toml))
    registry = StrategyRegistry()
    kernel.hook.rmq_allocation_register_strategies(registry=registry)
    assert registry.names() == ["averagely", "fake_reverse"]
    got = registry.create("fake_reverse").allocate("g", "c1", mqs, ["c1", "c2"])
    assert got == [mqs[3], mqs[1]]

    toml.write_text('[broker]\n[plugins]\nallocation = ["averagely"]\n')
    kernel = Kernel.from_config(load_config(toml))
    registry = StrategyRegistry()
    kernel.hook.rmq_allocation_register_strategies(registry=registry)
    try:
        registry.create("fake_reverse")
    except KeyError as e:
        assert "unknown allocation strategy 'fake_reverse'; available: averagely" in str(e)
    else:
        raise AssertionError("fake_reverse should not be available without the TOML naming it")


@pytest.mark.integration
def test_broker_extension_runs_inside_the_broker_when_selected(tmp_path: Path) -> None:
    """``rmq_broker_lifespan``: a third party's extension sees the open store at start and at stop."""
    rmqd = RmqdProcess(tmp_path / "ext", extra={"plugins": {"extensions": ["broker_notes"]}}, proxy=False)
    notes = rmqd.workdir / "store" / "config" / "fake-notes.json"
    with rmqd:
        produce_with_cpp_client(rmqd.namesrv_addr, "ExtTopic", 3)
        seen = json.loads(notes.read_text())
        assert seen["addr"] == rmqd.broker_addr and seen["slave"] is False and seen["levels"] == 18
    seen = json.loads(notes.read_text())
    assert seen["max_at_stop"] > seen["max_at_start"]
    notes.unlink()
    with RmqdProcess(tmp_path / "ext", proxy=False):  # not selected: not run
        pass
    assert not notes.exists()
