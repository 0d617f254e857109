"""The bundled ``dashboard`` processors plugin: a browser dashboard for the broker (what rocketmq-dashboard
gives: cluster, topics, groups and lag, message lookup, DLQ resend, test sends, live throughput).

Entry point ``rmq.processors: dashboard``; selected for every broker, serving only when the config has a
``[dashboard]`` table (rmqd's embedded default has one) with ``listenPort`` (8080; 0 = off) on
``listenHost`` (127.0.0.1: loopback unless asked). A Starlette app under uvicorn, served on the broker's
own event loop. The dashboard is a client of its own daemon (``rmq.client`` against the name server and
brokers), so every validation, permission and persistence rule is the broker's own; with ``aclEnable``
it asks for HTTP Basic credentials (an account's accessKey / secretKey) and makes its calls with them.

Facing strangers: only the Host names of ``allowedHosts`` are served (default: 127.0.0.1, localhost and
[::1] with listenPort, and listenHost; 421 otherwise: DNS rebinding), every form carries a CSRF token,
offset message ids only reach brokers the name server lists, and the listener closes a request whose
head takes longer than ``headerTimeout`` or body longer than ``bodyTimeout``, idles kept-alive
connections after ``keepAliveTimeout``, bounds a head to ``maxHeaderBytes`` and answers 503 past
``maxConnections`` open connections (see guard.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from rmq.kernel import NoOptions, hookimpl, structure_options
from rmq.protocol.ports import bind_error

if TYPE_CHECKING:
    from rmq.kernel import BrokerContext, Kernel, ProcessorRegistry

__all__ = ["DashboardConfig", "DashboardPlugin", "allowed_hosts", "host_allowed", "structure_dashboard"]

log = logging.getLogger("rmq.dashboard")

EMBEDDED = "<embedded default>"  # the kernel's name for the no-config source


@attrs.define(frozen=True)
class DashboardConfig:
    """The ``[dashboard]`` table, declared to the kernel by the entry point ``rmq.sections: dashboard``."""

    embedded: ClassVar[dict[str, Any]] = {}  # rmqd's no-config default: the dashboard on 127.0.0.1:8080
    when_absent: ClassVar[str] = "no dashboard"  # what ``rmqd config`` says of a config without the table

    listenPort: int = 8080  # 0 = off
    listenHost: str = "127.0.0.1"
    #: Host header values served ("name" any port, "name:port" that port); empty = loopback names with
    #: listenPort (and listenHost itself). Anything else is answered 421 (DNS rebinding).
    allowedHosts: tuple[str, ...] = ()
    headerTimeout: float = 10.0  # seconds from connect (or a request's first byte) to its last header
    bodyTimeout: float = 30.0  # seconds from the last header to the last body byte
    keepAliveTimeout: float = 5.0  # seconds an idle kept-alive connection is held
    maxConnections: int = 64  # connections beyond it are answered 503 and closed
    maxHeaderBytes: int = 16384  # request line + headers

    @classmethod
    def from_table(cls, table: Any) -> DashboardConfig:
        """How the kernel structures the table: ``structure_dashboard``'s checks and messages."""
        return structure_dashboard(table)


_NUMBERS: dict[str, tuple[type, float, float]] = {
    "headerTimeout": (float, 0.1, 3600.0),
    "bodyTimeout": (float, 0.1, 3600.0),
    "keepAliveTimeout": (float, 0.1, 3600.0),
    "maxConnections": (int, 1, 100_000),
    "maxHeaderBytes": (int, 1024, 1 << 20),
}


def structure_dashboard(doc: Any) -> DashboardConfig:
    """The ``[dashboard]`` table, strictly: ValueError names the key that is wrong."""
    if not isinstance(doc, dict):
        raise ValueError("expected a table")
    known = [f.name for f in attrs.fields(DashboardConfig)]
    for key in doc:
        if key not in known:
            raise ValueError(f"unknown key {key!r}; known: {', '.join(known)}")
    port = doc.get("listenPort", 8080)
    if type(port) is not int or not 0 <= port <= 65535:
        raise ValueError(f"listenPort: expected a port number 0..65535 (0 = off), got {port!r}")
    host = doc.get("listenHost", "127.0.0.1")
    if not isinstance(host, str) or not host.strip():
        raise ValueError(f"listenHost: expected a host name or address, got {host!r}")
    hosts = doc.get("allowedHosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ValueError(f"allowedHosts: expected a list of host names, got {hosts!r}")
    for h in hosts:
        if host_key(h) is None:
            raise ValueError(f"allowedHosts: {h!r} is not a host name, [IPv6] address or either with :port")
    numbers: dict[str, Any] = {}
    for key, (kind, lo, hi) in _NUMBERS.items():
        v = doc.get(key, attrs.fields_dict(DashboardConfig)[key].default)
        ok = type(v) is int or (kind is float and type(v) is float)
        if not ok or not lo <= v <= hi:
            raise ValueError(f"{key}: expected {'a number' if kind is float else 'a whole number'} "
                             f"{lo:g}..{hi:g}, got {v!r}")
        numbers[key] = kind(v)
    return DashboardConfig(port, host.strip(), tuple(h.strip().lower() for h in hosts), **numbers)


def host_key(value: str) -> tuple[str, int | None] | None:
    """(lower-case name, port or None) of a Host header value or an allowedHosts entry; None if malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        name, sep, rest = value.partition("]")
        name += sep
        if not sep or len(name) < 3 or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, sep, port_text = value.partition(":")
        if not sep:
            port_text = None
    if not name or any(c not in _HOST_CHARS for c in name):
        return None
    if port_text is None:
        return name, None
    if not port_text.isdigit() or len(port_text) > 5 or not 0 < int(port_text) <= 65535:
        return None
    return name, int(port_text)


_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789.-_[]:%")


def allowed_hosts(cfg: DashboardConfig, port: int) -> frozenset[tuple[str, int | None]]:
    """What the Host header may name: the configured list, or loopback (and listenHost) on ``port``."""
    if cfg.allowedHosts:
        return frozenset(k for h in cfg.allowedHosts if (k := host_key(h)) is not None)
    names = {"127.0.0.1", "localhost", "[::1]"}
    listen = cfg.listenHost.lower()
    if listen not in ("0.0.0.0", "::", "", "*"):
        names.add(f"[{listen}]" if ":" in listen else listen)
    return frozenset((n, port) for n in names)


def host_allowed(header: str, allowed: frozenset[tuple[str, int | None]]) -> bool:
    """``header`` (a Host value) names an allowed host: an entry without a port allows every port; a Host
    without a port means 80 (what a browser leaves out)."""
    key = host_key(header)
    if key is None:
        return False
    name, port = key
    return (name, 80 if port is None else port) in allowed or (name, None) in allowed


class DashboardPlugin:
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        structure_options(NoOptions, options, "plugin.processors.dashboard")
        self.config: DashboardConfig | None = None
        self._registry: ProcessorRegistry | None = None
        self.port = 0

    @hookimpl
    def rmq_configure(self, kernel: Kernel) -> None:
        self.config = kernel.config.dashboard  # structured by the kernel with DashboardConfig (None: no table)

    @hookimpl
    def rmq_processors_register(self, kernel: Kernel, registry: ProcessorRegistry) -> None:
        if registry.role == "broker":
            self._registry = registry

    @hookimpl
    def rmq_broker_lifespan(self, kernel: Kernel, broker: BrokerContext) -> Any:
        if self.config is None or not self.config.listenPort:
            return None
        return self._serve(kernel, broker, self.config)

    @asynccontextmanager
    async def _serve(self, kernel: Kernel, broker: BrokerContext, cfg: DashboardConfig) -> AsyncIterator[None]:
        import uvicorn

        from rmq.plugins.dashboard.app import make_app
        from rmq.plugins.dashboard.backend import Backend
        from rmq.plugins.dashboard.guard import guarded_protocol

        try:
            sock = _listen(cfg.listenHost, cfg.listenPort)
        except OSError as e:
            if kernel.config.source != EMBEDDED:
                bind_error(e, "dashboard.listenPort", cfg.listenHost, cfg.listenPort)
            # a first run must not fail for a busy 8080: the dashboard is a convenience there
            log.warning("dashboard: cannot listen on %s:%d (%s); running without it", cfg.listenHost,
                        cfg.listenPort, e)
            yield
            return
        acl_on = bool(getattr(broker.config, "aclEnable", False))
        accounts = self._registry.services.get("acl") if (acl_on and self._registry is not None) else None
        backend = Backend(broker, _namesrv_addrs(kernel, broker), acl_on=acl_on, accounts=accounts)
        self.port = kernel.ports["dashboard"] = sock.getsockname()[1]
        app = make_app(backend, allowed_hosts(cfg, self.port), cfg.maxHeaderBytes)
        protocol = guarded_protocol(cfg.headerTimeout, cfg.bodyTimeout, cfg.maxConnections)
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off", server_header=False,
                                proxy_headers=False, ws="none", timeout_graceful_shutdown=3, http=protocol,
                                timeout_keep_alive=cfg.keepAliveTimeout,  # type: ignore[arg-type]
                                h11_max_incomplete_event_size=cfg.maxHeaderBytes)
        logging.getLogger("uvicorn.error").setLevel(logging.WARNING)  # rmqd logs the start itself
        server = _Server(config)
        sampler = asyncio.get_running_loop().create_task(backend.sample_forever(), name="rmq-dashboard-stats")

        async def run() -> None:
            try:
                await server.serve(sockets=[sock])
            except SystemExit:  # uvicorn's way out of a failed start-up must not end the daemon
                log.error("dashboard server could not start")

        task = asyncio.get_running_loop().create_task(run(), name="rmq-dashboard")
        task.add_done_callback(_report)
        log.info("dashboard on http://%s:%d/%s", cfg.listenHost, self.port, " (HTTP Basic: ACL accounts)" if acl_on
                 else "")
        try:
            yield
        finally:
            server.should_exit = True
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(task), 5)
            if not task.done():
                task.cancel()
            await backend.aclose()
            sock.close()


class _Server:
    """uvicorn's Server without its signal handling: rmqd owns SIGTERM/SIGINT (uvicorn would take them
    with ``signal.signal`` for as long as it serves, and re-raise them at exit)."""

    def __new__(cls, config: Any) -> Any:
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

            def install_signal_handlers(self) -> None:  # uvicorn < 0.29
                return None

        return Server(config)


def _listen(host: str, port: int) -> socket.socket:
    """Bound here (not by uvicorn, which exits the process when it cannot bind)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def _namesrv_addrs(kernel: Kernel, broker: Any) -> list[str]:
    """The name servers the broker registers with (its own embedded one included)."""
    find = getattr(broker, "namesrv_addrs", None)
    addrs = list(find()) if callable(find) else []
    if not addrs:
        addrs = [a.strip() for a in (broker.config.namesrvAddr or "").split(";") if a.strip()]
    return addrs


def _report(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("dashboard server stopped: %s", task.exception())
