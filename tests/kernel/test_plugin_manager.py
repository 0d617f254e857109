"""Fail closed: every way a plugin can be wrong stops start-up with one precise line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rmq.kernel import hookimpl
from rmq.kernel.config import load_config
from rmq.kernel.kernel import Kernel
from rmq.kernel.plugin_manager import PluginError, load_plugin
from rmq.testing import make_kernel


def test_unknown_name_lists_the_available_ones() -> None:
    with pytest.raises(PluginError) as info:
        load_plugin("storage", "mmapp", {})
    msg = str(info.value)
    assert "unknown plugin 'mmapp' in namespace rmq.storage; available:" in msg
    assert "mmap" in msg and "memory" in msg and "counting" in msg


def test_import_failure_names_the_entry_point_and_the_exception() -> None:
    with pytest.raises(PluginError) as info:
        load_plugin("extensions", "broken", {})
    msg = str(info.value)
    assert "rmq.extensions:broken (rmq_fake_plugin.broken:Plugin) failed to load" in msg
    assert "ImportError" in msg


def test_options_rejected_by_the_plugin_are_reported() -> None:
    with pytest.raises(PluginError, match=r"rmq.dispatch:audit .* rejected its options: unknown options \['bogus'\]"):
        load_plugin("dispatch", "audit", {"bogus": 1})


def test_async_hookimpl_is_refused() -> None:
    with pytest.raises(PluginError, match="hook rmq_configure is 'async def'"):
        Kernel.from_config(load_config(None, ["plugins.extensions=async_hook"]))


def test_hookimpl_matching_no_spec_is_refused() -> None:
    with pytest.raises(PluginError, match="rmq_storage_make_stor"):
        Kernel.from_config(load_config(None, ["plugins.extensions=misspelled"]))


def test_inline_plugins_get_the_same_checks() -> None:
    class Typo:
        @hookimpl
        def rmq_lifespann(self, kernel: object) -> None:
            pass

    class WrongArg:
        @hookimpl
        def rmq_configure(self, kernel: object, extra: object) -> None:
            pass

    with pytest.raises(PluginError, match="rmq_lifespann"):
        make_kernel([Typo()])
    with pytest.raises(PluginError, match="extra"):
        make_kernel([WrongArg()])


@pytest.mark.parametrize("ns", ["remoting", "processors", "storage", "flush"])
def test_required_concern_left_empty_is_refused(ns: str) -> None:
    with pytest.raises(PluginError, match=f"namespace rmq.{ns} is empty but required"):
        Kernel.from_config(load_config(None, [f"plugins.{ns}=[]"]))


def run_rmqd(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rmq.kernel.daemon", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--set", "plugins.storage=nosuch"], "unknown plugin 'nosuch' in namespace rmq.storage; available:"),
        (["--set", "plugins.extensions=broken"], "failed to load"),
        (["--set", "plugins.extensions=async_hook"], "is 'async def'"),
        (["--set", "broker.listenPrt=1"], "unknown key 'broker.listenPrt' (did you mean 'listenPort'?)"),
        (["--set", "plugins.remoting=[]"], "namespace rmq.remoting is empty"),
    ],
)
def test_rmqd_refuses_to_start_with_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    res = run_rmqd(*args, cwd=tmp_path)
    assert res.returncode == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("rmqd: error: ") and expected in lines[0]


@pytest.mark.integration
def test_rmqd_plugins_lists_every_namespace_with_distributions(tmp_path: Path) -> None:
    res = run_rmqd("plugins", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for ns in ("storage", "dispatch", "allocation", "filters", "flush", "replication", "remoting", "processors",
               "extensions"):
        assert f"rmq.{ns}:" in out
    assert "* mmap" in out and "[rmq 0.1.0]" in out
    assert "fake_reverse" in out and "[rmq-fake-plugin 0.0.1]" in out
    assert "broken" in out and "LOAD FAILED" in out


@pytest.mark.integration
def test_rmqd_config_prints_effective_toml(tmp_path: Path) -> None:
    res = run_rmqd("config", "--set", "broker.brokerName=b-9", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert 'brokerName = "b-9"' in res.stdout and "listenPort = 9876" in res.stdout
