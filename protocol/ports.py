"""Why a listener could not bind, as the one line ``rmqd`` prints before it exits with status 2.

Every listener a role opens (remoting, VIP, HA, gRPC, dashboard, metrics, controller, Raft)
turns its bind's ``OSError`` into :func:`bind_error`: a :class:`BindError`, the ``ConfigError``
``rmqd`` already reports as ``rmqd: error: ...`` with exit status 2, naming the address and the
setting that chose the port. For a port in use, the daemon adds the process listening on it
(``rmq.kernel.net.port_holder`` reads ``/proc``: I/O, so not here). It lives here, shared by
every plugin that listens (plugins import no other plugin); the probe bind for listeners that
hide the errno is ``rmq.kernel.check_bindable``.
"""

from __future__ import annotations

import errno
from typing import NoReturn

from rmq.kernel import ConfigError

__all__ = ["BindError", "bind_error"]

_WHY = {
    errno.EADDRINUSE: "address already in use",
    errno.EACCES: "permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE)",
    errno.EADDRNOTAVAIL: "address not available on this host (check the listen host)",
}


class BindError(ConfigError):
    """A listener could not bind ``port``; ``in_use`` when another socket holds it."""

    def __init__(self, message: str, port: int, in_use: bool) -> None:
        super().__init__(message)
        self.port = port
        self.in_use = in_use

    def held_by(self, holder: tuple[int, str] | None, own_pid: int) -> BindError:
        """This error naming ``holder`` (pid, command line; None: unknown) when it is ``own_pid``'s or another's."""
        if holder is None:
            return self
        pid, cmd = holder
        who = "this rmqd itself (another of its listeners)" if pid == own_pid else f"pid {pid} ({cmd})"
        return BindError(f"{self}, held by {who}", self.port, self.in_use)


def bind_error(exc: OSError, key: str, host: str, port: int) -> NoReturn:
    """Raise the start-up error for a listener that could not bind ``host:port`` (set by ``key``)."""
    code = exc.errno
    why = _WHY.get(code or 0) or (exc.strerror or str(exc))
    raise BindError(f"{key}: cannot listen on {host or '0.0.0.0'}:{port}: {why}", port,
                    code == errno.EADDRINUSE) from None
