"""RocketMQ 4.9.8 judges rmqd's reading of its config files: java.util.Properties parses the same texts
(``PropsDump``), and the config objects BrokerStartup / NamesrvStartup fill (``ConfDump``: BrokerConfig,
MessageStoreConfig, NettyServerConfig, NettyClientConfig; NamesrvConfig) hold the values rmqd's tables
hold — for the defaults and for a file that sets every key rmq honours. Every key those classes take
is honoured, ignored or refused by rmq, never "unknown"."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from rmq.kernel.config import load_config
from rmq.protocol.javaprops import PropertiesError, parse
from rmq.protocol.rocketmq_keys import ALIASES, IGNORED, REFUSED, honoured
from rmq.testing.java import compile_java, java_command

pytestmark = pytest.mark.java

SRC = Path(__file__).parent / "conf_src"
#: defaults that differ on purpose: RocketMQ derives them from the host, the user or the environment
HOST_DEFAULTS = {
    "brokerName": "Java: the host name; rmq: broker-a",
    "brokerIP1": "Java: this host's first address; rmq: '' = that address, found at start",
    "brokerIP2": "Java: this host's first address; rmq: '' = brokerIP1",
    "namesrvAddr": "Java: $NAMESRV_ADDR (null); rmq: '' = the name server in the same process, else $NAMESRV_ADDR",
    "storePathRootDir": "Java: ~/store; rmq: '' = $RMQ_HOME, else ./rmq-store",
    "storePathCommitLog": "Java: ~/store/commitlog; rmq: '' = <storePathRootDir>/commitlog",
    "haListenPort": "Java: 10912, reset to listenPort + 1 at start; rmq: 0 = listenPort + 1",
    "haMasterAddress": "Java: null; rmq: '' (both: learned from the name server)",
    "kvConfigPath": "Java: ~/namesrv/kvConfig.json; rmq: '' = <store root>/namesrv/kvConfig.json",
}


@pytest.fixture(scope="module")
def classes(java_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_java(sorted(SRC.glob("*.java")), tmp_path_factory.mktemp("confjava"), java_home)


def run(classes: Path, scratch: Path, main: str, *args: str) -> str:
    p = subprocess.run(java_command(main, *args, extra_cp=classes, scratch=scratch), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def java_objects(classes: Path, scratch: Path, role: str, conf: Path | None = None) -> dict[str, str]:
    """key -> value (Java's toString) of every setter key of the role's config objects."""
    out: dict[str, str] = {}
    for line in run(classes, scratch, "ConfDump", role, *([str(conf)] if conf else [])).splitlines():
        _, kv = line.split(" ", 1)
        key, _, value = kv.partition("=")
        out.setdefault(key, value)  # writeBufferLowWaterMark is in both Netty configs, with one value
    return out


def text_of(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def test_javas_properties_parser_reads_every_text_as_rmqd_does(classes: Path, tmp_path: Path) -> None:
    """600 adversarial texts (separators, escapes, continuations, comments, every line break, Latin-1)."""
    rng = random.Random(4_9_8)
    atoms = [*"ab=: \t\f\\#!\r\nué", "\\u0041", "\\u00e9", "\\uD83D\\uDE00", "\\u12", "\\\n", "\\\r\n", "\r\n",
             "\n#", "\n!", "\n  ", "key", "value"]
    files = []
    for i in range(600):
        f = tmp_path / f"t{i}.properties"
        f.write_bytes("".join(rng.choice(atoms) for _ in range(rng.randint(0, 40))).encode("latin-1"))
        files.append(f)
    java: dict[str, dict[str, str] | None] = {}
    current = ""
    for line in run(classes, tmp_path, "PropsDump", *map(str, files)).splitlines():
        if line.startswith("FILE "):
            current = line[5:]
            java[current] = {}
        elif line == "ERR":
            java[current] = None
        else:
            _, k, v = line.split(" ")
            units = [bytes.fromhex(x) for x in (k, v)]
            entry = java[current]
            assert entry is not None
            entry[units[0].decode("utf-16-be", "surrogatepass")] = units[1].decode("utf-16-be", "surrogatepass")
    assert len(java) == len(files)
    for f in files:
        try:
            ours: dict[str, str] | None = {e.key: e.value for e in parse(f.read_bytes().decode("latin-1"))}
        except PropertiesError:
            ours = None
        assert ours == java[str(f)], f"{f}: {f.read_bytes()!r}"


@pytest.mark.parametrize("role", ["broker", "namesrv"])
def test_every_key_rocketmq_reads_is_honoured_ignored_or_refused(classes: Path, tmp_path: Path, role: str) -> None:
    java = java_objects(classes, tmp_path, role)
    assert len(java) > (150 if role == "broker" else 15)
    known = set(honoured(role)) | set(IGNORED[role]) | set(REFUSED[role])
    assert sorted(set(java) - known) == []


@pytest.mark.parametrize("role", ["broker", "namesrv"])
def test_rmqd_defaults_are_rocketmqs(classes: Path, tmp_path: Path, role: str) -> None:
    java = java_objects(classes, tmp_path, role)
    conf = tmp_path / f"{role}.conf"
    conf.write_text("")
    table = getattr(load_config(conf), role)
    differ = {key: (java[key], text_of(getattr(table, ALIASES[role].get(key, key))))
              for key in honoured(role) if key in java}
    differ = {k: v for k, v in differ.items() if v[0] != v[1]}
    assert sorted(differ) == sorted(k for k in HOST_DEFAULTS if k in java and k in differ)
    assert set(differ) <= set(HOST_DEFAULTS), differ


def _value_for(key: str, java_default: str) -> str:
    """A value other than the default that both brokers accept at start."""
    special = {"brokerRole": "SYNC_MASTER", "flushDiskType": "SYNC_FLUSH", "brokerId": "0", "deleteWhen": "03",
               "messageDelayLevel": "1s 2s 3m", "namesrvAddr": "127.0.0.1:19876;127.0.0.1:19877",
               "brokerIP1": "10.1.2.3", "brokerIP2": "10.1.2.4", "haMasterAddress": "10.1.2.5:10912",
               "controllerAddr": "127.0.0.1:9878", "brokerPermission": "4", "regionId": "Region-x",
               "msgTraceTopicName": "MY_TRACE", "storePathRootDir": "/data/rmq", "storePathCommitLog": "/data/cl",
               "kvConfigPath": "/data/kv.json", "bindAddress": "127.0.0.1",
               "filterSupportRetry": "false",  # true is refused at start: not supported yet
               "mappedFileSizeConsumeQueue": "6000040"}  # Java reads it rounded up to 20-byte units (as rmq's store)
    if key in special:
        return special[key]
    if java_default in ("true", "false"):
        return "false" if java_default == "true" else "true"
    if java_default.lstrip("-").isdigit():
        return str(int(java_default) + 7)
    try:
        return repr(float(java_default) / 2)
    except ValueError:
        return f"v-{key}"


@pytest.mark.parametrize("role", ["broker", "namesrv"])
def test_a_file_setting_every_honoured_key_means_the_same_to_both(classes: Path, tmp_path: Path, role: str) -> None:
    defaults = java_objects(classes, tmp_path, role)
    keys = [k for k in honoured(role) if k in defaults]
    values = {k: _value_for(k, defaults[k]) for k in keys}
    conf = tmp_path / f"{role}-all.conf"
    conf.write_text("# every key rmq honours, none at its default\n"
                    + "".join(f"{k} = {v}\n" for k, v in values.items()))
    java = java_objects(classes, tmp_path, role, conf)
    table = getattr(load_config(conf), role)
    for key in keys:
        assert java[key] == values[key], f"Java did not take {key}={values[key]} (a bad test value)"
        ours = getattr(table, ALIASES[role].get(key, key))
        assert (ours == float(java[key])) if isinstance(ours, float) else text_of(ours) == java[key], (key, ours)
