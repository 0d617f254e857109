"""The HA port faces strangers (issue #26, item 6).

With ACL on, only peers that prove themselves are served or counted as slaves: a fake slave
connecting from 127.0.0.2 (not in ``haWhiteRemoteAddresses``) that asks for "offset 0" receives no
commitlog byte, and its acknowledgements never let a SYNC_MASTER send succeed; a white-listed real
slave still replicates. With tls enforcing, a peer is served only with a client certificate the
configured CA signed. Garbage and absurd reports on the HA port leave the master serving.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.plugins.remoting_tcp.tls import client_context
from rmq.plugins.replication.frames import FrameError, TransferDecoder
from rmq.protocol.acl import sign
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.testing.acl import account, acl_file
from rmq.testing.daemon import RmqdProcess, eventually

SEG = 1024 * 1024
ADMIN = ("rocketmq2", "87654321")
ACCOUNTS = acl_file(account(ADMIN, True))


def call(addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    cmd = RemotingCommand.request(code, dict(ext or {}), body)
    sign(cmd.ext, cmd.body, *ADMIN)

    async def go() -> RemotingCommand:
        async with TcpRemotingClient(RemotingConfig(name="ha-sec-test")) as c:
            return await c.invoke(addr, cmd, 10)

    return anyio.run(go)


def send(addr: str, i: int) -> RemotingCommand:
    ext = {"producerGroup": "PG", "topic": "HaSec", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": "WAIT\x01true"}
    return call(addr, RequestCode.SEND_MESSAGE, ext, f"secret-{i}-".encode() * 40)


def runtime(addr: str) -> dict[str, str]:
    r = call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    assert r.code == 0, r.remark
    return json.loads(r.body)["table"]  # type: ignore[no-any-return]


class FakeSlave:
    """A stranger speaking the HA protocol from ``source``: reports offset 0, then acknowledges every frame
    the master sends, reconnecting whenever it is closed. Counts the commitlog bytes it was given."""

    def __init__(self, port: int, source: str = "127.0.0.2") -> None:
        self.port, self.source = port, source
        self.received = 0
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self._session()
            except OSError:
                pass
            self.stop.wait(0.1)

    def _session(self) -> None:
        with socket.socket() as s:
            s.bind((self.source, 0))
            s.settimeout(1)
            s.connect(("127.0.0.1", self.port))
            self.connections += 1
            s.sendall(struct.pack(">q", 0))
            dec = TransferDecoder()
            while not self.stop.is_set():
                try:
                    data = s.recv(1 << 16)
                except TimeoutError:
                    continue
                if not data:
                    return
                self.received += len(data)
                try:
                    for offset, body in dec.feed(data):
                        s.sendall(struct.pack(">q", offset + len(body)))
                except FrameError:
                    return

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def acl_master(rmqd_factory: Any, tmp_path: Path) -> RmqdProcess:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACCOUNTS)
    return rmqd_factory(broker_conf={  # type: ignore[no-any-return]
        "brokerRole": "SYNC_MASTER", "aclEnable": True, "plainAclFile": str(acl), "mappedFileSizeCommitLog": SEG,
        "haWhiteRemoteAddresses": "127.0.0.1", "slaveTimeout": 1500})


def test_a_fake_slave_off_the_white_list_gets_nothing_and_acks_nothing(acl_master: RmqdProcess,
                                                                       rmqd_factory: Any) -> None:
    master = acl_master
    ha_port = master.broker_port + 1
    r = send(master.broker_addr, 0)  # a message the stranger would like to read
    assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE, (r.code, r.remark)
    fake = FakeSlave(ha_port)
    try:
        eventually(lambda: fake.connections >= 3 or fake.received > 0, 20, "the fake slave closed or served")
        for i in range(1, 4):
            r = send(master.broker_addr, i)
            assert r.code in (ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.FLUSH_SLAVE_TIMEOUT), (r.code, r.remark)
        info = runtime(master.broker_addr)
        assert int(info.get("haConnectionCount", 0)) == 0
        assert fake.received == 0, f"a stranger received {fake.received} bytes of the commitlog"
        # a real slave from the white-listed address follows the master; sends are then acknowledged
        slave = rmqd_factory(namesrv=False, broker_conf={
            "namesrvAddr": master.namesrv_addr, "brokerRole": "SLAVE", "brokerId": 1, "mappedFileSizeCommitLog": SEG,
            "haMasterAddress": f"127.0.0.1:{ha_port}"})
        eventually(lambda: int(runtime(master.broker_addr).get("haConnectionCount", 0)) == 1, 30, "slave connected")
        r = send(master.broker_addr, 9)
        assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        master_max = int(runtime(master.broker_addr)["commitLogMaxOffset"])

        def slave_max() -> int:
            async def go() -> RemotingCommand:
                async with TcpRemotingClient(RemotingConfig(name="ha-sec-test")) as c:
                    return await c.invoke(slave.broker_addr, RemotingCommand.request(
                        RequestCode.GET_BROKER_RUNTIME_INFO, {}), 5)

            return int(json.loads(anyio.run(go).body)["table"]["commitLogMaxOffset"])

        eventually(lambda: slave_max() == master_max, 20, "slave caught up")
        assert fake.received == 0
    finally:
        fake.close()
    assert any("HA: refused 127.0.0.2:" in line for line in master.log_lines())


def test_garbage_on_the_ha_port_leaves_the_master_serving(rmqd_factory: Any) -> None:
    """Without ACL or TLS the HA port serves anyone (RocketMQ's behaviour); still, no report a peer sends
    can stop the master: negative, beyond-the-log and truncated reports, a handshake it never asked for,
    random bytes and resets."""
    master = rmqd_factory(broker_conf={"brokerRole": "ASYNC_MASTER", "mappedFileSizeCommitLog": SEG})
    ha_port = master.broker_port + 1

    def plain_send(i: int) -> RemotingCommand:
        ext = {"producerGroup": "PG", "topic": "HaG", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
               "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": "WAIT\x01true"}

        async def go() -> RemotingCommand:
            async with TcpRemotingClient(RemotingConfig(name="ha-sec-test")) as c:
                return await c.invoke(master.broker_addr, RemotingCommand.request(
                    RequestCode.SEND_MESSAGE, ext, b"x" * 100), 5)

        return anyio.run(go)

    assert plain_send(0).code == 0
    hostile = [
        struct.pack(">q", -1),
        struct.pack(">q", 2**63 - 1),
        struct.pack(">q", 1 << 40),
        b"\xff" * 4,
        struct.pack(">ihhq", 1, 0, 0, -5),
        bytes(range(256)) * 64,
        b"GET / HTTP/1.1\r\n\r\n",
    ]
    for data in hostile:
        with socket.create_connection(("127.0.0.1", ha_port), timeout=5) as s:
            try:
                s.sendall(data)
                s.settimeout(3)
                while s.recv(1 << 16):
                    pass
            except (TimeoutError, ConnectionResetError, BrokenPipeError):
                pass
        assert master.proc is not None and master.proc.poll() is None
    for _ in range(50):  # resets
        s = socket.create_connection(("127.0.0.1", ha_port), timeout=5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    t0 = time.monotonic()
    assert plain_send(1).code == 0
    assert time.monotonic() - t0 < 5


def pki(d: Path) -> dict[str, Path]:
    """A CA, a server certificate and a client certificate the CA signed (openssl)."""
    d.mkdir()

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60, cwd=d)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=rmq-test-ca",
        "-keyout", "ca.key", "-out", "ca.pem")
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=rmq-master",
        "-keyout", "s.key", "-out", "s.pem")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=rmq-slave", "-keyout", "c.key", "-out", "c.csr")
    run("x509", "-req", "-in", "c.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-out", "c.pem")
    return {n: d / n for n in ("ca.pem", "s.pem", "s.key", "c.pem", "c.key")}


def test_tls_enforcing_serves_only_peers_with_a_verified_client_certificate(rmqd_factory: Any,
                                                                           tmp_path: Path) -> None:
    k = pki(tmp_path / "pki")
    master_tls = {"enable": True, "server": {"mode": "enforcing", "certPath": str(k["s.pem"]),
                                             "keyPath": str(k["s.key"]), "trustCertPath": str(k["ca.pem"]),
                                             "need": {"client": {"auth": "optional"}}}}
    master = rmqd_factory(broker_conf={"brokerRole": "SYNC_MASTER", "mappedFileSizeCommitLog": SEG,
                                       "slaveTimeout": 1500}, extra={"tls": master_tls})
    ha_port = master.broker_port + 1

    def tls_call(addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
        async def go() -> RemotingCommand:
            async with TcpRemotingClient(RemotingConfig(name="ha-sec-tls", tls_client=client_context())) as c:
                return await c.invoke(addr, RemotingCommand.request(code, dict(ext or {}), body), 10)

        return anyio.run(go)

    ext = {"producerGroup": "PG", "topic": "HaTlsSec", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": "WAIT\x01true"}
    assert tls_call(master.broker_addr, RequestCode.SEND_MESSAGE, ext, b"s" * 300).code == \
        ResponseCode.SLAVE_NOT_AVAILABLE
    # TLS, but no client certificate: closed before any HA frame
    ctx = client_context()
    with socket.create_connection(("127.0.0.1", ha_port), timeout=5) as raw_sock, \
            ctx.wrap_socket(raw_sock) as s:
        s.sendall(struct.pack(">q", 0))
        s.settimeout(5)
        got = b""
        try:
            while chunk := s.recv(1 << 16):
                got += chunk
        except (TimeoutError, OSError):
            pass
        assert got == b"", f"{len(got)} bytes reached a peer without a client certificate"
    # a slave with a certificate the CA signed is served and acknowledges
    slave = rmqd_factory(namesrv=False, broker_conf={
        "namesrvAddr": master.namesrv_addr, "brokerRole": "SLAVE", "brokerId": 1, "mappedFileSizeCommitLog": SEG,
        "haMasterAddress": f"127.0.0.1:{ha_port}"},
        extra={"tls": {"enable": True, "client": {"certPath": str(k["c.pem"]), "keyPath": str(k["c.key"])}}})
    eventually(lambda: int(json.loads(tls_call(master.broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO).body)
                           ["table"].get("haConnectionCount", 0)) == 1, 30, "slave with a certificate connected")
    r = tls_call(master.broker_addr, RequestCode.SEND_MESSAGE, ext, b"t" * 300)
    assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
    assert slave.proc is not None and slave.proc.poll() is None
