"""TLS settings (RocketMQ's ``tls.*`` properties), shared by the remoting and HA transports, the gRPC
endpoint and the client; the SSL contexts and certificates built from them are the transport's
(``rmq.plugins.remoting_tcp.tls``): this module reads no file.

RocketMQ reads these as JVM system properties; rmqd reads them from a ``[tls]`` table, with
RocketMQ's names minus the ``tls.`` prefix (TOML dotted keys: ``server.mode = "enforcing"``,
``server.need.client.auth = "require"``). Defaults are RocketMQ's: the servers run
``permissive`` (TLS and plaintext on one port, told apart by the first byte) in test mode (a
throwaway self-signed certificate, made in-process on the first TLS handshake, client
certificates not required). With ``server.certPath``/``server.keyPath`` set, that certificate
is used; ``server.trustCertPath`` + ``server.need.client.auth`` verify clients. ``enable``
makes rmqd's own outgoing connections (broker to name server, slave to master) speak TLS,
verifying the server only with ``client.authServer`` (RocketMQ's default: not).
"""

from __future__ import annotations

from typing import Any

import attrs

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
    return cfg


#: the TlsConfig fields that name files (the transport checks they can be read, at start-up)
PATHS = ("server_cert_path", "server_key_path", "server_trust_cert_path", "client_cert_path", "client_key_path",
         "client_trust_cert_path")


def key_of(field: str) -> str:
    """The ``[tls]`` key of a TlsConfig field, for messages."""
    return next(k for k, f in KEYS.items() if f == field)


@attrs.frozen
class ClientTls:
    """How one client connects with TLS (what ``RemotingConfig.tls_client`` may carry instead of a ready
    context): ``verify`` the server against ``ca`` (the system's CAs when empty), and present ``cert``
    and ``key`` (``password`` for the key) when set. RocketMQ's default trusts any server."""

    verify: bool = False
    ca: str = ""
    cert: str = ""
    key: str = ""
    password: str = ""


def client_tls_for(cfg: TlsConfig) -> ClientTls:
    """rmqd's own outgoing connections (``enable``), as the ``client.*`` keys say."""
    return ClientTls(cfg.client_auth_server, cfg.client_trust_cert_path, cfg.client_cert_path, cfg.client_key_path,
                     cfg.client_key_password)
