"""``rmqd config`` prints every table with its effective values, defaults included (the roles', the declared
plugin tables', every selected plugin's options, ``[tls]``, ``[log]``), and what it prints loads back to the
same configuration."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from rmq.kernel.config import load_config
from rmq.protocol.tls import structure_tls

pytestmark = pytest.mark.integration  # runs `rmqd config` in a process of its own (tests/conftest.py: tiers)


def rmqd_config(cwd: Path, *args: str) -> str:
    res = subprocess.run([sys.executable, "-m", "rmq.kernel.daemon", "config", *args], cwd=cwd,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def tables_of(text: str) -> dict[str, list[str]]:
    """The printed lines under each ``[table]`` header (comments included)."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("["):
            current = line.strip("[]")
            out[current] = []
        elif line.strip() and current:
            out[current].append(line)
    return out


def assert_round_trip(text: str, original: Path | None, tmp_path: Path) -> None:
    """The printed TOML loads to the configuration it was printed from, and prints the same again."""
    tomllib.loads(text)
    printed = tmp_path / "printed.toml"
    printed.write_text(text)
    before, after = load_config(original), load_config(printed)
    assert after.tables == before.tables and after.selected() == before.selected() and after.log == before.log
    assert structure_tls(after.tls) == structure_tls(before.tls)
    assert rmqd_config(tmp_path, "-c", str(printed)).split("\n", 1)[1] == text.split("\n", 1)[1]


def test_embedded_default_prints_every_table_with_its_defaults(tmp_path: Path) -> None:
    text = rmqd_config(tmp_path)
    t = tables_of(text)
    assert "listenPort = 8080" in t["dashboard"] and 'listenHost = "127.0.0.1"' in t["dashboard"]
    assert "maxHeaderBytes = 16384" in t["dashboard"]
    assert t["proxy"] == ["grpcServerPort = 8081"]
    assert "listenPort = 9876" in t["namesrv"] and 'brokerRole = "ASYNC_MASTER"' in t["broker"]
    assert "mappedFileSizeCommitLog = 67108864" in t["broker"]  # the embedded default's laptop size
    assert "defaultInvisibleTimeMills = 60000" in t["plugin.processors.grpc"]
    assert "max_auto_created_topics = 10000" in t["plugin.processors.broker"]
    assert "virtual_nodes = 10" in t["plugin.allocation.consistent_hash"]
    assert "preallocate = true" in t["plugin.storage.mmap"]
    assert 'server.mode = "permissive"' in t["tls"] and "enable = false" in t["tls"]
    assert t["log"] == ['level = "INFO"']
    assert "# no [controller] table" in text
    assert_round_trip(text, None, tmp_path)


def test_a_file_with_a_dashboard_table_prints_the_defaults_it_left_out(tmp_path: Path) -> None:
    src = tmp_path / "rmqd.toml"
    src.write_text('[namesrv]\nenableControllerInNamesrv = true\n[broker]\nlistenPort = 30911\n'
                   '[dashboard]\nlistenHost = "::1"\n[plugin.processors.grpc]\nmaxRenewRetryTimes = 5\n'
                   '[tls]\nserver.mode = "disabled"\n')
    text = rmqd_config(tmp_path, "-c", str(src))
    t = tables_of(text)
    assert "listenPort = 8080" in t["dashboard"] and 'listenHost = "::1"' in t["dashboard"]
    assert "keepAliveTimeout = 5.0" in t["dashboard"]
    assert "maxRenewRetryTimes = 5" in t["plugin.processors.grpc"]
    assert "renewAheadTimeMillis = 10000" in t["plugin.processors.grpc"]
    assert 'controllerDLegerPeers = "n0-127.0.0.1:9878"' in t["controller"]  # the namesrv turned it on
    assert "mappedFileSizeCommitLog = 1073741824" in t["broker"] and "listenPort = 30911" in t["broker"]
    assert 'server.mode = "disabled"' in t["tls"]
    assert "# no [proxy] table: no gRPC" in text and "proxy" not in t
    assert_round_trip(text, src, tmp_path)
