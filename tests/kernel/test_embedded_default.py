"""`rmqd` with no config is the protected default: both roles bound to 127.0.0.1 only, and it says so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmq.testing.daemon import free_port

pytestmark = pytest.mark.integration  # starts rmqd processes itself (tests/conftest.py: tiers)


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the sockets listening on ``port`` (from /proc: no traffic needed)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            addr, _, hexport = local.partition(":")
            if state == "0A" and int(hexport, 16) == port and len(addr) == width:
                found.add(addr)
    return found


def test_embedded_default_listens_on_loopback_only_and_says_so(tmp_path: Path) -> None:
    ns_port, broker_port = free_port(), free_port()
    env = {**os.environ, "RMQ_HOME": str(tmp_path / "store")}
    cmd = [sys.executable, "-m", "rmq.kernel.daemon", "--set", f"namesrv.listenPort={ns_port}",
           "--set", f"broker.listenPort={broker_port}", "--set", f"proxy.grpcServerPort={free_port()}",
           "--set", f"dashboard.listenPort={free_port()}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 30
        for line in proc.stderr:
            lines.append(line)
            if " ready: " in line or time.monotonic() > deadline:
                break
        ready = [ln for ln in lines if " ready: " in ln]
        assert ready, "".join(lines)
        assert "embedded default: listening on 127.0.0.1 only" in ready[0]
        for port in (ns_port, broker_port):
            assert listening_addresses(port) == {"0100007F"}, (port, listening_addresses(port))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    assert proc.returncode == 0
