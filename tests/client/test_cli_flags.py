"""rmqadmin parses mqadmin's spelling of flags (no process: click's parser only). The java tier checks
every 4.9.8 flag against mqadmin's own option table; these are RocketMQ 5's, which 4.9.8 lacks, and the
value-taking booleans a shell script passes."""

from __future__ import annotations

from typing import Any

from rmq.client.cli import main


def parse(*argv: str) -> dict[str, Any]:
    cmd = main.commands[argv[0]]
    return cmd.make_context(argv[0], list(argv[1:])).params


def test_elect_master_takes_rocketmq5_flags() -> None:
    p = parse("electMaster", "-a", "127.0.0.1:9878", "-c", "DefaultCluster", "-bn", "broker-a", "-b", "2")
    assert (p["broker_name"], p["broker_id"], p["cluster"]) == ("broker-a", 2, "DefaultCluster")


def test_booleans_are_values_as_in_mqadmin() -> None:
    assert parse("updateTopic", "-t", "T", "-c", "C", "-o", "true")["order"] is True
    assert parse("updateTopic", "-t", "T", "-c", "C", "-o", "false")["order"] is False
    assert parse("updateSubGroup", "-g", "G", "-c", "C")["broadcast"] is False  # mqadmin's default
    assert parse("consumerProgress", "-s", "true")["client_ip"] is True and parse("consumerProgress")["group"] is None
    assert parse("queryMsgById", "-i", "X", "-f", "GBK")["charset"] == "GBK"
