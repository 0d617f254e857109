"""Full disk: writes refused with a clear status, reads served, nothing corrupted, writes resumed,
and a start on a full disk (see ``full_disk_child.py`` for the scenario, checked step by step).

The scenario runs in a child process: if the store ever wrote into a page the filesystem
had not reserved, the kernel would end that process with SIGBUS, and the parent reports
the signal instead of dying with it. On a real filesystem that fills up (an 8 MiB tmpfs
mounted in a private mount namespace: ``unshare``, or root) where the machine allows it,
and always with ENOSPC injected at ``posix_fallocate`` too.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # starts rmqd processes itself (tests/conftest.py: tiers)

SCRIPT = Path(__file__).with_name("full_disk_child.py")
MOUNT = 'mount -t tmpfs -o size=8m tmpfs "$0" && exec "$1" "$2" "$0" tmpfs'


def _namespace_prefix() -> list[str] | None:
    """A command prefix that gives the child its own mount namespace, or None."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    for prefix in ([unshare, "-Urm"], [unshare, "-m"]):
        probe = subprocess.run([*prefix, "sh", "-c", "true"], capture_output=True)
        if probe.returncode == 0:
            return prefix
    return None


def _run(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    if proc.returncode < 0 or proc.returncode > 128:
        sig = -proc.returncode if proc.returncode < 0 else proc.returncode - 128
        raise AssertionError(f"the store process died of {signal.Signals(sig).name}:\n{proc.stderr[-3000:]}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "FULL-DISK-OK" in proc.stdout, proc.stdout
    return proc.stdout


def test_full_disk_on_a_small_filesystem(tmp_path: Path) -> None:
    where = tmp_path / "fs"
    where.mkdir()
    prefix = _namespace_prefix()
    if prefix is None:  # no mount namespace here: the same scenario against an injected ENOSPC
        out = _run([sys.executable, str(SCRIPT), str(where), "inject"])
        assert '"mode": "inject"' in out
        return
    out = _run([*prefix, "sh", "-c", MOUNT, str(where), sys.executable, str(SCRIPT)])
    assert '"mode": "tmpfs"' in out
    assert os.listdir(where) == []  # the tmpfs lived and died with the child's namespace


def test_full_disk_with_injected_enospc(tmp_path: Path) -> None:
    _run([sys.executable, str(SCRIPT), str(tmp_path), "inject"])
