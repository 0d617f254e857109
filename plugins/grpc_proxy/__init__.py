"""The bundled ``grpc`` processors plugin: RocketMQ 5's gRPC endpoint (apache.rocketmq.v2 MessagingService)
in the broker, as the 5.x proxy's "local" mode, so the official 5.x SDKs connect unmodified.

Entry point ``rmq.processors: grpc``; selected for every broker, it opens a port only when the config
has a ``[proxy]`` table (the embedded default does), as a RocketMQ broker serves gRPC only with its
proxy enabled. It listens on ``[proxy] grpcServerPort`` (8081, RocketMQ's default; 0 = off) on the
broker's ``listenHost``. Routes list every broker of a topic from the name servers under its id
(0 = master), each with its host and that port as the endpoint (the proxy's local-mode rule: every
broker runs its proxy on the same port; a broker naming another port in its runtime info is routed
there), so clients send to and receive from each master through its own endpoint, whichever broker
they asked. What each RPC does is in its activity's module (service.py lists them): every one
becomes the broker's own remoting request, so interceptors (ACL) and processors are the
same for both protocols. Before any method runs, access.py's gate authenticates the caller, checks
every topic and group name the request gives and the account's permission on each (``RPC_ACCESS``);
receipt handles carry a MAC of this broker's, so only handles it issued are acted on. Messages
received with ``auto_renew`` are kept invisible until acked (renew.py; its settings, RocketMQ's
``enableProxyAutoRenew`` and friends, go in ``[plugin.processors.grpc]``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from rmq.kernel import ConfigError, check_bindable, hookimpl, make_handler, structure_options
from rmq.plugins.grpc_proxy.renew import GrpcOptions
from rmq.protocol.ports import bind_error

if TYPE_CHECKING:
    from rmq.kernel import BrokerContext, Kernel, ProcessorRegistry

__all__ = ["GrpcProxyPlugin"]

log = logging.getLogger("rmq.grpc")
KEY = "proxy.grpcServerPort"


class GrpcProxyPlugin:
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = structure_options(GrpcOptions, options, "plugin.processors.grpc")
        self._registry: ProcessorRegistry | None = None
        self.service: Any = None
        self.port = 0

    @hookimpl
    def rmq_processors_register(self, kernel: Kernel, registry: ProcessorRegistry) -> None:
        if registry.role == "broker":
            self._registry = registry

    @hookimpl
    def rmq_broker_lifespan(self, kernel: Kernel, broker: BrokerContext) -> Any:
        proxy = kernel.config.proxy  # None: the config file has no [proxy] table, so no gRPC endpoint
        port = proxy.grpcServerPort if proxy is not None else 0
        if not port or self._registry is None:
            return None
        return self._run(kernel, broker, port)

    @staticmethod
    def _credentials(tls: Any) -> Any:
        """Server credentials from the transport's certificate (the configured one, else test mode's)."""
        import grpc

        pem = tls.pem()
        if pem is None:
            return None
        chain, key, roots = pem
        need = tls.config.server_need_client_auth == "require"
        return grpc.ssl_server_credentials([(key, chain)], root_certificates=roots,
                                           require_client_auth=need and roots is not None)

    @asynccontextmanager
    async def _run(self, kernel: Kernel, broker: BrokerContext, port: int) -> AsyncIterator[None]:
        """disabled: grpcio plaintext on the port; enforcing: grpcio TLS on the port; permissive (RocketMQ's
        default): front.py owns the port and splices each connection to grpcio's loopback plaintext
        port, or to a TLS one started on the first TLS handshake (so a plaintext-only deployment never
        makes a certificate)."""
        import anyio
        import grpc

        from rmq.plugins.grpc_proxy.access import guard, register
        from rmq.plugins.grpc_proxy.front import PermissiveFront
        from rmq.plugins.grpc_proxy.routes import RouteView
        from rmq.plugins.grpc_proxy.service import MAX_BODY, MessagingService

        assert self._registry is not None
        host = broker.broker_addr.rpartition(":")[0] or "127.0.0.1"
        listen = broker.config.listenHost or "0.0.0.0"
        # a request carries at most one message of MAX_BODY: a larger one is refused before it is buffered
        options = [("grpc.max_receive_message_length", 2 * MAX_BODY),
                   ("grpc.max_send_message_length", 130 * 1024 * 1024)]
        svc = MessagingService(broker, make_handler(self._registry), (host, port),
                               accounts=self._registry.services.get("acl"), options=self.options)
        guard(svc, svc.gate, svc.client_ip)  # every method: authenticated, names checked, authorised first
        namesrv_addrs = getattr(broker, "namesrv_addrs", None)
        if namesrv_addrs is not None:  # routes over every broker of a topic, as the proxy's local mode
            svc.routes = RouteView(namesrv_addrs)
        tls = kernel.hook.rmq_remoting_tls(kernel=kernel)  # the transport's TLS; None: plaintext only
        mode = tls.mode if tls is not None else "disabled"
        servers: list[Any] = []

        def new_server() -> Any:
            server = grpc.aio.server(options=options)
            register(server, svc)
            servers.append(server)
            return server

        front: PermissiveFront | None = None
        check_bindable(KEY, listen, port)  # grpcio reports a failed bind without its errno
        server = new_server()
        if mode == "enforcing":
            creds = await anyio.to_thread.run_sync(self._credentials, tls)
            if creds is None:
                raise ConfigError("gRPC endpoint: TLS enforcing needs tls.server.certPath/keyPath or test mode")
            bound = server.add_secure_port(f"{listen}:{port}", creds)
        elif mode == "disabled":
            bound = server.add_insecure_port(f"{listen}:{port}")
        else:
            plain = server.add_insecure_port("127.0.0.1:0")
            front = PermissiveFront(listen, port, plain, 0)

            async def tls_port() -> int:
                creds = await anyio.to_thread.run_sync(self._credentials, tls)
                if creds is None:
                    return 0
                tls_server = new_server()
                p = tls_server.add_secure_port("127.0.0.1:0", creds)
                await tls_server.start()
                return p

            front.tls_port_factory = tls_port
            svc.resolve_peer = front.real_peer
            bound = port
        if not bound:
            raise ConfigError(f"{KEY}: cannot listen on {listen}:{port}")
        await server.start()
        if front is not None:
            try:
                bound = await front.start()
            except OSError as e:
                bind_error(e, KEY, listen, port)
        kernel.ports["grpc"] = bound
        self.service, self.port = svc, bound
        log.info("gRPC endpoint (RocketMQ 5 clients) listening on %s:%d (TLS %s)", listen, bound, mode)
        try:
            async with kernel.background(svc.renewer.run):
                yield
        finally:
            svc.peers.close_all()
            if front is not None:
                await front.close()
            for srv in servers:
                await srv.stop(grace=1.0)
            if svc.routes is not None:
                await svc.routes.aclose()
            self.service = None
