"""Filter and allocation figures: ``python bench/filters.py [--seconds S]``.

Prints SQL92 compile time and evaluations/s for a typical subscription
(``a > 5 AND b = 'x'``) over a realistic property map, tag-hash matches/s at the
consume-queue stage, and the time one consumer needs to compute its share of 64
queues among 8 consumers with each bundled strategy (what a rebalance costs).
Figures, never assertions: compare runs on one machine.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable
from typing import Any

from rmq.kernel.model import MessageQueue
from rmq.plugins.allocators import ConsistentHashPlugin
from rmq.plugins.filters import compile_sql92, compile_tag
from rmq.protocol.common import tags_code
from rmq.testing.allocation import bundled_plugins, registry_via_hook

SQL = "a > 5 AND b = 'x'"
PROPS = {
    "a": "10",
    "b": "x",
    "TAGS": "TagA",
    "KEYS": "order-1",
    "UNIQ_KEY": "7F0000010C3418B4AAC2" + "0" * 12,
}


def per_second(fn: Callable[[], Any], seconds: float, batch: int = 1000) -> tuple[float, float]:
    """(calls/s, µs/call) of ``fn`` over about ``seconds``; pass a ``functools.partial`` to keep the
    harness overhead (one C-level call) out of sub-microsecond figures."""
    calls = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(batch):
            fn()
        calls += batch
        now = time.perf_counter()
        if now >= deadline:
            break
    elapsed = now - start
    return calls / elapsed, elapsed / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="measuring time per figure")
    seconds = parser.parse_args().seconds

    print("filters")
    _, us = per_second(lambda: compile_sql92(SQL), seconds, batch=100)
    print(f"  sql92 compile  {SQL!r:<28} {us:9.1f} µs")
    f = compile_sql92(SQL)
    match = f.match_properties
    for label, props in (
        ("match", PROPS),
        ("no match", {**PROPS, "a": "3"}),
        ("NULL (a absent)", {k: v for k, v in PROPS.items() if k != "a"}),
    ):
        rate, us = per_second(functools.partial(match, props), seconds)
        print(f"  sql92 evaluate {label:<28} {rate:12,.0f} /s  {us:6.3f} µs")

    tag = compile_tag("TagA || TagB || TagC")
    hit, miss = tags_code("TagB"), tags_code("TagZ")
    match_code = tag.match_tags_code
    for label, code in (("hit", hit), ("miss", miss)):
        rate, us = per_second(functools.partial(match_code, code), seconds)
        print(f"  tag match_tags_code {label:<23} {rate:12,.0f} /s  {us:6.3f} µs")
    everything = compile_tag("*").match_tags_code
    rate, us = per_second(functools.partial(everything, hit), seconds)
    print(f"  tag match_tags_code {'*':<23} {rate:12,.0f} /s  {us:6.3f} µs")

    print("allocation: one consumer's share, 64 queues x 8 consumers")
    registry = registry_via_hook(bundled_plugins())
    mq_all = sorted(
        MessageQueue("TopicTest", f"IDC{b % 2}@broker-{b}", q) for b in range(4) for q in range(16)
    )
    cid_all = sorted(f"10.0.0.{i}@IDC{i % 2}" for i in range(8))
    me = cid_all[3]
    strategies = {
        "averagely": registry.create("averagely"),
        "averagely_by_circle": registry.create("averagely_by_circle"),
        "consistent_hash": registry.create("consistent_hash"),
        "machine_room": registry.create("machine_room", idc=["IDC0", "IDC1"]),
        "machine_room_nearby": registry.create("machine_room_nearby", consumer_room="suffix"),
        "by_config": registry.create("by_config", queues=mq_all[:8]),
    }
    for name, strategy in strategies.items():
        _, us = per_second(lambda s=strategy: s.allocate("g", me, mq_all, cid_all), seconds, batch=50)  # type: ignore[misc]
        print(f"  {name:<22} {us:9.1f} µs")
    ring_us = per_second(
        lambda: ConsistentHashPlugin({}).create().allocate("g", me, mq_all, cid_all), seconds, 20
    )[1]
    print(f"  {'consistent_hash (cold)':<22} {ring_us:9.1f} µs  (ring built for a new consumer set)")


if __name__ == "__main__":
    main()
