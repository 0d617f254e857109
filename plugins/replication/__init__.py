"""Replication: RocketMQ's classic master/slave HA as the bundled ``rmq.replication`` plugin ``ha``.

Entry point ``rmq.replication: ha = rmq.plugins.replication:HaReplicationPlugin``,
selected by default for every broker. Its settings are RocketMQ's and live in
``[broker]`` (brokerRole, brokerId, haListenPort, haMasterAddress,
haSendHeartbeatInterval, haHousekeepingInterval, haTransferBatchSize,
haMaxGapNotInSync (4.9: haSlaveFallbehindMax), haWhiteRemoteAddresses, slaveTimeout); the plugin's own table takes no keys.
With aclEnable or tls ``server.mode = enforcing`` the HA port serves only white-listed peers and
peers with a verified TLS client certificate (see ``service``).

Two hooks of one plugin instance: ``rmq_dispatch_make_dispatchers`` contributes the
notifier that wakes the stream writers when new bytes are dispatched, and
``rmq_replication_make_service`` builds the ``HAService`` around the same notifier.
A store that is not a ``ReplicaLog`` cannot replicate: the broker refuses to start
with one line saying so.
"""

from __future__ import annotations

import logging
from typing import Any

from rmq.kernel import (
    CommitLogDispatcher,
    Kernel,
    MessageStore,
    NoOptions,
    PluginError,
    ReplicaLog,
    ReplicationService,
    hookimpl,
    structure_options,
)
from rmq.plugins.replication.frames import (
    FrameError,
    ReportReader,
    TransferDecoder,
    encode_header,
    encode_report,
)
from rmq.plugins.replication.service import DataNotifier, HAService

__all__ = [
    "DataNotifier",
    "FrameError",
    "HAService",
    "HaReplicationPlugin",
    "ReportReader",
    "TransferDecoder",
    "encode_header",
    "encode_report",
]


log = logging.getLogger("rmq.ha")


class HaReplicationPlugin:
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        structure_options(NoOptions, options, "plugin.replication.ha")
        self._notifiers: dict[int, DataNotifier] = {}

    @hookimpl
    def rmq_dispatch_make_dispatchers(self, kernel: Kernel, store: MessageStore) -> list[CommitLogDispatcher]:
        notifier = self._notifiers.setdefault(id(store), DataNotifier())
        return [notifier]

    @hookimpl(trylast=True)
    def rmq_replication_make_service(self, kernel: Kernel, store: MessageStore) -> ReplicationService | None:
        config = kernel.config.broker
        if config is None:
            return None
        if not isinstance(store, ReplicaLog):
            if config.brokerRole.upper() == "ASYNC_MASTER":
                return None  # standalone is all an ASYNC_MASTER without slaves needs
            raise PluginError(
                f"brokerRole {config.brokerRole} needs a store that can replicate (rmq.kernel.ReplicaLog); "
                f"{type(store).__name__} cannot"
            )
        notifier = self._notifiers.pop(id(store), None) or DataNotifier()
        try:
            svc = HAService(store, store, config, notifier)
        except ValueError as e:
            raise PluginError(f"broker.{e}") from None
        svc.guarded = bool(config.aclEnable)
        svc.ports = kernel.ports
        tls = kernel.hook.rmq_remoting_tls(kernel=kernel)  # the transport's contexts and certificate
        client_certs = False
        if tls is not None:
            cfg = tls.config
            if cfg.server_mode == "enforcing":
                svc.tls_server = tls.context()
                svc.guarded = True
                client_certs = cfg.server_need_client_auth != "none" and bool(cfg.server_trust_cert_path)
            if cfg.enable:
                svc.tls_client = tls.client_context()
        if svc.guarded and not svc.white and not client_certs:
            log.warning("HA port: aclEnable or tls enforcing, but neither haWhiteRemoteAddresses nor verified TLS "
                        "client certificates (server.need.client.auth with server.trustCertPath): no slave can be "
                        "served")
        return svc  # type: ignore[return-value]
