"""TLS settings (RocketMQ's ``tls.*`` properties) and the SSL contexts built from them, shared by the remoting
and HA transports and the client.

RocketMQ reads these as JVM system properties; rmqd reads them from a ``[tls]`` table, with
RocketMQ's names minus the ``tls.`` prefix (TOML dotted keys: ``server.mode = "enforcing"``,
``server.need.client.auth = "require"``). Defaults are RocketMQ's: the servers run
``permissive`` (TLS and plaintext on one port, told apart by the first byte) in test mode (a
throwaway self-signed certificate, made on the first TLS handshake with the ``openssl`` tool,
client certificates not required). With ``server.certPath``/``server.keyPath`` set, that
certificate is used; ``server.trustCertPath`` + ``server.need.client.auth`` verify clients.
``enable`` makes rmqd's own outgoing connections (broker to name server, slave to master)
speak TLS, verifying the server only with ``client.authServer`` (RocketMQ's default: not).
"""

from __future__ import annotations

import logging
import shutil
import ssl
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import attrs

log = logging.getLogger("rmq.tls")

MODES = ("disabled", "permissive", "enforcing")
CLIENT_AUTH = ("none", "optional", "require")

#: RocketMQ property name (without "tls.") -> TlsConfig field
KEYS = {
    "server.mode": "server_mode",
    "test.mode.enable": "test_mode_enable",
    "server.need.client.auth": "server_need_client_auth",
    "server.keyPath": "server_key_path",
    "server.keyPassword": "server_key_password",
    "server.certPath": "server_cert_path",
    "server.authClient": "server_auth_client",
    "server.trustCertPath": "server_trust_cert_path",
    "enable": "enable",
    "client.keyPath": "client_key_path",
    "client.keyPassword": "client_key_password",
    "client.certPath": "client_cert_path",
    "client.authServer": "client_auth_server",
    "client.trustCertPath": "client_trust_cert_path",
}


class TlsConfigError(ValueError):
    pass


@attrs.define
class TlsConfig:
    server_mode: str = "permissive"
    test_mode_enable: bool = True
    server_need_client_auth: str = "none"
    server_key_path: str = ""
    server_key_password: str = ""
    server_cert_path: str = ""
    server_auth_client: bool = False
    server_trust_cert_path: str = ""
    enable: bool = False
    client_key_path: str = ""
    client_key_password: str = ""
    client_cert_path: str = ""
    client_auth_server: bool = False
    client_trust_cert_path: str = ""


def _flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in doc.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def structure_tls(doc: Any) -> TlsConfig:
    """The ``[tls]`` table (nested by TOML's dotted keys) as a TlsConfig; TlsConfigError names the key."""
    if not isinstance(doc, dict):
        raise TlsConfigError("expected a table")
    values: dict[str, Any] = {}
    for key, value in _flatten(doc).items():
        field = KEYS.get(key)
        if field is None:
            raise TlsConfigError(f"unknown key {key!r}; known: {', '.join(KEYS)}")
        want = attrs.fields_dict(TlsConfig)[field].type
        if want in (bool, "bool"):
            if not isinstance(value, bool):
                raise TlsConfigError(f"{key}: expected true or false, got {value!r}")
        elif not isinstance(value, str):
            raise TlsConfigError(f"{key}: expected a string, got {value!r}")
        values[field] = value
    cfg = TlsConfig(**values)
    cfg.server_mode = cfg.server_mode.strip().lower()
    if cfg.server_mode not in MODES:
        raise TlsConfigError(f"server.mode: {cfg.server_mode!r} is not one of {', '.join(MODES)}")
    cfg.server_need_client_auth = cfg.server_need_client_auth.strip().lower()
    if cfg.server_need_client_auth not in CLIENT_AUTH:
        raise TlsConfigError(f"server.need.client.auth: expected one of {', '.join(CLIENT_AUTH)}")
    if bool(cfg.server_cert_path) != bool(cfg.server_key_path):
        raise TlsConfigError("server.certPath and server.keyPath go together")
    for key in ("server_cert_path", "server_key_path", "server_trust_cert_path", "client_cert_path",
                "client_key_path", "client_trust_cert_path"):
        path = getattr(cfg, key)
        if path and not Path(path).expanduser().is_file():
            name = next(k for k, f in KEYS.items() if f == key)
            raise TlsConfigError(f"{name}: {path} is not a readable file")
    return cfg


def _load_chain(ctx: ssl.SSLContext, cert: str, key: str, password: str, what: str) -> None:
    try:
        ctx.load_cert_chain(str(Path(cert).expanduser()), str(Path(key).expanduser()), password or None)
    except (OSError, ssl.SSLError) as e:
        raise TlsConfigError(f"{what}: cannot load certificate {cert} / key {key}: {e}") from None


def server_context(cfg: TlsConfig) -> ssl.SSLContext | None:
    """The servers' context; None in test mode without openssl (TLS clients are then refused)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if cfg.server_cert_path:
        _load_chain(ctx, cfg.server_cert_path, cfg.server_key_path, cfg.server_key_password, "tls.server")
    elif cfg.test_mode_enable:
        pair = self_signed()
        if pair is None:
            return None
        ctx.load_cert_chain(*pair)
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


def client_context(*, verify: bool = False, ca: str = "", cert: str = "", key: str = "",
                   password: str = "") -> ssl.SSLContext:
    """A client context: RocketMQ's default trusts any server (``client.authServer`` false)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if verify:
        if ca:
            ctx.load_verify_locations(str(Path(ca).expanduser()))
        else:
            ctx.load_default_certs()
        ctx.check_hostname = False  # brokers are addressed by IP in routes
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert:
        _load_chain(ctx, cert, key, password, "tls.client")
    return ctx


def client_context_for(cfg: TlsConfig) -> ssl.SSLContext:
    return client_context(verify=cfg.client_auth_server, ca=cfg.client_trust_cert_path, cert=cfg.client_cert_path,
                          key=cfg.client_key_path, password=cfg.client_key_password)


_self_signed: tuple[str, str] | None = None
_self_signed_lock = threading.Lock()


def self_signed() -> tuple[str, str] | None:
    """(cert, key) paths of a throwaway self-signed certificate, made once per process with openssl."""
    global _self_signed
    with _self_signed_lock:
        if _self_signed is not None:
            return _self_signed
        tool = shutil.which("openssl")
        if tool is None:
            log.error("TLS test mode needs the openssl tool to make a self-signed certificate; "
                      "set tls.server.certPath/keyPath (TLS clients are refused meanwhile)")
            return None
        d = Path(tempfile.mkdtemp(prefix="rmq-tls-"))
        cert, key = d / "selfsigned.crt", d / "selfsigned.key"
        try:
            subprocess.run([tool, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650", "-subj",
                            "/CN=rmq-test-mode", "-keyout", str(key), "-out", str(cert)],
                           check=True, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as e:
            log.error("cannot make a self-signed certificate with openssl: %s", e)
            return None
        key.chmod(0o600)
        log.warning("TLS test mode: serving a throwaway self-signed certificate (%s); set tls.server.certPath "
                    "and tls.server.keyPath for a real one", cert)
        _self_signed = (str(cert), str(key))
        return _self_signed


class ServerTls:
    """What a server needs per accepted socket: the mode, and the context (built on first use)."""

    def __init__(self, cfg: TlsConfig) -> None:
        self.cfg = cfg
        self.mode = cfg.server_mode
        self._ctx: ssl.SSLContext | None = None
        self._built = False
        self._lock = threading.Lock()
        if cfg.server_cert_path and self.mode != "disabled":
            self._ctx = server_context(cfg)  # a bad certificate refuses start-up, not the first client
            self._built = True

    def context(self) -> ssl.SSLContext | None:
        """Blocking the first time in test mode (openssl): call it from a worker thread."""
        with self._lock:
            if not self._built:
                try:
                    self._ctx = server_context(self.cfg)
                except TlsConfigError as e:
                    log.error("TLS: %s", e)
                    self._ctx = None
                self._built = True
            return self._ctx
