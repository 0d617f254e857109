"""TLS on the remoting ports against real rmqd processes: permissive (TLS and plaintext on one port,
RocketMQ's default, with a test-mode self-signed certificate), enforcing (plaintext refused), a
configured certificate verified by the client, client certificates required, disabled (a TLS
hello refused), and rmqd's own broker-to-name-server connection over TLS. The tests' PKI is made at
run time with openssl; rmqd's own test-mode certificate needs no tool."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rmq.client import Message, Producer, PullConsumer, PullStatus
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.plugins.remoting_tcp.tls import client_context
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand, RemotingError
from rmq.testing.daemon import RmqdProcess

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA, a server certificate and a client certificate it signed."""
    d = tmp_path_factory.mktemp("pki")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=rmq-test-ca",
        "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))
    for who in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN=rmq-{who}", "-keyout", str(d / f"{who}.key"),
            "-out", str(d / f"{who}.csr"))
        run("x509", "-req", "-in", str(d / f"{who}.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
            "-CAcreateserial", "-days", "2", "-out", str(d / f"{who}.crt"))
    return {k: str(d / f"{k.replace('_', '.')}") for k in ("ca_crt", "server_crt", "server_key", "client_crt",
                                                           "client_key")}


async def ping(addr: str, ctx: ssl.SSLContext | None) -> RemotingCommand:
    async with TcpRemotingClient(RemotingConfig(name="tls-test", tls_client=ctx)) as c:
        return await c.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}), 5)


async def round_trip(ns: str, topic: str, **tls: Any) -> None:
    async with Producer("PG_TLS", ns, **tls) as p:
        assert (await p.send(Message(topic, b"over tls"))).ok
    async with PullConsumer("CG_TLS", ns, **tls) as pc:
        mq = (await pc.fetch_queues(topic))[0]
        found = []
        for q in await pc.fetch_queues(topic):
            r = await pc.pull(q, 0, 8)
            if r.status is PullStatus.FOUND:
                found += [m.body for m in r.messages]
        assert found == [b"over tls"], mq


async def test_permissive_default_serves_tls_and_plaintext_on_one_port(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    assert (await ping(proc.broker_addr, None)).code == 0
    assert (await ping(proc.broker_addr, client_context())).code == 0  # test mode: a self-signed certificate
    await round_trip(proc.namesrv_addr, "TlsP", tls=True)


async def test_enforcing_with_a_configured_certificate(rmqd_factory: Any, pki: dict[str, str]) -> None:
    proc: RmqdProcess = rmqd_factory(extra={"tls": {"enable": True, "server": {  # enable: the broker's own
        "mode": "enforcing", "certPath": pki["server_crt"], "keyPath": pki["server_key"]}}})  # registration
    with pytest.raises((RemotingError, OSError)):
        await ping(proc.broker_addr, None)  # plaintext refused
    assert (await ping(proc.broker_addr, client_context(verify=True, ca=pki["ca_crt"]))).code == 0
    with pytest.raises((RemotingError, OSError, ssl.SSLError)):  # a client that trusts another CA
        await ping(proc.broker_addr, client_context(verify=True, ca=pki["client_crt"]))
    assert any("plaintext connection from" in ln and "refused" in ln for ln in proc.log_lines())
    await round_trip(proc.namesrv_addr, "TlsE", tls=True, tls_verify=True, tls_ca=pki["ca_crt"])


async def test_client_certificates_required(rmqd_factory: Any, pki: dict[str, str]) -> None:
    proc: RmqdProcess = rmqd_factory(extra={"tls": {"server": {
        "mode": "enforcing", "certPath": pki["server_crt"], "keyPath": pki["server_key"],
        "trustCertPath": pki["ca_crt"], "need": {"client": {"auth": "require"}}}}})
    with pytest.raises((RemotingError, OSError, ssl.SSLError)):
        await ping(proc.broker_addr, client_context())
    ok = client_context(cert=pki["client_crt"], key=pki["client_key"])
    assert (await ping(proc.broker_addr, ok)).code == 0


async def test_disabled_refuses_tls_and_broker_registers_over_tls(rmqd_factory: Any, tmp_path: Path,
                                                                 pki: dict[str, str]) -> None:
    off: RmqdProcess = rmqd_factory(extra={"tls": {"server": {"mode": "disabled"}}})
    assert (await ping(off.broker_addr, None)).code == 0
    with pytest.raises((RemotingError, OSError, ssl.SSLError)):
        await ping(off.broker_addr, client_context())
    # a name server that takes TLS only; the broker (tls.enable) registers with it over TLS
    ns = RmqdProcess(tmp_path / "ns", broker=False, extra={"tls": {"server": {
        "mode": "enforcing", "certPath": pki["server_crt"], "keyPath": pki["server_key"]}}}).start()
    try:
        b = RmqdProcess(tmp_path / "b", namesrv=False, broker_conf={"namesrvAddr": ns.namesrv_addr},
                        extra={"tls": {"enable": True}}).start()
        try:
            await round_trip(ns.namesrv_addr, "TlsR", tls=True)
        finally:
            b.stop()
    finally:
        ns.stop()


@pytest.mark.integration
async def test_test_mode_certificate_needs_no_openssl_tool(tmp_path: Path) -> None:
    """The permissive default's throwaway certificate is made in-process: an rmqd with no ``openssl`` on
    its PATH still answers a TLS client, and leaves no key file in its temporary directory."""
    empty, tmp = tmp_path / "bin", tmp_path / "tmp"
    empty.mkdir()
    tmp.mkdir()
    proc = RmqdProcess(tmp_path / "d", env={"PATH": str(empty), "TMPDIR": str(tmp)}).start()
    try:
        assert (await ping(proc.broker_addr, client_context())).code == 0
        await ping(proc.namesrv_addr, client_context())  # an answer over TLS (the code is the broker's)
        assert list(tmp.iterdir()) == []
    finally:
        proc.stop()
    assert sum("serving a throwaway self-signed certificate" in ln for ln in proc.log_lines()) == 1


def test_the_transport_hands_its_tls_to_other_listeners() -> None:
    """``rmq_remoting_tls``: the HA port and the gRPC endpoint get the transport's contexts and the same
    test-mode certificate, as PEM for grpcio."""
    from cryptography import x509

    from rmq.plugins.remoting_tcp import TcpRemotingPlugin
    from rmq.testing import make_kernel

    kernel = make_kernel([TcpRemotingPlugin()], {"broker": {}, "tls": {"enable": True}})
    tls = kernel.hook.rmq_remoting_tls(kernel=kernel)
    assert tls is kernel.hook.rmq_remoting_tls(kernel=kernel) and tls.mode == "permissive" and tls.config.enable
    assert isinstance(tls.context(), ssl.SSLContext) and isinstance(tls.client_context(), ssl.SSLContext)
    pem = tls.pem()
    assert pem is not None and pem[2] is None
    cert = x509.load_pem_x509_certificate(pem[0])
    assert cert.subject.rfc4514_string() == "CN=rmq-test-mode"
    assert pem == tls.pem()  # made once per process


@pytest.mark.integration
def test_bad_tls_settings_refuse_start(tmp_path: Path) -> None:
    p = RmqdProcess(tmp_path / "x", extra={"tls": {"server": {"mode": "strict"}}})
    with pytest.raises(RuntimeError, match="did not start"):
        p.start(timeout=20)
    assert any("tls: server.mode: 'strict' is not one of" in ln for ln in p.log_lines())
    q = RmqdProcess(tmp_path / "y", extra={"tls": {"server": {"certPath": str(tmp_path / "none.crt"),
                                                              "keyPath": str(tmp_path / "none.key")}}})
    with pytest.raises(RuntimeError, match="did not start"):
        q.start(timeout=20)
    assert any("none.crt is not a readable file" in ln for ln in q.log_lines())


async def test_garbage_after_a_tls_first_byte_costs_that_connection_only(rmqd_factory: Any) -> None:
    import anyio

    proc: RmqdProcess = rmqd_factory()
    host, port = proc.broker_addr.split(":")
    for junk in (b"\x16", b"\x16\x03\x01\x00\x05hello", b"\x16" + bytes(range(256)) * 8):
        async with await anyio.connect_tcp(host, int(port)) as s:
            await s.send(junk)
            with anyio.move_on_after(5):
                try:
                    while await s.receive():
                        pass
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    pass
    assert (await ping(proc.broker_addr, None)).code == 0
    assert (await ping(proc.broker_addr, client_context())).code == 0
