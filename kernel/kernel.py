"""The Kernel: one owner for the plugin manager, the config and the task group.

No module globals: every daemon and every test builds its own kernel.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import pluggy

from rmq.kernel import plugin_manager as pmod
from rmq.kernel.config import RootConfig
from rmq.kernel.hookspecs.processors import ProcessorRegistry
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.protocol.access import is_loopback

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from rmq.kernel.hookspecs.remoting import Connection, RemotingServer
    from rmq.protocol.command import RemotingCommand

log = logging.getLogger("rmq.kernel")


class Kernel:
    """Plugins + config + lifetime. ``async with kernel:`` runs every lifespan; leaving stops them."""

    def __init__(self, config: RootConfig, pm: pluggy.PluginManager | None = None) -> None:
        self.config = config
        self.pm = pm or pmod.new_plugin_manager()
        self.hook = self.pm.hook
        self.plugins: list[pmod.LoadedPlugin] = []
        self.services: dict[str, Any] = {}  # role objects published for other plugins and tests
        self.ports: dict[str, int] = {}  # every port a listener opened, by name: rmqd's ready line lists them
        self._stack: AsyncExitStack | None = None
        self._tg: TaskGroup | None = None
        self.role: str | None = None  # the broker's role (lifecycle.MASTER / SLAVE); None = none (fenced, stopped)
        self.role_services: list[str] = []  # the rmq_role_lifespan contexts entered for it
        self._role_stack: AsyncExitStack | None = None
        self._role_lock = anyio.Lock()
        # Historic: every plugin registered from now on gets to add its own hook specs at once.
        self.hook.rmq_addhooks.call_historic(kwargs={"pluginmanager": self.pm})

    @classmethod
    def from_config(cls, config: RootConfig) -> Kernel:
        """Load exactly the plugins the config selects, through their entry points."""
        kernel = cls(config)
        kernel._check_required()
        kernel.plugins = pmod.load_selected(kernel.pm, config.selected(), config.plugin_options)
        return kernel

    @classmethod
    def for_client(cls, selection: dict[str, list[str]] | None = None) -> Kernel:
        """The small kernel a client builds: transport, allocation strategies and filters only."""
        from rmq.kernel.config import BASE_SELECTION

        sel = {**BASE_SELECTION, **(selection or {})}
        kernel = cls(RootConfig())
        kernel.plugins = pmod.load_selected(kernel.pm, sel, lambda ns, name: {})
        return kernel

    def _check_required(self) -> None:
        sel = self.config.selected()
        for ns in self.config.required():
            if not sel.get(ns):
                raise pmod.PluginError(
                    f"namespace rmq.{ns} is empty but required by the enabled roles; "
                    f"available: {', '.join(pmod.entry_point_names(ns)) or '(none installed)'}"
                )

    def add_plugin(self, obj: object, name: str | None = None) -> None:
        """Register an inline plugin object (tests, embedding) with the same fail-closed checks."""
        pmod.register(self.pm, obj, name or f"inline:{type(obj).__name__}:{id(obj):x}")
        pmod.check_all(self.pm)

    @property
    def task_group(self) -> TaskGroup:
        if self._tg is None:
            raise RuntimeError("kernel not running: use 'async with kernel:'")
        return self._tg

    @asynccontextmanager
    async def background(self, fn: Callable[[], Awaitable[Any]]) -> AsyncIterator[None]:
        """Run ``fn()`` (a service's loop) in the kernel's task group while the ``async with`` lasts; leaving
        returns once the loop has ended (a demoted broker's service must not write after it stopped)."""
        scope, done = anyio.CancelScope(), anyio.Event()

        async def run() -> None:
            try:
                with scope:
                    await fn()
            finally:
                done.set()

        self.task_group.start_soon(run)
        try:
            yield
        finally:
            scope.cancel()
            with anyio.CancelScope(shield=True):
                await done.wait()

    async def change_role(self, role: str | None, broker: Any = None) -> None:
        """Leave the current role (its ``rmq_role_lifespan`` contexts exited in reverse) and take ``role``
        (contexts entered in plugin registration order); ``None`` leaves it. Shielded: a cancelled caller
        must not leave the services of half a role running. No-op when ``role`` is held already."""
        with anyio.CancelScope(shield=True):
            async with self._role_lock:
                if role == self.role:
                    return
                stack, self._role_stack, self.role, self.role_services = self._role_stack, None, None, []
                if stack is not None:
                    await stack.aclose()
                if role is None:
                    return
                self._role_stack, self.role = AsyncExitStack(), role
                for cm in reversed(self.hook.rmq_role_lifespan(kernel=self, role=role, broker=broker)):
                    name = getattr(getattr(cm, "gen", cm), "__name__", type(cm).__name__)
                    try:
                        await self._role_stack.enter_async_context(cm)
                    except Exception:
                        log.exception("%s service %s did not start", role, name)
                        continue
                    self.role_services.append(name)
                log.info("role %s: %s", role, ", ".join(self.role_services) or "no role services")

    async def __aenter__(self) -> Kernel:
        self.hook.rmq_configure(kernel=self)
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(self._tg.cancel_scope.cancel)  # runs after every lifespan exited
            # pluggy calls the most recently registered first; lifespans start in registration order.
            for cm in reversed(self.hook.rmq_lifespan(kernel=self)):
                if cm is not None:
                    await stack.enter_async_context(cm)
        except BaseException:
            await stack.__aexit__(None, None, None)
            self._tg = None
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                await stack.__aexit__(None, None, None)
        finally:
            self._tg = None
            self.hook.rmq_unconfigure(kernel=self)

    async def serve_role(self, role: str, config: RemotingConfig) -> tuple[RemotingServer, ProcessorRegistry]:
        """Build the request table of ``role`` from every plugin, then listen (generic role plumbing)."""
        registry = ProcessorRegistry(role, self)
        self.hook.rmq_processors_register(kernel=self, registry=registry)
        role_config = getattr(self.config, role, None)
        if not getattr(role_config, "allowRemoteAdmin", True) and not getattr(role_config, "aclEnable", False):
            registry.interceptors.insert(0, LoopbackAdminGuard(role))  # before any plugin's interceptor
        server = self.hook.rmq_remoting_make_server(kernel=self, config=config, handler=make_handler(registry))
        if server is None:
            raise pmod.PluginError("no rmq.remoting plugin built a server; select one under [plugins] remoting")
        self.ports[role] = await self.task_group.start(server.serve)
        log.info("%s listening on %s:%d (%d request codes)", role, config.host, server.port, len(registry.table))
        return server, registry


class LoopbackAdminGuard:
    """The protected default until ACL: state-changing admin requests only from loopback peers.

    A ``RequestInterceptor`` the kernel adds to a role whose config leaves ``allowRemoteAdmin``
    off; the codes are ``rmq.protocol.codes.ADMIN_WRITE_CODES``.
    """

    def __init__(self, role: str) -> None:
        from rmq.kernel.ratelimit import RateLimitedLog
        from rmq.protocol.codes import ADMIN_WRITE_CODES

        self.role = role
        self.codes = ADMIN_WRITE_CODES
        self._log = RateLimitedLog(logging.getLogger(f"rmq.{role}"))

    def before(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code not in self.codes:
            return None
        host = conn.remote_addr[0]
        if is_loopback(host):
            return None
        from rmq.protocol.codes import ResponseCode

        self._log.warning("admin-guard", "refused admin request code %d from %s: not a loopback peer", cmd.code, host)
        return cmd.response(
            ResponseCode.NO_PERMISSION,
            f"request code {cmd.code} changes {self.role} state and is only accepted from loopback peers; "
            f"set {self.role}.allowRemoteAdmin = true to accept it from {host} (no ACL is enabled)",
        )

    def after(self, conn: Connection, cmd: RemotingCommand, response: RemotingCommand | None) -> None:
        return None


def make_handler(registry: ProcessorRegistry) -> Any:
    """The role's request handler: its interceptors around a :class:`~rmq.protocol.dispatch.Router`.

    The router answers unknown codes and turns a processor's exception into a response
    (``rmq.protocol.dispatch.error_response``: a ``HeaderError`` or ``InvalidNameError`` keeps
    its code and message, anything else is SYSTEM_ERROR); an interceptor's exception is
    answered the same way. Log lines are rate-limited and peer text is made printable: a
    peer repeating a bad request a million times gets a few lines, not a million.
    """
    from rmq.kernel.ratelimit import RateLimitedLog
    from rmq.protocol.command import HeaderError
    from rmq.protocol.dispatch import Router, error_response
    from rmq.protocol.names import InvalidNameError, printable

    rlog = RateLimitedLog(logging.getLogger(f"rmq.{registry.role}"))
    interceptors = tuple(registry.interceptors)

    def unsupported(conn: Connection, cmd: RemotingCommand) -> None:
        rlog.info("unsupported", "request code %d from %s:%s not supported", cmd.code, *conn.remote_addr[:2])

    def failed(conn: Connection, cmd: RemotingCommand, e: Exception) -> None:
        if isinstance(e, (HeaderError, InvalidNameError)):
            rlog.info(f"header:{cmd.code}", "request code %d from %s:%s refused: %s", cmd.code,
                      *conn.remote_addr[:2], printable(str(e)))
        else:
            rlog.warning(f"failed:{cmd.code}", "request code %d from %s:%s failed: %s", cmd.code,
                         *conn.remote_addr[:2], printable(f"{type(e).__name__}: {e}"))

    handle = Router(registry.table, on_unsupported=unsupported, on_error=failed).dispatch
    if not interceptors:
        return handle

    async def intercepted(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        response: RemotingCommand | None = None
        try:
            for i in interceptors:
                response = i.before(conn, cmd)
                if response is not None:
                    break
            else:
                response = await handle(conn, cmd)
            for i in interceptors:
                i.after(conn, cmd, response)
        except Exception as e:  # cancellation is a BaseException: it passes
            rlog.warning(f"interceptor:{cmd.code}", "an interceptor failed on request code %d from %s:%s: %s",
                         cmd.code, *conn.remote_addr[:2], printable(f"{type(e).__name__}: {e}"))
            return error_response(cmd, e)
        return response

    return intercepted
