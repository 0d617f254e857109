"""rmqadmin's tool-box commands (allocateMQ, printMsgByQueue, the send probes, the exports, a message's
trace, a broker's producers) against a real rmqd; each answer checked against what the broker holds."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import start_blocking_portal

from rmq.client import Message, Producer, PushConsumer
from rmq.testing.daemon import RmqdProcess, eventually
from rmq.testing.rmqadmin import js, run

from .conftest import FAST_CONSUMER


def _max_offsets(ns: list[str], topic: str) -> dict[int, int]:
    return {r["queueId"]: r["maxOffset"] for r in js("topicStatus", *ns, "-t", topic)}


def test_allocate_and_print_by_queue(rmqd: RmqdProcess) -> None:
    ns = ["-n", rmqd.namesrv_addr]
    run("updateTopic", *ns, "-b", rmqd.broker_addr, "-t", "ToolQ", "-r", "4", "-w", "4")
    # allocateMQ: the "average" split over three clients, in the order given: 2, 1, 1 queues, all covered once
    ips = ["192.0.2.1@a", "192.0.2.1@b", "192.0.2.1@c"]
    result = js("allocateMQ", *ns, "-t", "ToolQ", "-i", ",".join(ips))["result"]
    assert [len(result[ip]) for ip in ips] == [2, 1, 1]
    route = js("topicRoute", *ns, "-t", "ToolQ")
    held = sorted((q["brokerName"], q["queueId"]) for qs in result.values() for q in qs)
    assert held == sorted((qd["brokerName"], i) for qd in route["queueDatas"] for i in range(qd["readQueueNums"]))
    assert json.loads(run("allocateMQ", *ns, "-t", "ToolQ", "-i", ",".join(ips)).stdout) == {"result": result}
    # printMsgByQueue: queue 0's messages and their tags; the other queues' are not read
    for body, tag, qid in (("q0-a", "TagA", "0"), ("q1-x", "TagA", "1"), ("q0-b", "TagB", "0"), ("q0-c", "TagA", "0")):
        run("sendMessage", *ns, "-t", "ToolQ", "-p", body, "-c", tag, "-b", "broker-a", "-i", qid)
    args = ("printMsgByQueue", *ns, "-t", "ToolQ", "-a", "broker-a", "-i", "0")
    doc = js(*args, "-p", "true", "-d", "true", "-f", "true")
    stored = [m["body"] for m in js("printMsg", *ns, "-t", "ToolQ") if m["queueId"] == 0]
    assert [m["body"] for m in doc["messages"]] == stored == ["q0-a", "q0-b", "q0-c"]
    assert (doc["minOffset"], doc["maxOffset"]) == (0, _max_offsets(ns, "ToolQ")[0])
    assert doc["tagCount"] == {"TagA": 2, "TagB": 1}
    text = run(*args, "-p", "true", "-d", "true", "-f", "true").stdout.splitlines()
    assert [ln.split()[:2] for ln in text[-2:]] == [["Tag:", "TagA"], ["Tag:", "TagB"]] and text[-2].endswith("Count: 2")
    assert len(text) == 5 and all(ln.startswith("MSGID: ") and "MessageExt [brokerName=broker-a, queueId=0" in ln
                                  for ln in text[:3])
    assert text[0].endswith("BODY: q0-a") and "'TAGS=TagA" not in text[0] and "TAGS=TagA" in text[0]
    no_body = run(*args, "-p", "true").stdout
    assert no_body.count("BODY: NOT PRINT BODY") == 3
    assert run(*args).stdout == ""  # neither -p nor -f: nothing printed (as mqadmin)
    assert [m["body"] for m in js(*args, "-p", "true", "-d", "true", "-s", "TagB")["messages"]] == ["q0-b"]


def test_send_probes(rmqd: RmqdProcess) -> None:
    ns = ["-n", rmqd.namesrv_addr]
    # sendMsgStatus: a warm-up send and -c sends, all to the broker's own topic
    before = sum(_max_offsets(ns, "broker-a").values())
    out = run("sendMsgStatus", *ns, "-b", "broker-a", "-c", "3", "-s", "20").stdout.splitlines()
    assert len(out) == 3 and all(ln.startswith("rt=") and "SendResult [sendStatus=SEND_OK" in ln for ln in out)
    assert sum(_max_offsets(ns, "broker-a").values()) == before + 4
    # checkMsgSendRT: send i to queue i mod n, one more message on each queue
    run("updateTopic", *ns, "-b", rmqd.broker_addr, "-t", "ToolRT", "-r", "2", "-w", "2")
    doc = js("checkMsgSendRT", *ns, "-t", "ToolRT", "-a", "4", "-s", "16")
    assert [(r["queueId"], r["sendResult"]) for r in doc["sends"]] == [(0, True), (1, True), (0, True), (1, True)]
    assert _max_offsets(ns, "ToolRT") == {0: 2, 1: 2}
    text = run("checkMsgSendRT", *ns, "-t", "ToolRT", "-a", "2").stdout.splitlines()
    assert text[0].split("  ")[0] == "#Broker Name" and text[-1].startswith("Avg RT: ")
    # clusterRT: every broker of every cluster, -a sends each
    before = sum(_max_offsets(ns, "broker-a").values())
    rows = js("clusterRT", *ns, "-a", "3", "-s", "8")
    assert [(r["clusterName"], r["brokerName"], r["successCount"], r["failCount"]) for r in rows] == \
        [("DefaultCluster", "broker-a", 3, 0)]
    assert sum(_max_offsets(ns, "broker-a").values()) == before + 3
    log = run("clusterRT", *ns, "-a", "2", "-p", "true", "-m", "roomA").stdout.strip()
    assert log.split("|")[1:4] == ["roomA", "DefaultCluster", "broker-a"]
    rounds = run("clusterRT", *ns, "-a", "2", "-i", "1", "--rounds", "2").stdout
    assert rounds.count("#Cluster Name") == 2 and rounds.count("broker-a") == 2
    assert run("clusterRT", *ns, "-a", "2", "-c", "NoCluster").stdout.strip().endswith("cluster [NoCluster] not exist")


def test_exports(rmqd: RmqdProcess, tmp_path: Path) -> None:
    ns = ["-n", rmqd.namesrv_addr]
    run("updateTopic", *ns, "-b", rmqd.broker_addr, "-t", "ToolExp", "-r", "3", "-w", "3")
    run("updateSubGroup", *ns, "-b", rmqd.broker_addr, "-g", "ToolExpG", "-r", "5")
    out = tmp_path / "out"
    line = run("exportMetadata", *ns, "-c", "DefaultCluster", "-f", str(out)).stdout.strip()
    assert line == f"export {out}/metadata.json success"
    meta = json.loads((out / "metadata.json").read_text())
    assert set(meta) == {"topicConfigTable", "subscriptionGroupTable", "exportTime"}
    assert meta["topicConfigTable"]["ToolExp"]["writeQueueNums"] == 3
    assert meta["subscriptionGroupTable"]["ToolExpG"]["retryMaxTimes"] == 5
    system = set(js("topicList", *ns)) - {"ToolExp", "broker-a", "DefaultCluster"}
    assert not system & set(meta["topicConfigTable"])  # user topics only
    assert "TOOLS_CONSUMER" not in meta["subscriptionGroupTable"]
    assert not any(t.startswith("%RETRY%") for t in meta["topicConfigTable"])
    # -b with -t / -g: the broker's own tables
    js("exportMetadata", *ns, "-b", rmqd.broker_addr, "-t", "-f", str(out))
    assert "ToolExp" in json.loads((out / "topic.json").read_text())["topicConfigTable"]
    js("exportMetadata", *ns, "-b", rmqd.broker_addr, "-g", "-f", str(out))
    assert "ToolExpG" in json.loads((out / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
    # configs: the cluster's scale and its master's settings, as getBrokerConfig gives them
    js("exportConfigs", *ns, "-c", "DefaultCluster", "-f", str(out))
    configs = json.loads((out / "configs.json").read_text())
    assert configs["clusterScale"] == {"namesrvSize": 1, "masterBrokerSize": 1, "slaveBrokerSize": 0}
    broker_cfg = js("getBrokerConfig", *ns, "-b", rmqd.broker_addr)
    assert configs["brokerConfigs"]["broker-a"]["flushDiskType"] == broker_cfg["flushDiskType"]
    js("exportMetrics", *ns, "-c", "DefaultCluster", "-f", str(out))
    metrics = json.loads((out / "metrics.json").read_text())
    quota = metrics["evaluateReport"]["broker-a"]["runtimeQuota"]
    assert quota["topicSize"] == len(json.loads((out / "topic.json").read_text())["topicConfigTable"])
    assert quota["groupSize"] == len(meta["subscriptionGroupTable"])
    assert set(metrics["totalData"]) == {"totalTps", "totalOneDayNum"}
    assert sorted(p.name for p in out.iterdir()) == ["configs.json", "metadata.json", "metrics.json", "subscriptionGroup.json",
                                                     "topic.json"]
    # -f must be a directory rmqadmin can make; nothing is written elsewhere
    blocker = tmp_path / "a-file"
    blocker.write_text("keep")
    p = run("exportConfigs", *ns, "-c", "DefaultCluster", "-f", str(blocker), ok=False)
    assert p.returncode == 1 and "not a directory" in p.stderr and blocker.read_text() == "keep"
    p = run("exportMetadata", *ns, "-f", str(out), ok=False)
    assert p.returncode != 0 and "-c clusterName or -b brokerAddr" in p.stderr


async def _online_clients(namesrv: str, topic: str, stop: anyio.Event) -> None:
    """A producer (group ToolPG), a traced consumer (group ToolTC, from the first message) and a
    consumer stuck on its first message (ToolLag) online until ``stop``."""
    consumer = PushConsumer("ToolTC", namesrv, listener=lambda m: None, consume_from_where="FIRST_OFFSET",
                            enable_trace=True, **FAST_CONSUMER)
    consumer.subscribe(topic, "*")

    async def stuck(message: Any) -> None:
        if message.body == b"stuck":
            await stop.wait()

    # a group online that never finishes the message "stuck": it stays undone
    lagging = PushConsumer("ToolLag", namesrv, listener=stuck, consume_from_where="FIRST_OFFSET", **FAST_CONSUMER)
    lagging.subscribe(topic, "*")
    async with Producer("ToolPG", namesrv) as p, consumer, lagging:
        await p.send(Message(topic, b"hello"))  # the broker learns of the producer from its heartbeat
        await stop.wait()


def test_trace_and_producers(rmqd: RmqdProcess) -> None:
    ns = ["-n", rmqd.namesrv_addr]
    run("updateTopic", *ns, "-b", rmqd.broker_addr, "-t", "ToolTr", "-r", "1", "-w", "1")
    sent = js("sendMessage", *ns, "-t", "ToolTr", "-p", "traced", "-m", "true")

    def traced() -> list[Any]:
        return js("queryMsgTraceById", *ns, "-i", sent["msgId"])

    views = eventually(traced, 60, "the send's trace record indexed")
    assert [(v["msgType"], v["groupName"], v["status"], v["topic"]) for v in views] == \
        [("Pub", "TOOLS_PRODUCER", "success", "ToolTr")]
    text = run("queryMsgTraceById", *ns, "-i", sent["msgId"]).stdout.splitlines()
    assert text[0].split() == ["#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status"]
    assert text[1].split()[:2] == ["Pub", "TOOLS_PRODUCER"] and text[1].split()[-1] == "success"
    assert run("queryMsgTraceById", *ns, "-i", "0" * 32).stdout == ""
    # producer: the groups online on the broker, one line per instance
    with start_blocking_portal() as portal:
        stop = portal.call(anyio.Event)
        future = portal.start_task_soon(_online_clients, rmqd.namesrv_addr, "ToolTr", stop)

        def online() -> dict[str, Any] | None:
            return js("producer", *ns, "-b", rmqd.broker_addr).get("ToolPG")

        members = eventually(online, 60, "ToolPG online")
        lines = [ln for ln in run("producer", *ns, "-b", rmqd.broker_addr).stdout.splitlines() if "(ToolPG)" in ln]
        assert len(lines) == len(members) == 1 and f"clientId={members[0]['clientId']}," in lines[0]
        # the last heartbeat in epoch ms, as Java's broker says it (not rmqd's monotonic clock)
        assert abs(members[0]["lastUpdateTimestamp"] - time.time() * 1000) < 600_000, members[0]
        # the traced consumer's record: a Sub table for its group after the Pub one
        def consumed() -> list[Any]:
            return [v for v in traced() if v["msgType"] == "SubAfter"]

        subs = eventually(consumed, 90, "ToolTC's consume traced")
        assert [(v["groupName"], v["status"]) for v in subs] == [("ToolTC", "success")]
        text = run("queryMsgTraceById", *ns, "-i", sent["msgId"]).stdout.splitlines()
        assert text[3].split()[:2] == ["#Type", "#ConsumerGroup"] and text[4].split()[:2] == ["Sub", "ToolTC"]
        # startMonitoring: one round over the online groups; ToolTC's backlog as consumerProgress counts it
        eventually(lambda: js("consumerProgress", *ns, "-g", "ToolTC", "-t", "ToolTr")["diffTotal"] == 0, 60,
                   "ToolTC consumed everything")
        reports = js("startMonitoring", *ns, "--delay", "0", "--rounds", "1")
        mine = [r for r in reports if (r["consumerGroup"], r["topic"]) == ("ToolTC", "ToolTr")]
        assert [(r["undoneMsgsTotal"], r["undoneMsgsSingleMQ"]) for r in mine] == [(0, 0)]
        lines = run("startMonitoring", *ns, "--delay", "0", "--rounds", "1").stdout.splitlines()
        assert lines[0].endswith("beginRound") and lines[-1].endswith("endRound")
        assert ("[MONITOR] reportUndoneMsgs: UndoneMsgs [consumerGroup=ToolTC, topic=ToolTr, undoneMsgsTotal=0, "
                "undoneMsgsSingleMQ=0, undoneMsgsDelayTimeMills=0]") in lines
        # ToolLag first consumes what is there; then "stuck" comes alone in a pull (rmq's push consumer
        # commits a pulled batch once all of it is consumed), so its offset stays committed before it
        eventually(lambda: js("consumerProgress", *ns, "-g", "ToolLag", "-t", "ToolTr")["diffTotal"] == 0, 60,
                   "ToolLag consumed everything")
        run("sendMessage", *ns, "-t", "ToolTr", "-p", "stuck")
        seen: list[Any] = []

        def lag_of_one() -> bool:
            seen.append(js("consumerProgress", *ns, "-g", "ToolLag", "-t", "ToolTr")["offsetTable"])
            return sum(r["diff"] for r in seen[-1]) == 1

        try:
            eventually(lag_of_one, 60, "ToolLag committed up to the stuck message")
        except AssertionError:
            raise AssertionError(seen[-3:]) from None
        reports = js("startMonitoring", *ns, "--delay", "0", "--rounds", "1")
        lag = [r for r in reports if (r["consumerGroup"], r["topic"]) == ("ToolLag", "ToolTr")]
        assert [(r["undoneMsgsTotal"], r["undoneMsgsSingleMQ"]) for r in lag] == [(1, 1)]
        stored = js("queryMsgByOffset", *ns, "-t", "ToolTr", "-b", "broker-a", "-i", "0", "-o", "2")["storeTimestamp"]
        consumed = js("queryMsgByOffset", *ns, "-t", "ToolTr", "-b", "broker-a", "-i", "0", "-o", "1")["storeTimestamp"]
        assert lag[0]["undoneMsgsDelayTimeMills"] == stored - consumed  # the newest's store time less the last consumed's
        portal.call(stop.set)
        future.result(30)


@pytest.mark.parametrize("text,expected", [("hello", 99162322), ("", 0), ("broker-a", None)])
def test_java_hash(text: str, expected: int | None) -> None:
    """String.hashCode as Java computes it (values from the JDK's definition: s[0]*31^(n-1) + ...)."""
    from rmq.client.cli_tools import java_hash

    want = 0
    for ch in text:
        want = (want * 31 + ord(ch)) % (1 << 32)
    want = want - (1 << 32) if want >= 1 << 31 else want
    assert java_hash(text) == want and (expected is None or want == expected)
