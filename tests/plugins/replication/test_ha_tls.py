"""HA over TLS: with tls server.mode enforcing every port of the master takes TLS only, the HA port
included, and a slave with tls.enable follows it over TLS; a plaintext HA peer is refused."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path
from typing import Any

import anyio

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.plugins.remoting_tcp.tls import client_context
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.testing.daemon import RmqdProcess, eventually

from .conftest import SEG, send_ext


def tls_call(addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    async def go() -> RemotingCommand:
        async with TcpRemotingClient(RemotingConfig(name="ha-tls", tls_client=client_context())) as c:
            return await c.invoke(addr, RemotingCommand.request(code, ext or {}, body), 5)

    return anyio.run(go)


def max_offset(p: RmqdProcess) -> int:
    r = tls_call(p.broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    return int(json.loads(r.body)["table"]["commitLogMaxOffset"])


def test_slave_follows_a_tls_only_master(rmqd_factory: Any, tmp_path: Path) -> None:
    d = tmp_path / "pki"
    d.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=rmq-ha",
                    "-keyout", str(d / "k.pem"), "-out", str(d / "c.pem")], check=True, capture_output=True, timeout=60)
    tls = {"enable": True, "server": {"mode": "enforcing", "certPath": str(d / "c.pem"), "keyPath": str(d / "k.pem")}}
    ns = rmqd_factory(broker=False, extra={"tls": tls})
    base = {"namesrvAddr": ns.namesrv_addr, "mappedFileSizeCommitLog": SEG, "registerNameServerPeriod": 2000}
    # the slave has no client certificate: its address proves it (tls enforcing guards the HA port)
    master = rmqd_factory(namesrv=False, broker_conf={**base, "brokerRole": "SYNC_MASTER",
                                                      "haWhiteRemoteAddresses": "127.0.0.1"}, extra={"tls": tls})
    slave = rmqd_factory(namesrv=False, broker_conf={**base, "brokerRole": "SLAVE", "brokerId": 1},
                         extra={"tls": tls})
    eventually(lambda: int(json.loads(tls_call(master.broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO).body)
                           ["table"].get("haConnectionCount", 0)) == 1, 30, "slave connected over TLS")
    for i in range(20):
        r = tls_call(master.broker_addr, RequestCode.SEND_MESSAGE, send_ext("HaTls"), f"m{i}".encode() * 50)
        assert r.code == 0, r.remark  # SYNC_MASTER: acknowledged once the slave holds it
    eventually(lambda: max_offset(slave) == max_offset(master) > 0, 20, "slave caught up")
    # a plaintext peer on the HA port gets nothing: the TLS listener drops it
    ha_port = master.broker_port + 1
    with socket.create_connection(("127.0.0.1", ha_port), timeout=5) as s:
        s.sendall((0).to_bytes(8, "big"))
        s.settimeout(5)
        try:
            data = s.recv(64)
        except (TimeoutError, OSError):
            data = b""
        assert not data.startswith(b"\x00" * 8)  # no HA frame ever reaches a plaintext peer
