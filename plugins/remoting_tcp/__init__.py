"""The bundled ``tcp`` remoting plugin: a thin anyio layer around the sans-IO codec in ``rmq.protocol``.

Entry point: ``rmq.remoting: tcp = rmq.plugins.remoting_tcp:TcpRemotingPlugin``.
Its TOML table (``[plugin.remoting.tcp]``) accepts ``max_frame_size`` and
``idle_timeout``; they override the role's ``RemotingConfig`` defaults.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from rmq.kernel import ConfigError, hookimpl, structure_options
from rmq.plugins.remoting_tcp.client import TcpRemotingClient
from rmq.plugins.remoting_tcp.connection import TcpConnection
from rmq.plugins.remoting_tcp.server import TcpRemotingServer
from rmq.plugins.remoting_tcp.tls import ServerTls, check_files, context_for
from rmq.protocol.command import (
    RemotingClosedError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
)
from rmq.protocol.tls import ClientTls, TlsConfigError, structure_tls

if TYPE_CHECKING:
    from rmq.kernel import RemotingConfig, RequestHandler

__all__ = [
    "RemotingClosedError",
    "RemotingConnectError",
    "RemotingError",
    "RemotingTimeoutError",
    "TcpConnection",
    "TcpOptions",
    "TcpRemotingClient",
    "TcpRemotingPlugin",
    "TcpRemotingServer",
]


@attrs.define(frozen=True)
class TcpOptions:
    """The plugin's own TOML table; unset keys keep the role's RemotingConfig values."""

    max_frame_size: int | None = attrs.field(default=None)
    idle_timeout: float | None = attrs.field(default=None)

    @max_frame_size.validator
    def _check_frame(self, _a: Any, v: int | None) -> None:
        if v is not None and (not isinstance(v, int) or v < 64):
            raise ValueError(f"max_frame_size must be an integer >= 64, got {v!r}")

    @idle_timeout.validator
    def _check_idle(self, _a: Any, v: float | None) -> None:
        if v is not None and (not isinstance(v, (int, float)) or v < 0):
            raise ValueError(f"idle_timeout must be a number of seconds >= 0, got {v!r}")



class TcpRemotingPlugin:
    """Builds TCP servers and clients; ``trylast`` so any third-party transport wins."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options: TcpOptions = structure_options(TcpOptions, options)
        self._tls_built: ServerTls | None = None

    def _apply(self, config: RemotingConfig) -> RemotingConfig:
        changes: dict[str, Any] = {}
        if self.options.max_frame_size is not None:
            changes["max_frame_size"] = self.options.max_frame_size
        if self.options.idle_timeout is not None:
            changes["idle_timeout"] = float(self.options.idle_timeout)
        return attrs.evolve(config, **changes) if changes else config

    def _tls(self, kernel: Any) -> ServerTls | None:
        """The daemon's ``[tls]`` table, checked once (a bad one refuses start-up with one line)."""
        root = getattr(kernel, "config", None)
        doc = getattr(root, "tls", None)
        if doc is None:
            return None
        if self._tls_built is None:
            try:
                cfg = structure_tls(doc)
                check_files(cfg)
                self._tls_built = ServerTls(cfg)
            except TlsConfigError as e:
                raise ConfigError(f"{root.source}: tls: {e}") from None
        return self._tls_built

    @hookimpl(trylast=True)
    def rmq_remoting_tls(self, kernel: Any) -> ServerTls | None:
        return self._tls(kernel)

    @hookimpl(trylast=True)
    def rmq_remoting_make_server(
        self, kernel: Any, config: RemotingConfig, handler: RequestHandler
    ) -> TcpRemotingServer:
        config = self._apply(config)
        tls = self._tls(kernel)
        if tls is not None and config.tls_server is None and tls.mode != "disabled":
            config = attrs.evolve(config, tls_server=tls)
        return TcpRemotingServer(config, handler)

    @hookimpl(trylast=True)
    def rmq_remoting_make_client(
        self, kernel: Any, config: RemotingConfig, handler: RequestHandler | None
    ) -> TcpRemotingClient:
        config = self._apply(config)
        tls = self._tls(kernel)
        if isinstance(config.tls_client, ClientTls):  # settings (rmq.client): the transport makes the context
            config = attrs.evolve(config, tls_client=context_for(config.tls_client))
        elif config.tls_client is None and tls is not None and tls.config.enable:  # rmqd's own outgoing connections
            config = attrs.evolve(config, tls_client=tls.client_context())
        return TcpRemotingClient(config, handler, kernel=kernel)
