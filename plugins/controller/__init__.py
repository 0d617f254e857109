"""The controller role (RocketMQ 5's controller): replicated broker-set metadata and master election.

Entry point ``rmq.processors: controller``; runs when the config has a ``[controller]``
section (with ``[namesrv]`` in the same file it is RocketMQ's enableControllerInNamesrv).
``state``: the deterministic state machine (replicas, SyncStateSet, epochs, the election
policy). ``raft``: that state replicated across the nodes of ``controllerDLegerPeers`` by
pysyncobj. ``service``: the request codes (RocketMQ's 904, 1001-1013), broker liveness and
the election of a new master when one stops heartbeating.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from rmq.kernel import NoOptions, RemotingConfig, check_bindable, hookimpl, structure_options
from rmq.plugins.controller.service import ControllerService
from rmq.roles import ControllerConfig

if TYPE_CHECKING:
    from rmq.kernel import Kernel, ProcessorRegistry

__all__ = ["ControllerConfig", "ControllerPlugin", "ControllerService"]

log = logging.getLogger("rmq.controller")


class ControllerPlugin:
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        structure_options(NoOptions, options, "plugin.processors.controller")
        self.service: ControllerService | None = None

    @hookimpl
    def rmq_processors_register(self, kernel: Kernel, registry: ProcessorRegistry) -> None:
        if registry.role == "controller" and self.service is not None:
            self.service.register(registry, owner="controller")
            registry.services["controller"] = self.service

    @hookimpl
    def rmq_lifespan(self, kernel: Kernel) -> Any:
        if kernel.config.controller is None:
            return None
        return self._run(kernel)

    @asynccontextmanager
    async def _run(self, kernel: Kernel) -> AsyncIterator[None]:
        cfg = kernel.config.controller
        assert cfg is not None
        svc = self.service = ControllerService(kernel, cfg)
        port = int(svc.self_addr.rpartition(":")[2])
        key = f"controller.controllerDLegerPeers ({svc.self_id}'s port)"
        raft_port = int(svc.raft_of[svc.self_id].rpartition(":")[2])
        # pysyncobj binds in its own thread and retries forever: a taken Raft port is found out here
        check_bindable(f"{key} + controller.raftPortOffset (Raft)", cfg.listenHost, raft_port)
        svc.start()
        kernel.services["controller"] = svc
        scope = anyio.CancelScope()
        try:
            server, _ = await kernel.serve_role(
                "controller", RemotingConfig(host=cfg.listenHost, port=port, max_connections=cfg.maxConnections,
                                             name="controller", key=key))
            kernel.ports["raft"] = raft_port
            try:
                async def scanner() -> None:
                    with scope:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(svc.run_leader_barrier)
                            tg.start_soon(svc.run_scanner)

                kernel.task_group.start_soon(scanner)
                log.info("controller %s of group %s serving at %s (raft at %s), peers %s", svc.self_id,
                         cfg.controllerDLegerGroup, svc.self_addr, svc.raft_of[svc.self_id], cfg.controllerDLegerPeers)
                yield
            finally:
                scope.cancel()
                await server.aclose()
        finally:
            kernel.services.pop("controller", None)
            await svc.aclose()
            self.service = None
            log.info("controller stopped")
