"""Lifecycle: plugins joining the daemon's start-up and shutdown.

Order of a daemon run: ``rmq_addhooks`` (historic) as each plugin registers,
``rmq_configure`` once all are registered, every ``rmq_lifespan`` context entered
in plugin order inside the kernel's task group, serve until SIGTERM/SIGINT,
lifespans exited in reverse order, ``rmq_unconfigure``.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

from rmq.kernel.markers import hookspec

if TYPE_CHECKING:
    import pluggy

    from rmq.kernel.kernel import Kernel


@hookspec(historic=True)
def rmq_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    """Let a plugin add hook specs of its own (``pluginmanager.add_hookspecs(module)``).

    Historic: a plugin registered later still sees the call. Called once per plugin.

    Arguments:
    - ``pluginmanager``: the kernel's ``pluggy.PluginManager``.
    """


@hookspec
def rmq_configure(kernel: Kernel) -> None:
    """All plugins are registered and the config is final; validate and prepare.

    Called once, before any lifespan. Raise ``ConfigError`` to refuse start-up.

    Arguments:
    - ``kernel``: the running ``Kernel`` (config, hook relay, services).
    """


@hookspec
def rmq_unconfigure(kernel: Kernel) -> None:
    """The daemon stopped; release what ``rmq_configure`` prepared. Called once.

    Arguments:
    - ``kernel``: the running ``Kernel`` (config, hook relay, services).
    """


@hookspec
def rmq_lifespan(kernel: Kernel) -> AbstractAsyncContextManager[None] | None:
    """Return an async context manager to run while the daemon runs (or None).

    Called once at start-up. Contexts are entered in plugin registration order
    (roles: namesrv before broker) and exited in reverse; use
    ``kernel.task_group`` for background tasks. Entering must return once the
    component serves (a server bound its port); exiting must stop it cleanly.

    Arguments:
    - ``kernel``: the running ``Kernel`` (config, hook relay, services).
    """
