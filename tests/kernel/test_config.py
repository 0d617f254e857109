"""Config: RocketMQ's names and defaults, strict TOML, one-line errors naming file/key/expectation."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from rmq.kernel.config import ConfigError, dump_config, load_config


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "rmqd.toml"
    p.write_text(text)
    return p


def test_embedded_default_runs_both_roles_with_rocketmq_defaults() -> None:
    cfg = load_config()
    assert cfg.roles() == ["namesrv", "broker"]
    assert cfg.namesrv is not None and cfg.broker is not None
    assert cfg.namesrv.listenPort == 9876
    b = cfg.broker
    assert (b.listenPort, b.brokerName, b.brokerClusterName, b.brokerId) == (10911, "broker-a", "DefaultCluster", 0)
    assert (b.flushDiskType, b.brokerRole, b.autoCreateTopicEnable) == ("ASYNC_FLUSH", "ASYNC_MASTER", True)
    assert (b.fileReservedTime, b.deleteWhen, b.maxMessageSize) == (72, "04", 4 * 1024 * 1024)
    assert b.mappedFileSizeConsumeQueue == 6_000_000
    # the embedded default is loopback-only and sized for a laptop; a config file gets RocketMQ's sizes
    assert (cfg.namesrv.listenHost, b.listenHost, b.brokerIP1) == ("127.0.0.1",) * 3
    assert b.mappedFileSizeCommitLog == 64 << 20 and b.maxIndexNum == 2_000_000
    assert not b.allowRemoteAdmin and not cfg.namesrv.allowRemoteAdmin
    assert b.delay_levels_ms()[:3] == [1000, 5000, 10000] and len(b.delay_levels_ms()) == 18
    sel = cfg.selected()
    assert sel["storage"] == ["mmap"] and sel["flush"] == ["async"] and sel["remoting"] == ["tcp"]
    assert sel["processors"][:2] == ["namesrv", "broker"]


def test_a_config_file_gets_rocketmq_sizes_and_binds_every_interface(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "[namesrv]\n[broker]\n"))
    b = cfg.broker
    assert b.mappedFileSizeCommitLog == 1 << 30 and b.maxHashSlotNum == 5_000_000 and b.maxIndexNum == 20_000_000
    assert (cfg.namesrv.listenHost, b.listenHost, b.brokerIP1) == ("0.0.0.0", "0.0.0.0", "")


def test_store_root_defaults_to_rmq_home_then_cwd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("RMQ_HOME", raising=False)
    assert str(load_config().broker.store_root()) == "rmq-store"
    monkeypatch.setenv("RMQ_HOME", str(tmp_path))
    assert load_config().broker.store_root() == tmp_path
    assert load_config().broker.commitlog_dir() == tmp_path / "commitlog"


def test_section_presence_enables_roles(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "[namesrv]\n")).roles() == ["namesrv"]
    cfg = load_config(write(tmp_path, '[broker]\nflushDiskType = "SYNC_FLUSH"\n'))
    assert cfg.roles() == ["broker"] and cfg.selected()["flush"] == ["sync"]
    assert "namesrv" not in cfg.selected()["processors"]


def test_plugins_table_accepts_name_or_list_and_keeps_plugin_tables_opaque(tmp_path: Path) -> None:
    cfg = load_config(
        write(
            tmp_path,
            '[broker]\n[plugins]\nstorage = "memory"\ndispatch = ["audit"]\n'
            '[plugin.dispatch.audit]\nfile = "x.log"\nnested = { a = 1 }\n',
        )
    )
    assert cfg.selected()["storage"] == ["memory"] and cfg.selected()["dispatch"] == ["audit"]
    assert cfg.plugin_options("dispatch", "audit") == {"file": "x.log", "nested": {"a": 1}}
    assert cfg.plugin_options("dispatch", "other") == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[broker]\nlistenPrt = 1\n", "rmqd.toml:2: unknown key 'broker.listenPrt' (did you mean 'listenPort'?)"),
        ('[broker]\nlistenPort = "10911"\n', "rmqd.toml:2: broker.listenPort: expected int, got str '10911'"),
        ("[broker]\nautoCreateTopicEnable = 1\n", "broker.autoCreateTopicEnable: expected bool, got int 1"),
        ("[broker\n", "rmqd.toml: invalid TOML: Expected ']' at the end of a table declaration (at line 1"),
        ("[broker]\n[plugins]\nstorge = 'mmap'\n", "unknown plugin namespace 'storge' (did you mean 'storage'?)"),
        ("[broker]\n[plugins]\nstorage = 3\n", "plugins: storage: expected a plugin name or a list of names"),
        ("[log]\nlevel = 'INFO'\n", "no role enabled: add a [namesrv], [controller] and/or [broker] section"),
        ("rolez = 1\n[broker]\n", "rmqd.toml: unknown key 'rolez'"),
        ("[broker]\n[plugin.storgae.mmap]\n", "plugin.storgae: unknown plugin namespace (did you mean 'storage'?)"),
    ],
)
def test_bad_config_is_one_precise_line(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text))
    msg = str(info.value)
    assert expected in msg
    assert "\n" not in msg
    assert str(tmp_path) in msg  # names the file


def test_missing_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.toml: cannot read"):
        load_config(tmp_path / "nope.toml")


def test_set_overrides_are_typed_by_field(tmp_path: Path) -> None:
    cfg = load_config(
        None,
        ["broker.listenPort=10999", "broker.autoCreateTopicEnable=false", "broker.brokerName=b1",
         "plugins.storage=memory", "broker.diskSpaceCleanForciblyRatio=0.5"],
    )
    assert cfg.broker.listenPort == 10999 and cfg.broker.autoCreateTopicEnable is False
    assert cfg.broker.brokerName == "b1" and cfg.selected()["storage"] == ["memory"]
    assert cfg.broker.diskSpaceCleanForciblyRatio == 0.5
    with pytest.raises(ConfigError, match=r"--set broker.listenPort=x: expected int"):
        load_config(None, ["broker.listenPort=x"])
    with pytest.raises(ConfigError, match=r"unknown key 'broker.brokerNam' \(did you mean 'brokerName'\?\)"):
        load_config(None, ["broker.brokerNam=x"])
    with pytest.raises(ConfigError, match="expected section.key=value"):
        load_config(None, ["broker.listenPort"])
    cfg = load_config(None, ["proxy.grpcServerPort=0", 'tls.server.mode="disabled"'])
    assert cfg.proxy.grpcServerPort == 0 and cfg.tls == {"server": {"mode": "disabled"}}
    with pytest.raises(ConfigError, match="unknown section 'nope'; sections: namesrv, controller, broker, dashboard, "
                                          "proxy, tls, plugins, plugin, log$"):
        load_config(None, ["nope.x=1"])


def test_dump_config_is_toml_that_loads_back_to_the_same_config(tmp_path: Path) -> None:
    cfg = load_config(None, ["broker.listenPort=10999", "plugins.dispatch=audit"])
    text = dump_config(cfg)
    tomllib.loads(text)  # valid TOML
    again = load_config(write(tmp_path, text))
    assert again.broker == cfg.broker and again.namesrv == cfg.namesrv
    assert again.selected() == cfg.selected()


def test_controller_role_from_its_section_or_inside_the_namesrv() -> None:
    from rmq.kernel.config import structure_config

    cfg = structure_config({"namesrv": {"enableControllerInNamesrv": True}})
    assert cfg.roles() == ["namesrv", "controller"] and cfg.controller is not None
    assert cfg.controller.peers() == {"n0": "127.0.0.1:9878"}
    cfg = structure_config({"controller": {"controllerDLegerPeers": "n0-h:1;n1-h:2", "controllerDLegerSelfId": "n1",
                                           "raftPassword": "s3cret"}})
    assert cfg.roles() == ["controller"] and cfg.controller is not None and cfg.controller.peers()["n1"] == "h:2"
    with pytest.raises(ConfigError, match="controllerDLegerSelfId: 'n7' is not among the peers"):
        structure_config({"controller": {"controllerDLegerSelfId": "n7"}})
    with pytest.raises(ConfigError, match="is not id-host:port"):
        structure_config({"controller": {"controllerDLegerPeers": "n0:9878"}})
    with pytest.raises(ConfigError, match="controllerAddr"):
        structure_config({"broker": {"enableControllerMode": True}})
