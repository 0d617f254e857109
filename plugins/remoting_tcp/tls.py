"""The SSL contexts and certificates behind rmqd's TLS (the settings are ``rmq.protocol.tls``).

The transport reads the certificate files, builds the contexts and, in test mode, makes the
throwaway self-signed certificate: in-process with ``cryptography`` (an RSA 2048 key, ten
years, CN ``rmq-test-mode``), once per process, kept in memory. ``ssl`` loads a certificate
chain from files only, so a context gets it through a private temporary directory that is gone
once it is loaded. The other listeners that speak TLS (the HA port, the gRPC endpoint) get the
same :class:`ServerTls` through the ``rmq_remoting_tls`` hook.
"""

from __future__ import annotations

import datetime
import logging
import os
import ssl
import tempfile
import threading
from pathlib import Path

from rmq.protocol.tls import PATHS, ClientTls, TlsConfig, TlsConfigError, client_tls_for, key_of

log = logging.getLogger("rmq.tls")

__all__ = ["ServerTls", "check_files", "client_context", "context_for", "self_signed_pem"]


def check_files(cfg: TlsConfig) -> None:
    """TlsConfigError naming the key of a configured certificate, key or CA file that cannot be read
    (at start-up, rather than at the first handshake)."""
    for field in PATHS:
        path = getattr(cfg, field)
        if path and not Path(path).expanduser().is_file():
            raise TlsConfigError(f"{key_of(field)}: {path} is not a readable file")


def _load_chain(ctx: ssl.SSLContext, cert: str, key: str, password: str, what: str) -> None:
    try:
        ctx.load_cert_chain(str(Path(cert).expanduser()), str(Path(key).expanduser()), password or None)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"{what}: cannot load certificate {cert} / key {key}: {e}") from None


def client_context(*, verify: bool = False, ca: str = "", cert: str = "", key: str = "",
                   password: str = "") -> ssl.SSLContext:
    """A client context: RocketMQ's default trusts any server (``client.authServer`` false)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False  # brokers are addressed by IP in routes
    if verify:
        if ca:
            ctx.load_verify_locations(str(Path(ca).expanduser()))
        else:
            ctx.load_default_certs()
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if cert:
        _load_chain(ctx, cert, key, password, "tls.client")
    return ctx


def context_for(tls: ClientTls) -> ssl.SSLContext:
    """The context ``RemotingConfig.tls_client`` settings describe."""
    return client_context(verify=tls.verify, ca=tls.ca, cert=tls.cert, key=tls.key, password=tls.password)


def self_signed_pem(common_name: str = "rmq-test-mode") -> tuple[bytes, bytes]:
    """(certificate, unencrypted PKCS#8 key) PEM of a fresh self-signed certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))  # peers whose clocks lag a little
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


_test_pair: tuple[bytes, bytes] | None = None
_test_pair_lock = threading.Lock()


def throwaway_pem() -> tuple[bytes, bytes] | None:
    """This process's throwaway test-mode certificate and key (PEM), made on first use; None if it
    cannot be made (logged: TLS clients are refused meanwhile)."""
    global _test_pair
    with _test_pair_lock:
        if _test_pair is None:
            try:
                _test_pair = self_signed_pem()
            except Exception as e:  # a broken cryptography install must not end the listener
                log.error("TLS test mode: cannot make a self-signed certificate (%s); set tls.server.certPath "
                          "and tls.server.keyPath (TLS clients are refused meanwhile)", e)
                return None
            log.warning("TLS test mode: serving a throwaway self-signed certificate; set tls.server.certPath "
                        "and tls.server.keyPath for a real one")
        return _test_pair


def _load_pem_chain(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="rmq-tls-") as d:  # mode 0700, removed with the key in it
        cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        for path, data in ((cert, cert_pem), (key, key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(fd, "wb") as f:
                f.write(data)
        ctx.load_cert_chain(cert, key)


def server_context(cfg: TlsConfig) -> ssl.SSLContext | None:
    """The servers' context; None in test mode when no certificate could be made (TLS clients are then
    refused). TlsConfigError for a certificate that cannot be loaded."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if cfg.server_cert_path:
        _load_chain(ctx, cfg.server_cert_path, cfg.server_key_path, cfg.server_key_password, "tls.server")
    elif cfg.test_mode_enable:
        pair = throwaway_pem()
        if pair is None:
            return None
        _load_pem_chain(ctx, *pair)
    else:
        raise TlsConfigError("server.certPath/server.keyPath are needed when test.mode.enable is false")
    auth = cfg.server_need_client_auth
    if auth != "none":
        if cfg.server_trust_cert_path:
            ctx.load_verify_locations(str(Path(cfg.server_trust_cert_path).expanduser()))
        elif not cfg.test_mode_enable:
            raise TlsConfigError("server.need.client.auth needs server.trustCertPath")
        ctx.verify_mode = ssl.CERT_REQUIRED if auth == "require" else ssl.CERT_OPTIONAL
    return ctx


class ServerTls:
    """The daemon's ``[tls]`` as every transport uses it (what ``rmq_remoting_tls`` returns and
    ``RemotingConfig.tls_server`` carries): ``mode``, the server ``context()`` (built on first use),
    ``client_context()`` for rmqd's own connections, ``pem()`` for servers that take bytes."""

    def __init__(self, cfg: TlsConfig) -> None:
        self.config = cfg
        self.mode = cfg.server_mode
        self._ctx: ssl.SSLContext | None = None
        self._built = False
        self._lock = threading.Lock()
        if cfg.server_cert_path and self.mode != "disabled":
            self._ctx = server_context(cfg)  # a bad certificate refuses start-up, not the first client
            self._built = True

    def context(self) -> ssl.SSLContext | None:
        """Blocking the first time in test mode (a certificate is made): call it from a worker thread."""
        with self._lock:
            if not self._built:
                try:
                    self._ctx = server_context(self.config)
                except TlsConfigError as e:
                    log.error("TLS: %s", e)
                    self._ctx = None
                self._built = True
            return self._ctx

    def client_context(self) -> ssl.SSLContext:
        return context_for(client_tls_for(self.config))

    def pem(self) -> tuple[bytes, bytes, bytes | None] | None:
        """(certificate chain, key, trusted client CAs or None) PEM: the configured files', else test
        mode's certificate; None when neither can be had. Blocking (files, or making the certificate)."""
        cfg = self.config
        roots = Path(cfg.server_trust_cert_path).expanduser().read_bytes() if cfg.server_trust_cert_path else None
        if cfg.server_cert_path:
            chain = Path(cfg.server_cert_path).expanduser().read_bytes()
            return chain, Path(cfg.server_key_path).expanduser().read_bytes(), roots
        pair = throwaway_pem() if cfg.test_mode_enable else None
        return None if pair is None else (*pair, roots)
