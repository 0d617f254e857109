"""Processors: what each request code does, per server role.

The NameServer and Broker roles each build a request-code table at start-up
by calling ``rmq_processors_register`` with a registry for that role; plugins
add handlers for the codes they serve (the bundled ``namesrv`` and ``broker``
plugins, and later transactions, scheduling, admin). Unknown codes are
answered REQUEST_CODE_NOT_SUPPORTED by the registry itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rmq.kernel.markers import hookspec

if TYPE_CHECKING:
    from rmq.kernel.hookspecs.remoting import Connection
    from rmq.kernel.kernel import Kernel
    from rmq.protocol.command import RemotingCommand

Processor = Callable[["Connection", "RemotingCommand"], Awaitable["RemotingCommand | None"]]


@runtime_checkable
class RequestInterceptor(Protocol):
    """Runs around every request a role serves (RocketMQ's RPCHook): ACL, metrics, tracing, audit.

    ``before`` runs on the event loop before the processor, in registration order; returning a
    response refuses the request (the processor does not run, later interceptors' ``before``
    neither). ``after`` runs for every interceptor with the final response (None for oneway
    requests), refusals and errors included. Both must be fast and must not block or do I/O:
    they run once per request. An exception in either is answered SYSTEM_ERROR.
    """

    def before(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None: ...

    def after(self, conn: Connection, cmd: RemotingCommand, response: RemotingCommand | None) -> None: ...


class ProcessorRegistry:
    """Request code -> processor for one role; also a shared bag of role services.

    ``services`` lets plugins of one role find each other's objects (the
    broker's topic manager, the store...) without module globals.
    """

    def __init__(self, role: str, kernel: Kernel) -> None:
        self.role = role
        self.kernel = kernel
        self.table: dict[int, Processor] = {}
        self.owners: dict[int, str] = {}
        self.services: dict[str, Any] = {}
        self.interceptors: list[RequestInterceptor] = []
        self.access: dict[int, Any] = {}  # code -> rmq.protocol.access.Access: the ACL's permission table

    def add_interceptor(self, interceptor: RequestInterceptor) -> None:
        """Run ``interceptor`` around every request of this role (after those added before it)."""
        self.interceptors.append(interceptor)

    def register(self, code: int, processor: Processor, *, owner: str = "", access: Any = None,
                 replace: bool = False) -> None:
        """Claim ``code``; a second claim without ``replace`` is a start-up error naming both owners.

        ``access`` (an ``rmq.protocol.access.Access``) declares what the request touches; the ACL
        refuses a code registered without one (fail closed), and a meta-test checks every bundled one.
        """
        code = int(code)
        if code in self.table and not replace:
            raise ValueError(
                f"request code {code} of role {self.role} claimed by {self.owners[code] or '?'} and {owner or '?'}"
            )
        self.table[code] = processor
        self.owners[code] = owner
        self.access[code] = access


@hookspec
def rmq_processors_register(kernel: Kernel, registry: ProcessorRegistry) -> None:
    """Add request handlers for ``registry.role`` ("namesrv" or "broker").

    Called once per role at start-up, before the role's server listens. Check
    ``registry.role`` and register only codes of that role; add a ``RequestInterceptor``
    with ``registry.add_interceptor`` to see every request of the role. Pass ``access=`` (an
    ``rmq.protocol.access.Access``) with every code: what it reads or writes, for the ACL.
    Processors may be bound methods of long-lived service objects; put such objects in
    ``registry.services`` for other plugins of the role.

    Arguments:
    - ``kernel``: the running ``Kernel`` (config, hook relay, services).
    - ``registry``: the role's ``ProcessorRegistry`` (``role``, ``register``, ``add_interceptor``, ``services``).
    """
