"""No silently ignored settings: every key rmqd's tables accept is read by the code that gives it its
RocketMQ effect, and RocketMQ keys or values rmq cannot honour yet are refused at start with one line
(the RocketMQ keys that only tune Java internals are accepted, ignored and listed: test_rocketmq_keys)."""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest

from rmq.kernel.config import ConfigError, structure_config
from rmq.roles import BrokerConfig, ControllerConfig, NamesrvConfig, ProxyConfig

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p for d in ("plugins", "kernel", "client", "connectors", "protocol") for p in (ROOT / d).rglob("*.py")]
TABLES = list((ROOT / "roles").glob("*.py"))  # where the keys are declared: only their methods' reads count


@pytest.mark.parametrize("cls", [BrokerConfig, NamesrvConfig, ControllerConfig, ProxyConfig], ids=lambda c: c.__name__)
def test_every_accepted_key_is_read_somewhere(cls: type) -> None:
    # the words of the sources once (a word-bounded name occurs iff it is one of them), not a scan per key
    words = set(re.findall(r"\w+", "\n".join(p.read_text() for p in SOURCES)))
    words |= set(re.findall(r"(?:self|b)\.(\w+)", "\n".join(p.read_text() for p in TABLES)))
    unread = [f.name for f in attrs.fields(cls) if f.name not in words]
    assert unread == [], f"{cls.__name__} accepts keys nothing reads: {unread}"


def test_unsupported_rocketmq_keys_and_values_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"rmqd.toml: broker.readOnlyCommitLogStorePaths adds read-only "
                                          r"commitlog directories; rmq has one"):
        structure_config({"broker": {"readOnlyCommitLogStorePaths": "/old/commitlog"}}, "rmqd.toml")
    with pytest.raises(ConfigError, match=r"broker.filterSupportRetry: true is not supported yet"):
        structure_config({"broker": {"filterSupportRetry": True}}, "rmqd.toml")
    assert structure_config({"broker": {"filterSupportRetry": False}}, "rmqd.toml").broker is not None
    with pytest.raises(ConfigError, match=r"broker.timerMaxDelaySec: must be above 0"):
        structure_config({"broker": {"timerMaxDelaySec": 0}}, "rmqd.toml")
