"""Every RocketMQ key (4.9.8's BrokerConfig, MessageStoreConfig, NettyServerConfig, NettyClientConfig,
NamesrvConfig; 5.3.3's additions and ControllerConfig) is honoured or refused at start with one line saying
why (``protocol/rocketmq_keys.py``): never silently ignored, never the generic "unknown key"."""

from __future__ import annotations

import attrs
import pytest

from rmq.kernel.config import ConfigError, load_config, section_class, structure_config
from rmq.protocol.rocketmq_keys import ALIASES, REFUSED, honoured

ROLES = ("broker", "namesrv", "controller")
CASES = [(s, k) for s in ROLES for k in sorted(REFUSED[s])]


@pytest.mark.parametrize(("section", "key"), CASES, ids=[f"{s}.{k}" for s, k in CASES])
def test_each_refused_key_stops_the_start_with_its_one_line(section: str, key: str) -> None:
    assert key not in {f.name for f in attrs.fields(section_class(section))}, f"{key} is a field now: drop its refusal"
    with pytest.raises(ConfigError) as e:
        structure_config({section: {key: 1}}, "rmqd.toml")
    assert str(e.value) == f"rmqd.toml: {section}.{key} {REFUSED[section][key]}"
    assert "\n" not in str(e.value) and "unknown key" not in str(e.value)


@pytest.mark.parametrize("section", ROLES)
def test_each_honoured_key_is_accepted_with_its_meaning(section: str) -> None:
    cls = section_class(section)
    defaults = {f.name: f.default for f in attrs.fields(cls)}
    for key in honoured(section):
        field = ALIASES[section].get(key, key)
        assert field in defaults, f"{section}.{key} is listed as honoured but {cls.__name__} has no {field}"
        value = defaults[field]
        if type(value) is int and field not in ("brokerId", "listenPort", "haListenPort", "brokerPermission"):
            value += 1  # a value of its own, to see it land in the field
        cfg = structure_config({section: {key: value}}, "rmqd.toml")
        assert getattr(getattr(cfg, section), field) == value, key


def test_4_9_names_are_aliases_of_one_field() -> None:
    cfg = structure_config({"broker": {"haSlaveFallbehindMax": 1024, "slaveTimeout": 700}}, "rmqd.toml")
    assert cfg.broker is not None and cfg.broker.haMaxGapNotInSync == 1024 and cfg.broker.slaveTimeout == 700
    assert structure_config({"broker": {}}, "x").broker.slaveTimeout == 3000  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match=r"^rmqd.toml: broker.haSlaveFallbehindMax and broker.haMaxGapNotInSync "
                                          r"are one setting; keep one$"):
        structure_config({"broker": {"haSlaveFallbehindMax": 1024, "haMaxGapNotInSync": 2048}}, "rmqd.toml")
    cfg = load_config(None, ["broker.haSlaveFallbehindMax=4096", "broker.serverLoadBalancerEnable=false"])
    assert cfg.broker is not None and cfg.broker.haMaxGapNotInSync == 4096
    assert cfg.broker.serverLoadBalancerEnabled is False
    with pytest.raises(ConfigError, match=r"broker.haSlaveFallbehindMax: must be above 0|haMaxGapNotInSync: must"):
        structure_config({"broker": {"haSlaveFallbehindMax": 0}}, "rmqd.toml")


def test_a_key_rocketmq_does_not_know_is_still_unknown() -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'broker.slaveTimout' \(did you mean 'slaveTimeout'\?\)"):
        structure_config({"broker": {"slaveTimout": 1}}, "rmqd.toml")
