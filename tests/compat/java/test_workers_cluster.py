"""``[broker] workers = 2`` judged by Apache RocketMQ 4.9.8: the same cluster built of two Java brokers
(broker-a-0 and broker-a-1 registered to one Java name server) and one rmqd with two workers answer
RocketMQ's own ``mqadmin`` alike: ``updateTopic -c`` creates the topic on every broker of the cluster,
``topicRoute`` then shows it on both, ``clusterList`` lists both brokers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from rmq.testing import java
from rmq.testing.daemon import RmqdProcess, eventually

pytestmark = pytest.mark.java


def _route(out: str) -> dict[str, Any]:
    """``topicRoute``'s JSON (fastjson writes the brokerAddrs ids as bare numbers: quoted here)."""
    doc = json.loads(re.sub(r"([{,]\s*)(\d+)\s*:", r'\1"\2":', out[out.index("{"):]))
    return {"brokers": sorted(b["brokerName"] for b in doc["brokerDatas"]),
            "queues": sorted((q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"])
                             for q in doc["queueDatas"])}


def _cluster(out: str) -> list[tuple[str, str]]:
    """(cluster, brokerName) of each row of ``clusterList``'s table (addresses and figures differ)."""
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    return sorted((r[0], r[1]) for r in rows if len(r) > 2)


def test_mqadmin_sees_the_same_cluster_of_two_brokers(tmp_path: Path) -> None:
    java.require()
    scratch = tmp_path / "scratch"
    j0 = java.JavaBroker(tmp_path / "j0", conf={"brokerName": "broker-a-0"})
    with j0:
        j1 = java.JavaBroker(tmp_path / "j1", conf={"brokerName": "broker-a-1", "namesrvAddr": j0.namesrv_addr})
        with j1, RmqdProcess(tmp_path / "rmqd", workers=2, proxy=False) as rmqd:
            answers = {}
            for name, ns in (("java", j0.namesrv_addr), ("rmqd", rmqd.namesrv_addr)):
                eventually(lambda ns=ns: len(_cluster(java.mqadmin("clusterList", "-n", ns, scratch=scratch).stdout))
                           == 2, 90, f"{name}: two brokers in clusterList")
                made = java.mqadmin("updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", "WJ", "-r", "4", "-w", "4",
                                    scratch=scratch)
                assert made.returncode == 0 and "create topic to" in made.stdout, made.stdout + made.stderr

                def on_both(ns: str = ns) -> dict[str, Any] | None:
                    r = _route(java.mqadmin("topicRoute", "-n", ns, "-t", "WJ", scratch=scratch).stdout)
                    return r if len(r["queues"]) == 2 else None

                route = eventually(on_both, 60, f"{name}: WJ on both brokers")
                answers[name] = (route, _cluster(java.mqadmin("clusterList", "-n", ns, scratch=scratch).stdout),
                                 made.stdout.count("create topic to"))
            assert answers["rmqd"] == answers["java"]
            assert answers["java"][0]["brokers"] == ["broker-a-0", "broker-a-1"]
