"""rmqadmin against a real rmqd: mqadmin's command names and flags, tables for people, exactly one JSON
document with RocketMQ's field names under --json, exit status 1 with one line on error."""

from __future__ import annotations

from typing import Any

from rmq.testing.daemon import RmqdProcess
from rmq.testing.rmqadmin import js, run


def test_topic_message_and_group_commands(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    ns = ["-n", proc.namesrv_addr]
    assert "success" in run("updateTopic", *ns, "-c", "DefaultCluster", "-t", "CliT", "-r", "2", "-w", "2").stdout
    assert "CliT" in js("topicList", *ns)["topicList"]
    route = js("topicRoute", *ns, "-t", "CliT")
    assert route["queueDatas"][0]["readQueueNums"] == 2 and route["brokerDatas"][0]["brokerName"] == "broker-a"
    sent = js("sendMessage", *ns, "-t", "CliT", "-p", "hello rmqadmin", "-k", "order-42", "-c", "TagA")
    assert sent["sendStatus"] == "SEND_OK" and sent["msgId"]
    status = js("topicStatus", *ns, "-t", "CliT")
    assert sum(q["maxOffset"] for q in status) == 1
    msgs = js("consumeMessage", *ns, "-t", "CliT")
    assert [m["body"] for m in msgs] == ["hello rmqadmin"] and msgs[0]["tags"] == "TagA"
    by_id = js("queryMsgById", *ns, "-i", sent["offsetMsgId"])
    assert by_id["body"] == "hello rmqadmin" and by_id["keys"] == "order-42"
    by_unique = js("queryMsgById", *ns, "-i", sent["msgId"], "-t", "CliT")
    assert by_unique["offsetMsgId"] == sent["offsetMsgId"]
    by_key = js("queryMsgByKey", *ns, "-t", "CliT", "-k", "order-42")
    assert [m["body"] for m in by_key] == ["hello rmqadmin"]
    assert "success" in run("updateSubGroup", *ns, "-c", "DefaultCluster", "-g", "CliG", "-r", "3").stdout
    progress = js("consumerProgress", *ns, "-g", "CliG", "-t", "CliT")
    assert progress["diffTotal"] == 1 and {"brokerOffset", "consumerOffset", "diff"} <= set(progress["offsetTable"][0])
    table = run("consumerProgress", *ns, "-g", "CliG", "-t", "CliT").stdout
    assert "#Broker Offset" in table and "Diff Total: 1" in table
    clusters = js("clusterList", *ns)
    assert clusters[0]["clusterName"] == "DefaultCluster" and clusters[0]["brokerAddr"] == proc.broker_addr
    assert int(js("brokerStatus", *ns, "-b", proc.broker_addr)["msgPutTotalTodayNow"]) >= 1
    cfg = js("getBrokerConfig", *ns, "-b", proc.broker_addr)
    assert cfg["brokerName"] == "broker-a" and cfg["listenPort"] == proc.broker_addr.rsplit(":", 1)[1]
    assert "success" in run("updateBrokerConfig", *ns, "-b", proc.broker_addr, "-k", "traceOn", "-v", "false").stdout
    assert js("getBrokerConfig", *ns, "-b", proc.broker_addr)["traceOn"] == "false"
    p = run("updateBrokerConfig", *ns, "-b", proc.broker_addr, "-k", "listenPort", "-v", "1", ok=False)
    assert p.returncode == 1 and "takes effect only at start" in p.stderr
    assert "deleted" in js("deleteTopic", *ns, "-t", "CliT", "-c", "DefaultCluster")


def test_errors_are_one_line_and_exit_1(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    p = run("topicRoute", "-n", proc.namesrv_addr, "-t", "NoSuchTopic", ok=False)
    assert p.returncode == 1 and p.stdout == "" and p.stderr.startswith("rmqadmin: ") and p.stderr.count("\n") == 1
    p = run("updateTopic", "-n", proc.namesrv_addr, "-t", "X", ok=False)
    assert p.returncode == 2 and "give -c clusterName or -b brokerAddr" in p.stderr
