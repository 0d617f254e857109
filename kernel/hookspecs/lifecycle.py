"""Lifecycle: plugins joining the daemon's start-up and shutdown.

Order of a daemon run: ``rmq_addhooks`` (historic) as each plugin registers,
``rmq_configure`` once all are registered, every ``rmq_lifespan`` context entered
in plugin order inside the kernel's task group, serve until SIGTERM/SIGINT,
lifespans exited in reverse order, ``rmq_unconfigure``.

A broker's role is an event, not a start-up fact (RocketMQ 5's ``ReplicasManager.changeToMaster``
→ ``changeSpecialServiceStatus``; Kafka's ``becomeLeaderOrFollower``): the role plugin calls
``Kernel.change_role`` whenever its broker becomes master or slave (at start in classic mode; on
every election, NOTIFY_BROKER_ROLE_CHANGED or manual electMaster in controller mode), and the
kernel exits every ``rmq_role_lifespan`` of the old role and enters those of the new one.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING

from rmq.kernel.markers import hookspec

if TYPE_CHECKING:
    import pluggy

    from rmq.kernel.hookspecs.broker import BrokerContext
    from rmq.kernel.kernel import Kernel

MASTER = "MASTER"  # takes writes: delay/timer delivery, transaction checks, POP revive run here
SLAVE = "SLAVE"  # replicates a master: what it would deliver arrives through replication


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


@hookspec
def rmq_role_lifespan(kernel: Kernel, role: str, broker: BrokerContext) -> AbstractAsyncContextManager[None] | None:
    """Return an async context manager to run while the broker holds ``role`` (or None for that role).

    Called at every role change: ``role`` is ``MASTER`` or ``SLAVE``. The kernel first exits the
    contexts of the previous role, in reverse plugin registration order, then enters the new
    role's in registration order (so a service entered after another may use it, and stops
    first). A role held again after a demotion gets a fresh call: build the service anew and
    reload what it persisted (another broker may have advanced it meanwhile, replicated here).
    The role plugin leaves the role (exits them all) before its store closes.

    Entering and exiting may run in different tasks (the one that learned of the change):
    hold no cancel scope or task group across the ``yield``; run loops with
    ``async with kernel.background(fn)``. Entering returns once the service runs; exiting
    stops it and persists its progress; both run shielded from cancellation. A context
    whose entering raises is logged and left out; the others still run. While entered,
    the context's name (an ``asynccontextmanager`` function's ``__name__``, else its class
    name) is listed in ``kernel.role_services``.

    Arguments:
    - ``kernel``: the running ``Kernel`` (config, hook relay, task group).
    - ``role``: ``MASTER`` or ``SLAVE`` (``rmq.kernel.hookspecs.lifecycle``).
    - ``broker``: the broker whose role changed, as a ``BrokerContext``.
    """
