"""rmqadmin's group, message, DLQ, broker-maintenance and name-server commands against a real rmqd."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rmq.testing.daemon import RmqdProcess
from rmq.testing.rmqadmin import js, run


def test_group_and_message_commands(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    ns = ["-n", proc.namesrv_addr]
    run("updateTopic", *ns, "-b", proc.broker_addr, "-t", "OpsCli", "-r", "1", "-w", "1")
    assert js("topicClusterList", *ns, "-t", "OpsCli")["clusterList"] == ["DefaultCluster"]
    begin = int(time.time() * 1000) - 1
    ids = [js("sendMessage", *ns, "-t", "OpsCli", "-p", f"body-{i}", "-k", f"key{i}", "-c", "TagA") for i in range(3)]
    # browse: every message, by time range, by queue offset, by unique key
    printed = js("printMsg", *ns, "-t", "OpsCli", "-b", str(begin))
    assert [m["body"] for m in printed] == ["body-0", "body-1", "body-2"]
    assert js("queryMsgByOffset", *ns, "-t", "OpsCli", "-b", "broker-a", "-i", "0", "-o", "1")["body"] == "body-1"
    assert js("queryMsgByUniqueKey", *ns, "-t", "OpsCli", "-i", ids[2]["msgId"])["body"] == "body-2"
    # offsets: skip to the end, clone to another group
    run("updateSubGroup", *ns, "-b", proc.broker_addr, "-g", "OpsCliG")
    skipped = js("skipAccumulatedMessage", *ns, "-g", "OpsCliG", "-t", "OpsCli")
    assert [r["offset"] for r in skipped] == [3]
    run("cloneGroupOffset", *ns, "-s", "OpsCliG", "-d", "OpsCliG2", "-t", "OpsCli")
    assert js("consumerProgress", *ns, "-g", "OpsCliG2", "-t", "OpsCli")["diffTotal"] == 0
    stats = js("brokerConsumeStats", *ns, "-b", proc.broker_addr)
    assert "OpsCliG" in {r["consumerGroup"] for r in stats["offsetTable"]}  # subscription groups only, as 4.9
    # resend to a group: the message comes back on the group's retry topic
    resent = js("resendMessageToGroup", *ns, "-i", ids[0]["offsetMsgId"], "-g", "OpsCliG")
    assert resent["topic"] == "%RETRY%OpsCliG" and resent["sendStatus"] == "SEND_OK"
    again = js("printMsg", *ns, "-t", "%RETRY%OpsCliG")
    assert [m["body"] for m in again] == ["body-0"]
    # permissions and deletion
    run("updateTopicPerm", *ns, "-b", proc.broker_addr, "-t", "OpsCli", "-p", "4")
    p = run("sendMessage", *ns, "-t", "OpsCli", "-p", "refused", ok=False)
    assert p.returncode == 1 and p.stderr.startswith("rmqadmin:")
    assert "success" in run("deleteSubGroup", *ns, "-b", proc.broker_addr, "-g", "OpsCliG2").stdout
    # no member online: one line and exit 1
    p = run("consumerConnection", *ns, "-g", "OpsCliG", ok=False)
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1


def test_broker_and_namesrv_commands(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    ns = ["-n", proc.namesrv_addr]
    for cmd in ("cleanExpiredCQ", "deleteExpiredCommitLog", "cleanUnusedTopic"):
        assert js(cmd, *ns, "-b", proc.broker_addr)["success"] is True
    p = run("cleanUnusedTopic", *ns, ok=False)
    assert p.returncode != 0 and "-c clusterName or -b brokerAddr" in p.stderr
    cfg = js("getNamesrvConfig", *ns)[proc.namesrv_addr]
    assert cfg["orderMessageEnable"] == "false"
    run("updateNamesrvConfig", *ns, "-k", "orderMessageEnable", "-v", "true")
    assert js("getNamesrvConfig", *ns)[proc.namesrv_addr]["orderMessageEnable"] == "true"
    p = run("updateNamesrvConfig", *ns, "-k", "listenPort", "-v", "1", ok=False)
    assert p.returncode == 1 and "only at start" in p.stderr
    run("updateKvConfig", *ns, "-s", "ORDER_TOPIC_CONFIG", "-k", "OpsOrder", "-v", "broker-a:4")
    run("deleteKvConfig", *ns, "-s", "ORDER_TOPIC_CONFIG", "-k", "OpsOrder")
    js("sendMessage", *ns, "-t", "OpsStats", "-p", "x")
    time.sleep(2.2)  # the broker samples its counters once a second
    rows = js("statsAll", *ns, "-t", "OpsStats")
    assert rows and rows[0]["inMsg24Hour"] == 1


@pytest.mark.integration
def test_help_lists_mqadmin_families() -> None:
    out = run("--help").stdout
    for name in ("cloneGroupOffset", "consumerStatus", "printMsg", "queryMsgByOffset", "cleanExpiredCQ",
                 "getNamesrvConfig", "updateKvConfig", "statsAll", "resendMessageToGroup"):
        assert name in out


def test_acl_and_ha_commands(rmqd_factory: Any, tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n  - accessKey: opsadmin\n    secretKey: \"opsadmin-secret\"\n    admin: true\n")
    proc: RmqdProcess = rmqd_factory(broker_conf={"aclEnable": True, "plainAclFile": str(acl)})
    ns = ["-n", proc.namesrv_addr]
    admin = ["--access-key", "opsadmin", "--secret-key", "opsadmin-secret"]
    user = ["--access-key", "opsuser", "--secret-key", "opsuser-secret"]
    p = run("sendMessage", *ns, *user, "-t", "AclOps", "-p", "x", ok=False)
    assert p.returncode == 1
    run("updateAclConfig", *ns, *admin, "-b", proc.broker_addr, "-a", "opsuser", "-s", "opsuser-secret",
        "-i", "PUB", "-u", "SUB")
    run("updateTopic", *ns, *admin, "-b", proc.broker_addr, "-t", "AclOps", "-r", "1", "-w", "1")
    assert js("sendMessage", *ns, *user, "-t", "AclOps", "-p", "x")["sendStatus"] == "SEND_OK"
    versions = js("clusterAclConfigVersion", *ns, *admin, "-b", proc.broker_addr)
    assert versions[0]["brokerName"] == "broker-a"
    run("updateGlobalWhiteAddr", *ns, *admin, "-b", proc.broker_addr, "-g", "10.10.*.*")
    assert "10.10.*.*" in acl.read_text()
    run("deleteAclConfig", *ns, *admin, "-b", proc.broker_addr, "-a", "opsuser")
    assert "opsuser" not in acl.read_text()
    ha = js("haStatus", *ns, *admin, "-b", proc.broker_addr)
    assert ha[proc.broker_addr]["brokerRole"] == "ASYNC_MASTER"


def test_update_broker_config_is_written_to_the_config_file(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    ns = ["-n", proc.namesrv_addr]
    before = proc.config_path.read_text()
    run("updateBrokerConfig", *ns, "-b", proc.broker_addr, "-k", "maxMessageSize", "-v", "65536")
    text = proc.config_path.read_text()
    assert "maxMessageSize = 65536" in text and text.replace("maxMessageSize = 65536\n", "") == before
    proc.stop()
    proc.start()
    assert js("getBrokerConfig", *ns, "-b", proc.broker_addr)["maxMessageSize"] == "65536"
