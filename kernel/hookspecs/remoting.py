"""Remoting: the transport that carries RocketMQ remoting commands.

Sans-IO codecs live in ``rmq.protocol``; a remoting plugin is the thin I/O layer
around them. The bundled ``tcp`` plugin uses anyio streams. The same plugin
serves the NameServer and Broker roles (one server each) and the client side
of ``rmq.client`` and of the broker's calls to name servers.

Every port faces strangers (DESIGN rule 9). A remoting plugin is the decode boundary
and the supervisor of its connections:

* frames are decoded, and opaques, pending requests and deadlines tracked, by the
  sans-IO ``rmq.protocol.session.Session`` (strict JSON headers, range-checked ints); a
  frame whose header fails after its opaque was read is answered with SYSTEM_ERROR and
  the connection kept, anything else closes that connection only;
* nothing raised by a peer's input, a reset socket, a failed accept or a handler leaves
  the connection's own task: not to the event loop, not to another connection;
* resources are bounded: buffers follow the frame being read (nothing held per idle
  connection), ``max_connections`` is enforced at accept, accept errors such as EMFILE
  back off and retry, and repeated warnings are rate-limited
  (``rmq.kernel.ratelimit.RateLimitedLog``, peer text through ``rmq.protocol.names.printable``).

``rmq.testing.remoting.RemotingContract`` checks these for any plugin.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from rmq.kernel.markers import hookspec

if TYPE_CHECKING:
    from anyio.abc import TaskStatus

    from rmq.kernel.kernel import Kernel
    from rmq.protocol.command import RemotingCommand


@attrs.define
class RemotingConfig:
    """Transport settings of one server or client.

    ``max_connections`` (server only) comes from the role's ``maxConnections`` setting
    (``[namesrv]``/``[broker]``, default 4096): connections held at once, counting those
    still being set up. A connection accepted beyond it is closed at once, and one
    rate-limited warning says so; the listener keeps accepting.
    """

    host: str = "0.0.0.0"
    port: int = 0  # server: 0 = any free port (tests); client: unused
    max_frame_size: int = 16 * 1024 * 1024  # counts the length word, as Java's frameMaxLength
    idle_timeout: float = 120.0  # seconds without traffic before a connection is closed
    connect_timeout: float = 3.0
    max_connections: int = 4096  # server: connections held at once; the next ones are closed at accept
    name: str = "remoting"  # for log lines: "namesrv", "broker", "client"
    key: str = ""  # server: the setting that chose ``port`` ("broker.listenPort"), named if it cannot be bound
    # TLS. server: what ``rmq_remoting_tls`` returns (``mode`` disabled/permissive/enforcing, ``context()``),
    # None = plain; client: an ``ssl.SSLContext``, or an ``rmq.protocol.tls.ClientTls`` the transport builds
    # one from, None = plain
    tls_server: Any = None
    tls_client: Any = None
    # client: the address outgoing connections bind before connecting ("" = the OS picks), the role's own
    # listenHost when that names one address: peers, firewalls and a test's packet filter see the node's address
    local_host: str = ""


@runtime_checkable
class Connection(Protocol):
    """One peer connection, shared by requests in both directions.

    Ordering: frames are written whole and in call order; responses may
    arrive in any order and are matched by opaque. Cancellation of a waiting
    ``send_request`` forgets the opaque; a late response is dropped.
    """

    id: int
    remote_addr: tuple[str, int]
    local_addr: tuple[str, int]
    attributes: dict[str, Any]  # per-connection state owned by processors (client id, groups...)

    @property
    def closed(self) -> bool: ...

    async def send_request(self, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its response; raises on timeout or close."""
        ...

    async def send_oneway(self, cmd: RemotingCommand) -> None:
        """Send a request marked oneway; never waits for an answer."""
        ...

    async def send_response(self, cmd: RemotingCommand) -> None:
        """Send a response produced outside the handler's return path (held pulls)."""
        ...

    def on_close(self, callback: Callable[[Connection], None]) -> None:
        """Run ``callback`` once when the connection closes, whoever closes it."""
        ...

    async def aclose(self) -> None: ...


RequestHandler = Callable[["Connection", "RemotingCommand"], Awaitable["RemotingCommand | None"]]
"""Handles one request; returns the response, or None for none (oneway, or answered later).

Each request runs in its own task, so a handler may wait (a held long-poll
pull) without delaying other requests on the same connection. A handler may raise;
the transport answers through ``rmq.protocol.dispatch.error_response`` (the one place
exceptions become responses): ``rmq.protocol.command.HeaderError`` (from the
``ext_int``/``ext_i32``/``ext_str`` accessors) and ``InvalidNameError`` keep their
``code`` and message as remark, any other exception is SYSTEM_ERROR; the connection
carries on. Request-code tables are ``rmq.protocol.dispatch.Router`` objects.
"""


@runtime_checkable
class RemotingServer(Protocol):
    """A listening endpoint dispatching every request to one handler.

    The server supervises accept and every connection (see the module doc): ``serve``
    ends only when cancelled or closed, never because of what a peer did.
    """

    @property
    def port(self) -> int:
        """The bound port (valid once ``serve`` reported started)."""
        ...

    async def serve(self, *, task_status: TaskStatus[int]) -> None:
        """Bind, report the bound port through ``task_status.started(port)``, serve until cancelled."""
        ...

    def connections(self) -> list[Connection]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class RemotingClient(Protocol):
    """Outbound connections, one per address, reused and re-opened on demand.

    Server-initiated requests arriving on these connections go to the handler
    given at construction.
    """

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Request/response to ``addr`` ("host:port"); raises on connect failure or timeout."""
        ...

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None: ...

    async def connection(self, addr: str) -> Connection: ...

    async def aclose(self) -> None: ...


@hookspec(firstresult=True)
def rmq_remoting_make_server(kernel: Kernel, config: RemotingConfig, handler: RequestHandler) -> RemotingServer | None:
    """Build a server for one role.

    Called once per role (namesrv, broker) at start-up. ``handler`` receives
    every decoded request. Return None to defer to the next plugin.

    Arguments:
    - ``kernel``: the running ``Kernel`` (config, hook relay, services).
    - ``config``: a ``RemotingConfig`` (bind address or client settings, frame limit).
    - ``handler``: the request handler every decoded request is given to.
    """


@hookspec(firstresult=True)
def rmq_remoting_make_client(
    kernel: Kernel, config: RemotingConfig, handler: RequestHandler | None
) -> RemotingClient | None:
    """Build an outbound client (broker -> namesrv, rmq.client -> cluster).

    Called once per component at start-up. ``handler`` answers requests the
    remote side initiates (None: answer REQUEST_CODE_NOT_SUPPORTED).

    Arguments:
    - ``kernel``: the running ``Kernel`` (config, hook relay, services).
    - ``config``: a ``RemotingConfig`` (bind address or client settings, frame limit).
    - ``handler``: the request handler every decoded request is given to.
    """


@hookspec(firstresult=True)
def rmq_remoting_tls(kernel: Kernel) -> Any:
    """The daemon's TLS as the transport built it from the ``[tls]`` table; None: this plugin has none.

    Called by every other component that listens or connects with TLS (the HA port, the gRPC
    endpoint), at start-up, as often as it likes (the result is built once), so one process
    serves one certificate and reads certificate files in one place: the transport's. The
    result has ``config`` (an ``rmq.protocol.tls.TlsConfig``), ``mode``, ``context()`` (the
    server ``ssl.SSLContext``, None when no certificate can be had; blocking the first time in
    test mode, which makes a throwaway certificate), ``client_context()`` (rmqd's outgoing
    connections) and ``pem()`` (``(certificate chain, key, trusted client CAs or None)`` PEM
    bytes for servers that take bytes, as grpcio does; None when no certificate can be had).
    A malformed table raises ``ConfigError``.

    Arguments:
    - ``kernel``: the running ``Kernel`` (its config holds the ``[tls]`` table).
    """
