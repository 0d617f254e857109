"""Ports (issue #27 item 8): gRPC only with ``[proxy]``, every opened port in the ready line, and a port
that cannot be bound stops ``rmqd`` with one line naming it, its setting and who holds it (exit 2).

Real daemons on loopback; the port a case needs taken is held by a listening socket of this test
process, so the line must name this pid.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rmq.kernel.config import dump_config, load_config
from rmq.kernel.net import port_holder
from rmq.testing.daemon import RmqdProcess, free_port, write_toml


def ready_ports(proc: RmqdProcess) -> dict[str, int]:
    """``name port`` pairs of the ready line's ``ports`` list."""
    line = next(ln for ln in proc.log_lines() if " ready: " in ln)
    listed = re.search(r", ports (.*?)(;|$)", line)
    assert listed, line
    return {name: int(port) for name, port in re.findall(r"(\w+) (\d+)", listed.group(1))}


def loaded(proc: RmqdProcess, library: str) -> bool:
    """Whether the running daemon mapped a shared library whose path contains ``library`` (an imported
    extension module: grpc's ``cygrpc``, PyYAML's ``_yaml``)."""
    assert proc.proc is not None
    return library in Path(f"/proc/{proc.proc.pid}/maps").read_text()


@contextmanager
def held(port: int) -> Iterator[socket.socket]:
    """``port`` taken on 127.0.0.1 by a listening socket of this process."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen(1)
        yield s


def test_rmqd_config_says_whether_grpc_is_on(tmp_path: Path) -> None:
    without = write_toml(tmp_path / "a.toml", {"broker": {"listenPort": 30911}})
    cfg = load_config(without)
    assert cfg.proxy is None
    assert "# no [proxy] table: no gRPC" in dump_config(cfg)
    assert "\n[proxy]\ngrpcServerPort = 8081\n" in dump_config(load_config(None))  # the embedded default keeps it
    with_proxy = write_toml(tmp_path / "b.toml", {"broker": {"listenPort": 30921}, "proxy": {"grpcServerPort": 8091}})
    assert "\n[proxy]\ngrpcServerPort = 8091\n" in dump_config(load_config(with_proxy))
    # --set on a file without the table opens it, as writing the table would
    assert load_config(without, ["proxy.grpcServerPort=8093"]).proxy.grpcServerPort == 8093  # type: ignore[union-attr]


@pytest.mark.grpc
def test_two_brokers_without_proxy_share_a_host_and_one_with_proxy_serves(
    rmqd_factory: Callable[..., RmqdProcess],
) -> None:
    a = rmqd_factory(proxy=False, broker_conf={"brokerName": "broker-a"})
    b = rmqd_factory(namesrv=False, proxy=False, broker_conf={"brokerName": "broker-b", "namesrvAddr": a.namesrv_addr})
    for proc in (a, b):
        ports = ready_ports(proc)
        assert "grpc" not in ports and ports["broker"] == proc.broker_port, ports
        assert proc.proc is not None and proc.proc.poll() is None
        # nor is grpc imported (~80 ms of every start), nor yaml with ACL off (its plugin is selected idle)
        assert not loaded(proc, "/grpc/_cython/cygrpc") and not loaded(proc, "/yaml/_yaml")
    holder = port_holder(8081)
    assert holder is None or holder[0] not in (a.proc.pid, b.proc.pid)  # type: ignore[union-attr]
    c = rmqd_factory(namesrv=False, broker_conf={"brokerName": "broker-c", "namesrvAddr": a.namesrv_addr})
    assert ready_ports(c)["grpc"] == c.grpc_port and loaded(c, "/grpc/_cython/cygrpc")
    with socket.create_connection(("127.0.0.1", c.grpc_port), timeout=5):
        pass


@pytest.mark.grpc
def test_ready_line_lists_every_port_a_role_opened(rmqd_factory: Callable[..., RmqdProcess], tmp_path: Path) -> None:
    ctl, dash, prom = free_port(), free_port(), free_port()
    proc = rmqd_factory(
        broker_conf={"metricsExporterType": "PROM", "metricsPromExporterPort": prom},
        extra={"controller": {"controllerDLegerPeers": f"n0-127.0.0.1:{ctl}", "listenHost": "127.0.0.1",
                              "controllerStorePath": str(tmp_path / "controller")},
               "dashboard": {"listenPort": dash}},
    )
    bp = proc.broker_port
    assert bp is not None
    assert ready_ports(proc) == {
        "namesrv": proc.namesrv_port, "controller": ctl, "raft": ctl + 1, "broker": bp, "vip": bp - 2,
        "ha": bp + 1, "grpc": proc.grpc_port, "dashboard": dash, "metrics": prom,
    }


def _case(kind: str, tmp: Path) -> tuple[RmqdProcess, int, str]:
    """A configured (not started) rmqd whose ``kind`` listener would bind the returned port (set by the key)."""
    broker = kind in ("broker", "vip", "ha", "grpc", "dashboard", "metrics")
    extra: dict[str, Any] = {}
    broker_conf: dict[str, Any] = {}
    if kind in ("controller", "raft"):
        ctl = free_port()
        extra["controller"] = {"controllerDLegerPeers": f"n0-127.0.0.1:{ctl}", "listenHost": "127.0.0.1",
                               "controllerStorePath": str(tmp / "controller")}
    if kind == "dashboard":
        extra["dashboard"] = {"listenPort": free_port()}
    if kind == "metrics":
        broker_conf = {"metricsExporterType": "PROM", "metricsPromExporterPort": free_port()}
    proc = RmqdProcess(tmp, namesrv=kind == "namesrv", broker=broker, broker_conf=broker_conf, extra=extra)
    bp = proc.broker_port or 0
    port, key = {
        "namesrv": (proc.namesrv_port, "namesrv.listenPort"),
        "broker": (bp, "broker.listenPort"),
        "vip": (bp - 2, "broker.listenPort - 2"),
        "ha": (bp + 1, "broker.haListenPort"),
        "grpc": (proc.grpc_port, "proxy.grpcServerPort"),
        "dashboard": (extra.get("dashboard", {}).get("listenPort"), "dashboard.listenPort"),
        "metrics": (broker_conf.get("metricsPromExporterPort"), "broker.metricsPromExporterPort"),
        "controller": (extra.get("controller") and ctl, "controller.controllerDLegerPeers"),
        "raft": (extra.get("controller") and ctl + 1, "controller.raftPortOffset"),
    }[kind]
    assert port
    return proc, int(port), key


@pytest.mark.integration
@pytest.mark.parametrize(
    "kind", ["namesrv", "broker", "vip", "ha", "grpc", "dashboard", "metrics", "controller", "raft"]
)
def test_a_taken_port_stops_rmqd_with_one_line(kind: str, tmp_path: Path) -> None:
    proc, port, key = _case(kind, tmp_path)
    with held(port):
        try:
            run = subprocess.run(proc.command(), cwd=tmp_path, env=proc.env, capture_output=True, text=True,
                                 timeout=30)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"rmqd did not stop although {key} ({port}) is taken:\n{e.stderr!r}")
    lines = run.stderr.splitlines()
    errors = [ln for ln in lines if ln.startswith("rmqd: error:")]
    assert run.returncode == 2, run.stderr
    assert len(errors) == 1, run.stderr
    assert not [ln for ln in lines if "Traceback" in ln or " ERROR " in ln], run.stderr
    line = errors[0]
    assert f"127.0.0.1:{port}:" in line and key in line, line
    assert f"held by pid {os.getpid()} (" in line, line


@pytest.mark.integration
def test_an_address_not_on_this_host_stops_rmqd_with_one_line(tmp_path: Path) -> None:
    proc = RmqdProcess(tmp_path, broker=False, namesrv_conf={"listenHost": "192.0.2.1"})  # TEST-NET-1: not ours
    run = subprocess.run(proc.command(), cwd=tmp_path, env=proc.env, capture_output=True, text=True, timeout=30)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    errors = [ln for ln in run.stderr.splitlines() if ln.startswith("rmqd: error:")]
    assert errors == [f"rmqd: error: namesrv.listenPort: cannot listen on 192.0.2.1:{proc.namesrv_port}: address not "
                      "available on this host (check the listen host)"], run.stderr
