"""The source-address shim (rmq.testing.bindshim) on plain sockets in a child Python: a TCP connection
to 127.0.0.0/8 leaves from $RMQ_BIND_ADDR (AF_INET, and AF_INET6 v4-mapped as a JVM's sockets are); a
socket the program bound itself, a UDP socket and a process without the variable are left alone."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rmq.testing.bindshim import ENV, build, shim_env
from rmq.testing.nemesis import node_addrs

pytestmark = pytest.mark.integration

PROBE = """
import json, socket, sys
host, port, mine = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = {}
s = socket.create_connection((host, port)); out["v4"] = s.getsockname()[0]
s6 = socket.socket(socket.AF_INET6); s6.connect(("::ffff:" + host, port)); out["v6"] = s6.getsockname()[0]
b = socket.socket(); b.bind((mine, 0)); b.connect((host, port)); out["bound"] = b.getsockname()[0]
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect((host, port)); out["udp"] = u.getsockname()[0]
print(json.dumps(out))
"""


def _probe(env: dict[str, str], host: str, port: int, mine: str) -> dict[str, str]:
    r = subprocess.run([sys.executable, "-c", PROBE, host, str(port), mine], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_shim_binds_loopback_tcp_connects_only() -> None:
    server_host, client_host, own_host = node_addrs(3)
    with socket.create_server((server_host, 0), backlog=16) as srv:
        port = srv.getsockname()[1]
        got = _probe(shim_env(client_host), server_host, port, own_host)
        assert got == {"v4": client_host, "v6": f"::ffff:{client_host}", "bound": own_host, "udp": "127.0.0.1"}
        plain = {k: v for k, v in shim_env(client_host).items() if k != ENV}  # preloaded, no address
        assert _probe(plain, server_host, port, own_host)["v4"] == "127.0.0.1"


def test_no_compiler_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RMQ_TEST_CACHE", str(tmp_path / "cache"))  # nothing built there yet
    monkeypatch.setenv("CC", "no-such-cc")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RuntimeError, match="needs a C compiler .* apt-get install gcc"):
        build()
