"""The controller's Raft port faces strangers (issue #26, item 1).

pysyncobj unpickles what its peers send; these tests play the stranger with its exact framing
(a native-endian int length, then zlib(pickle)) against a real rmqd controller and prove that
nothing a stranger sends is loaded, that the listener binds the configured host, that a
claimed frame length is bounded, and that the shared secret is generated, kept 0600 and
reused, and required when peers are off loopback.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import stat
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from rmq.kernel.config import ConfigError, structure_config
from rmq.protocol.codes import RequestCode
from rmq.testing.daemon import RmqdProcess, call, eventually, free_port, write_toml

pytestmark = pytest.mark.integration  # starts rmqd processes itself (tests/conftest.py: tiers)


class MakeDir:
    """Unpickling this calls ``os.mkdir(path)``: the proof that a peer's bytes were loaded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.mkdir, (self.path,)


def frame(payload: bytes) -> bytes:
    return struct.pack("i", len(payload)) + payload



def controller(tmp_path: Path, **conf: Any) -> tuple[RmqdProcess, int]:
    """One controller node on loopback (not started); its controller port."""
    port = free_port()
    doc = {"controllerDLegerPeers": f"n0-127.0.0.1:{port}", "controllerDLegerSelfId": "n0",
           "listenHost": "127.0.0.1", "controllerStorePath": str(tmp_path / "ctl"), **conf}
    return RmqdProcess(tmp_path / "c0", namesrv=False, broker=False, extra={"controller": doc}), port


def wait_leader(addr: str) -> None:
    eventually(lambda: call(addr, RequestCode.CONTROLLER_GET_METADATA_INFO).ext.get("isLeader") == "true",
               30, "controller leader")


def elect(addr: str) -> None:
    """A broker set registers and elects its first master: every step commits through Raft."""
    base = {"clusterName": "C", "brokerName": "b"}
    r = call(addr, RequestCode.CONTROLLER_APPLY_BROKER_ID, {**base, "appliedBrokerId": 1,
                                                            "registerCheckCode": "127.0.0.1:1;x"})
    assert r.code == 0, r.remark
    call(addr, RequestCode.BROKER_HEARTBEAT, {**base, "brokerAddr": "127.0.0.1:1", "brokerId": 1,
                                              "heartbeatTimeoutMills": 60_000})
    r = call(addr, RequestCode.CONTROLLER_REGISTER_BROKER, {**base, "brokerId": 1, "brokerAddress": "127.0.0.1:1"})
    assert r.code == 0, r.remark
    r = call(addr, RequestCode.CONTROLLER_ELECT_MASTER, {**base, "brokerId": 1})
    assert r.code == 0 and r.ext["masterBrokerId"] == "1", (r.code, r.remark)


def closed_by_peer(sock: socket.socket, timeout: float = 10) -> bool:
    """True once the server closed ``sock`` (EOF or reset) within ``timeout``; False if it still holds it."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_strangers_pickle_is_never_loaded_and_the_controller_still_commits(tmp_path: Path) -> None:
    proc, port = controller(tmp_path)
    marker = tmp_path / "pwned"
    forged = tmp_path / "pwned-forged"
    with proc:
        wait_leader(f"127.0.0.1:{port}")
        # a stranger who speaks pysyncobj's framing but has no secret
        with socket.create_connection(("127.0.0.1", port + 1)) as s:
            s.sendall(frame(zlib.compress(pickle.dumps(MakeDir(str(marker))))))
            closed = closed_by_peer(s)
        assert not marker.exists(), "rmqd unpickled a stranger's frame"
        assert closed
        # one who also wraps it in a Fernet token, under a key of its own
        token = Fernet(Fernet.generate_key()).encrypt(zlib.compress(pickle.dumps(MakeDir(str(forged)))))
        with socket.create_connection(("127.0.0.1", port + 1)) as s:
            s.sendall(frame(token))
            closed = closed_by_peer(s)
        assert not forged.exists()
        assert closed
        elect(f"127.0.0.1:{port}")
        assert proc.proc is not None and proc.proc.poll() is None
    assert not marker.exists() and not forged.exists()


def listening_hosts(port: int) -> set[str]:
    """Local addresses of the sockets listening on ``port`` (IPv4 and IPv6), from /proc/net."""
    out: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            host_hex, _, port_hex = local.partition(":")
            if state != "0A" or int(port_hex, 16) != port:
                continue
            raw = bytes.fromhex(host_hex)
            if len(raw) == 4:
                out.add(socket.inet_ntop(socket.AF_INET, raw[::-1]))
            else:
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                out.add(socket.inet_ntop(socket.AF_INET6, words))
    return out


def test_raft_listener_binds_the_controllers_listen_host(tmp_path: Path) -> None:
    proc, port = controller(tmp_path)
    with proc:
        wait_leader(f"127.0.0.1:{port}")
        assert listening_hosts(port + 1) == {"127.0.0.1"}
        assert listening_hosts(port) == {"127.0.0.1"}


def test_oversized_or_negative_claimed_frame_closes_the_connection(tmp_path: Path) -> None:
    proc, port = controller(tmp_path)
    with proc:
        wait_leader(f"127.0.0.1:{port}")
        assert proc.proc is not None
        before = rss(proc.proc.pid)
        sent = 0
        closed = False
        with socket.create_connection(("127.0.0.1", port + 1)) as s:
            s.settimeout(10)
            try:
                s.sendall(struct.pack("i", 1 << 30))  # claims 1 GiB
                chunk = b"\0" * (1 << 20)
                while sent < 16 << 20:
                    s.sendall(chunk)
                    sent += len(chunk)
            except (ConnectionResetError, BrokenPipeError):
                closed = True
            closed = closed or closed_by_peer(s)
        assert closed, "a frame claiming 1 GiB was waited for"
        grew = rss(proc.proc.pid) - before
        assert grew < 8 << 20, f"rmqd grew by {grew} bytes after a stranger's 1 GiB claim"
        with socket.create_connection(("127.0.0.1", port + 1)) as s:
            s.sendall(struct.pack("i", -5) + b"x" * 64)
            assert closed_by_peer(s)
        elect(f"127.0.0.1:{port}")


def test_generated_secret_is_0600_and_reused_across_restart(tmp_path: Path) -> None:
    proc, port = controller(tmp_path)
    secret = tmp_path / "ctl" / "raft.secret"
    with proc:
        wait_leader(f"127.0.0.1:{port}")
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        first = secret.read_text()
        assert len(first.strip()) >= 32
        elect(f"127.0.0.1:{port}")
    with proc:
        wait_leader(f"127.0.0.1:{port}")
        assert secret.read_text() == first
        r = call(f"127.0.0.1:{port}", RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=b'["b"]')
        assert json.loads(r.body)["replicasInfoTable"]["b"]["masterBrokerId"] == 1


def test_peers_off_loopback_need_a_raft_password(tmp_path: Path) -> None:
    # 192.0.2.0/24 is reserved for documentation: nothing here sends a packet to it (the config is refused
    # before any role starts, and the "config" command starts none)
    peers = "n0-127.0.0.1:19878;n1-192.0.2.10:19878"
    doc = {"controller": {"controllerDLegerPeers": peers, "controllerDLegerSelfId": "n0"}}
    with pytest.raises(ConfigError, match=r"controller\.raftPassword: required"):
        structure_config(doc)
    structure_config({"controller": {**doc["controller"], "raftPassword": "s3cret-shared-by-the-group"}})
    path = write_toml(tmp_path / "rmqd.toml", doc)
    r = subprocess.run([sys.executable, "-m", "rmq.kernel.daemon", "--config", str(path), "config"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout[-500:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "controller.raftPassword" in lines[0], r.stderr


def test_a_stranger_holding_connections_open_does_not_stop_the_peers(tmp_path: Path) -> None:
    """Idle unauthenticated connections are closed after the connection timeout, and at most a few are held."""
    proc, port = controller(tmp_path)
    with proc:
        wait_leader(f"127.0.0.1:{port}")
        socks = [socket.create_connection(("127.0.0.1", port + 1)) for _ in range(64)]
        try:
            t0 = time.monotonic()
            assert all(closed_by_peer(s, timeout=20) for s in socks)
            assert time.monotonic() - t0 < 20
        finally:
            for s in socks:
                s.close()
        elect(f"127.0.0.1:{port}")
