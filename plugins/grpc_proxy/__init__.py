"""The bundled ``grpc`` processors plugin: RocketMQ 5's gRPC endpoint (apache.rocketmq.v2 MessagingService)
in the broker, as the 5.x proxy's "local" mode, so the official 5.x SDKs connect unmodified.

Entry point ``rmq.processors: grpc``; selected for every broker. It listens on ``[proxy]
grpcServerPort`` (8081, RocketMQ's default; 0 = off) on the broker's ``listenHost``; clients are
given the broker's address with that port as their endpoint. What each RPC does is in service.py:
every one becomes the broker's own remoting request, so interceptors (ACL) and processors are the
same for both protocols.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmq.kernel import NoOptions, hookimpl, make_handler, structure_options

if TYPE_CHECKING:
    from rmq.kernel import BrokerContext, Kernel, ProcessorRegistry

__all__ = ["GrpcProxyPlugin"]

log = logging.getLogger("rmq.grpc")


class GrpcProxyPlugin:
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        structure_options(NoOptions, options, "plugin.processors.grpc")
        self._registry: ProcessorRegistry | None = None
        self.service: Any = None
        self.port = 0

    @hookimpl
    def rmq_processors_register(self, kernel: Kernel, registry: ProcessorRegistry) -> None:
        if registry.role == "broker":
            self._registry = registry

    @hookimpl
    def rmq_broker_lifespan(self, kernel: Kernel, broker: BrokerContext) -> Any:
        port = kernel.config.proxy.grpcServerPort
        if not port or self._registry is None:
            return None
        return self._run(kernel, broker, port)

    @staticmethod
    def _tls_credentials(kernel: Kernel) -> Any:
        """TLS on the gRPC port when ``[tls] server.mode`` is enforcing (grpcio cannot tell TLS from plaintext
        on one port, so permissive serves plaintext, what the 5.x Python and Node SDKs speak by default)."""
        import grpc

        from rmq.protocol.tls import self_signed, structure_tls

        doc = getattr(kernel.config, "tls", None) or {}
        tls = structure_tls(doc)
        if tls.server_mode != "enforcing":
            return None
        if tls.server_cert_path:
            cert, key = Path(tls.server_cert_path).expanduser(), Path(tls.server_key_path).expanduser()
        else:
            pair = self_signed()
            if pair is None:
                raise OSError("gRPC endpoint: TLS enforcing needs tls.server.certPath/keyPath or the openssl tool")
            cert, key = Path(pair[0]), Path(pair[1])
        roots = Path(tls.server_trust_cert_path).expanduser().read_bytes() if tls.server_trust_cert_path else None
        need = tls.server_need_client_auth == "require"
        return grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())], root_certificates=roots,
                                           require_client_auth=need and roots is not None)

    @asynccontextmanager
    async def _run(self, kernel: Kernel, broker: BrokerContext, port: int) -> AsyncIterator[None]:
        import grpc

        from rmq.plugins.grpc_proxy.service import MessagingService
        from rmq.plugins.grpc_proxy.v2 import service_pb2_grpc

        assert self._registry is not None
        host = broker.broker_addr.rpartition(":")[0] or "127.0.0.1"
        listen = broker.config.listenHost or "0.0.0.0"
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 130 * 1024 * 1024),
                                          ("grpc.max_send_message_length", 130 * 1024 * 1024)])
        svc = MessagingService(broker, make_handler(self._registry), (host, port),
                               accounts=self._registry.services.get("acl"))
        service_pb2_grpc.add_MessagingServiceServicer_to_server(svc, server)
        creds = self._tls_credentials(kernel)
        bound = (server.add_secure_port(f"{listen}:{port}", creds) if creds is not None
                 else server.add_insecure_port(f"{listen}:{port}"))
        if not bound:
            raise OSError(f"gRPC endpoint: cannot listen on {listen}:{port}")
        await server.start()
        self.service, self.port = svc, bound
        log.info("gRPC endpoint (RocketMQ 5 clients) listening on %s:%d%s", listen, bound, " (TLS)" if creds else "")
        try:
            yield
        finally:
            for peer in list(svc.peers.values()):
                peer.close()
            await server.stop(grace=1.0)
            self.service = None
