"""``rmqd --config broker.conf``: RocketMQ's own properties files load as the TOML they stand for — the same
tables, defaults, strictness and ``--set`` overrides — with every problem named ``file:line``
(``rmq.protocol.rocketmq_conf``). Pure loading here; real rmqd processes: test_rocketmq_conf_run.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq.kernel.config import ConfigError, load_config
from rmq.protocol.rocketmq_conf import config_format, edit_text
from rmq.protocol.rocketmq_keys import IGNORED, NOOP

# the keys of RocketMQ 4.9.8's distribution/conf/broker.conf (its own spacing), and the namesrv.conf and
# broker.conf /work/shared/java/run-java-broker.sh writes for the Java broker
DIST_BROKER = ("brokerClusterName = DefaultCluster\nbrokerName = broker-a\nbrokerId = 0\ndeleteWhen = 04\n"
               "fileReservedTime = 48\nbrokerRole = ASYNC_MASTER\nflushDiskType = ASYNC_FLUSH\n")
RUN_NAMESRV = "listenPort=19876\nkvConfigPath={d}/home/namesrv/kvConfig.json\nconfigStorePath={d}/home/namesrv/namesrv.properties\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def error(path: Path, *overrides: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(path, overrides)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_the_format_comes_from_the_extension_else_the_content() -> None:
    assert config_format("rmqd.toml", "brokerName=a") == "toml"
    assert config_format("broker.conf", "[broker]\n") == "properties"
    assert config_format("x/broker-a.PROPERTIES", "") == "properties"
    assert config_format("rmqd.cfg", "[broker]\nlistenPort = 1\n") == "toml"
    assert config_format("rmqd.cfg", "brokerName = broker-a\n") == "properties"  # not TOML
    assert config_format("rmqd.cfg", "listenPort = 9876\n") == "properties"  # TOML, but not tables


def test_a_broker_conf_is_the_broker_table_with_the_same_defaults(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "broker.conf", DIST_BROKER))
    toml = load_config(write(tmp_path, "same.toml", "[broker]\n" + DIST_BROKER.replace("= ", '= "').replace(
        "\n", '"\n').replace('"0"', "0").replace('"48"', "48")))
    assert cfg.roles() == ["broker"] and cfg.tables == toml.tables and cfg.selected() == toml.selected()
    assert cfg.broker.fileReservedTime == 48 and cfg.broker.deleteWhen == "04" and cfg.broker.listenPort == 10911
    assert cfg.ignored == []


def test_a_namesrv_conf_is_the_namesrv_table(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "namesrv.conf", RUN_NAMESRV.format(d=tmp_path)))
    assert cfg.roles() == ["namesrv"] and cfg.namesrv.listenPort == 19876
    assert cfg.namesrv.kvConfigPath == f"{tmp_path}/home/namesrv/kvConfig.json"
    assert [i.split()[0] for i in cfg.ignored] == ["namesrv.configStorePath"]
    # a file whose keys every role has is told apart by its name
    assert load_config(write(tmp_path, "nameserver-1.properties", "listenPort=9877\n")).roles() == ["namesrv"]
    assert load_config(write(tmp_path, "broker-b-s.properties", "listenPort=10921\n")).roles() == ["broker"]
    assert "cannot tell whose settings these are" in error(write(tmp_path, "site.conf", "listenPort=1\n"))


def test_rocketmq_5_namesrv_with_the_controller_in_it(tmp_path: Path) -> None:
    text = ("listenPort = 9876\nenableControllerInNamesrv = true\ncontrollerDLegerGroup = group1\n"
            "controllerDLegerPeers = n0-127.0.0.1:9878\ncontrollerDLegerSelfId = n0\n")
    cfg = load_config(write(tmp_path, "namesrv-n0.conf", text))
    assert cfg.roles() == ["namesrv", "controller"] and cfg.controller.controllerDLegerGroup == "group1"
    off = write(tmp_path, "ns.conf", text.replace("enableControllerInNamesrv = true\n", "kvConfigPath=/x\n"))
    assert error(off) == (f"{off}:3: controllerDLegerGroup configures the controller, which this name server runs "
                          "only with enableControllerInNamesrv=true: add it, or remove the key")
    alone = load_config(write(tmp_path, "controller-n0.conf", text.split("\n", 2)[2]))
    assert alone.roles() == ["controller"]


def test_every_problem_names_the_file_and_line(tmp_path: Path) -> None:
    p = write(tmp_path, "broker.conf", "# mine\nbrokerName=a\n\nbrokerNam=b\n")
    assert error(p) == f"{p}:4: unknown key 'brokerNam' (did you mean 'brokerName'?)"
    p = write(tmp_path, "broker.conf", "brokerName=a\nbrokerId=one\n")
    assert error(p) == f"{p}:2: brokerId: expected a whole number, got 'one'"
    p = write(tmp_path, "broker.conf", "brokerName=a\nautoCreateTopicEnable=yes\n")
    assert error(p) == f"{p}:2: autoCreateTopicEnable: expected true or false, got 'yes'"
    p = write(tmp_path, "broker.conf", "brokerName=a\nbrokerId=1\\\n\nbrokerName=b\n")
    assert error(p) == f"{p}:4: brokerName is set twice (first on line 1); keep one"
    p = write(tmp_path, "broker.conf", "brokerName=a\n  brokerRole = MASTER\n")
    assert error(p) == f"{p}:2: broker.brokerRole: 'MASTER' is not one of ASYNC_MASTER, SYNC_MASTER, SLAVE"
    p = write(tmp_path, "broker.conf", "brokerName=a\nbrokerRole=SLAVE\n")  # the key at fault is not in the file
    assert error(p) == f"{p}: broker.brokerId: a SLAVE needs a brokerId above 0 (got 0)"
    p = write(tmp_path, "broker.conf", "brokerName=a\nenableDLegerCommitLog=true\ndLegerPeers=n0-x:1\n")
    assert error(p).startswith(f"{p}:2: broker.enableDLegerCommitLog configures DLedger commitlog replication")
    p = write(tmp_path, "broker.conf", "brokerName=a\nkvConfigPath=/x\n")
    assert error(p) == f"{p}:2: kvConfigPath: is a namesrv setting, and this is read as a broker's file (line 1 sets brokerName)"
    p = write(tmp_path, "broker.conf", "brokerName=\\u00zz\n")
    assert error(p) == f"{p}:1: malformed \\uxxxx escape '\\\\u00zz'"


def test_java_internal_keys_are_accepted_and_listed_semantic_ones_refused(tmp_path: Path) -> None:
    p = write(tmp_path, "broker.conf", DIST_BROKER + "sendMessageThreadPoolNums=16\nserverSocketRcvBufSize=65535\n"
              "forceRegister=true\nenableDLegerCommitLog=false\ndLegerSelfId=n0\n")
    cfg = load_config(p)
    assert [i.split()[0] for i in cfg.ignored] == ["broker.sendMessageThreadPoolNums", "broker.serverSocketRcvBufSize",
                                                   "broker.forceRegister", "broker.enableDLegerCommitLog",
                                                   "broker.dLegerSelfId"]
    p = write(tmp_path, "broker.conf", DIST_BROKER + "forceRegister=false\n")
    assert error(p) == f"{p}:8: broker.forceRegister is always true in rmq (the whole topic table is registered every round): remove it"
    # the same in TOML: a key's fate does not depend on the file's format
    cfg = load_config(write(tmp_path, "rmqd.toml", "[broker]\nsendMessageThreadPoolNums = 16\nforceRegister = true\n"))
    assert len(cfg.ignored) == 2 and cfg.broker is not None


def test_overrides_apply_to_a_properties_file_as_to_toml(tmp_path: Path) -> None:
    p = write(tmp_path, "broker.conf", DIST_BROKER)
    cfg = load_config(p, ["broker.listenPort=30911", "broker.brokerRole=SYNC_MASTER", "namesrv.listenPort=9877"])
    assert cfg.broker.listenPort == 30911 and cfg.broker.brokerRole == "SYNC_MASTER" and cfg.roles() == ["namesrv", "broker"]
    # the problem is the override's: no file line is named
    assert error(p, "broker.brokerRole=BOSS") == f"{p}: broker.brokerRole: 'BOSS' is not one of ASYNC_MASTER, SYNC_MASTER, SLAVE"


def test_runtime_changes_are_written_in_the_files_own_format() -> None:
    text = "brokerName = broker-a\nbrokerPermission = 6\n"
    assert edit_text("broker.conf", text, "broker", {"brokerPermission": 4, "traceOn": False}) == (
        "brokerName = broker-a\nbrokerPermission=4\ntraceOn=false\n")
    assert edit_text("rmqd.toml", "[broker]\nbrokerPermission = 6\n", "broker", {"brokerPermission": 4}) == (
        "[broker]\nbrokerPermission = 4\n")


@pytest.mark.parametrize("section", ["broker", "namesrv", "controller"])
def test_each_ignored_key_is_accepted_with_any_value(section: str) -> None:
    from rmq.kernel.config import structure_config

    keys = sorted(IGNORED[section])
    table = {"broker": {}, "namesrv": {}, "controller": {}}[section] | dict.fromkeys(keys, 7)
    cfg = structure_config({section: table}, "rmqd.toml")
    assert sorted(i.split()[0] for i in cfg.ignored) == [f"{section}.{k}" for k in keys]
    for key, value in NOOP[section].items():
        cfg = structure_config({section: {key: value if value not in ("true", "false") else value == "true"}}, "x")
        assert cfg.ignored == [f"{section}.{key} asks for what rmq does anyway"]
