"""The bundled ``namesrv`` processors plugin: RocketMQ's NameServer role.

Entry point ``rmq.processors: namesrv``. Runs when the config has a
``[namesrv]`` section: serves route registration and lookup on
``listenHost:listenPort``; the KV config lives in ``[namesrv] kvConfigPath``, by default
``namesrv/kvConfig.json`` under the broker's ``storePathRootDir`` (else $RMQ_HOME or
./rmq-store): RocketMQ's ``~/namesrv/kvConfig.json`` would be a write outside any store.
No plugin options.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from rmq.kernel import RemotingConfig, hookimpl, structure_options
from rmq.plugins.namesrv.service import NamesrvService

if TYPE_CHECKING:
    from rmq.kernel import Kernel, ProcessorRegistry

__all__ = ["NamesrvOptions", "NamesrvPlugin", "NamesrvService"]

log = logging.getLogger("rmq.namesrv")


@attrs.define(frozen=True)
class NamesrvOptions:
    """None yet: the KV file is ``[namesrv] kvConfigPath``, where RocketMQ keeps it."""


class NamesrvPlugin:
    """Starts the NameServer role when ``[namesrv]`` is configured."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options: NamesrvOptions = structure_options(NamesrvOptions, options)
        self.service: NamesrvService | None = None

    @hookimpl
    def rmq_processors_register(self, kernel: Kernel, registry: ProcessorRegistry) -> None:
        if registry.role == "namesrv" and self.service is not None:
            self.service.register(registry, owner="namesrv")
            registry.services["namesrv"] = self.service

    @hookimpl
    def rmq_lifespan(self, kernel: Kernel) -> Any:
        if kernel.config.namesrv is None:
            return None
        return self._run(kernel)

    @asynccontextmanager
    async def _run(self, kernel: Kernel) -> AsyncIterator[None]:
        cfg = kernel.config.namesrv
        assert cfg is not None
        broker = kernel.config.broker
        self.service = svc = NamesrvService(cfg, broker.store_root() if broker is not None else None)
        src = kernel.config.source
        svc.config_file = src if src and not src.startswith("<") else ""  # a file: load_config read it
        kernel.services["namesrv"] = svc
        server, _ = await kernel.serve_role(
            "namesrv", RemotingConfig(host=cfg.listenHost, port=cfg.listenPort, max_connections=cfg.maxConnections,
                           name="namesrv", key="namesrv.listenPort")
        )
        svc.server = server
        scope = anyio.CancelScope()

        async def scanner() -> None:
            with scope:
                await svc.run_scanner()

        kernel.task_group.start_soon(scanner)
        try:
            yield
        finally:
            scope.cancel()
            await server.aclose()
            kernel.services.pop("namesrv", None)
            log.info("namesrv stopped")
