"""Why a listener could not bind, as the one line ``rmqd`` prints before it exits with status 2.

Every listener a role opens (remoting, VIP, HA, gRPC, dashboard, metrics, controller, Raft)
turns its bind's ``OSError`` into :func:`bind_error`: the ``ConfigError`` ``rmqd`` already
reports as ``rmqd: error: ...`` with exit status 2, naming the address, the setting that
chose the port and, for a port in use, the process listening on it when ``/proc`` tells.
It lives here, shared by every plugin that listens (plugins import no other plugin), rather
than in the kernel: the ``/proc`` scan is I/O and Linux-specific, and the kernel's line budget
is for contracts.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path
from typing import NoReturn

from rmq.kernel import ConfigError

__all__ = ["bind_error", "check_bindable", "port_holder"]

_LISTEN = "0A"  # the TCP_LISTEN state in /proc/net/tcp{,6}
_WHY = {
    errno.EADDRINUSE: "address already in use",
    errno.EACCES: "permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE)",
    errno.EADDRNOTAVAIL: "address not available on this host (check the listen host)",
}


def bind_error(exc: OSError, key: str, host: str, port: int) -> NoReturn:
    """Raise the start-up error for a listener that could not bind ``host:port`` (set by ``key``)."""
    code = exc.errno
    why = _WHY.get(code or 0) or (exc.strerror or str(exc))
    if code == errno.EADDRINUSE:
        holder = port_holder(port)
        if holder is not None:
            pid, cmd = holder
            who = "this rmqd itself (another of its listeners)" if pid == os.getpid() else f"pid {pid} ({cmd})"
            why += f", held by {who}"
    raise ConfigError(f"{key}: cannot listen on {host or '0.0.0.0'}:{port}: {why}") from None


def check_bindable(key: str, host: str, port: int) -> None:
    """Bind and release ``host:port`` (SO_REUSEADDR, as the listeners do) for listeners whose own bind
    reports no errno (grpcio, pysyncobj's thread); raise :func:`bind_error`'s error if it fails."""
    if not port:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host or ("::" if family == socket.AF_INET6 else "0.0.0.0"), port))
            s.listen(1)  # a port held by a bound, non-listening socket binds under SO_REUSEADDR; listen() fails
        except OSError as e:
            bind_error(e, key, host, port)


def port_holder(port: int) -> tuple[int, str] | None:
    """(pid, command line) of the process with a socket listening on ``port``, when /proc tells."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == _LISTEN and int(f[1].rpartition(":")[2], 16) == port:
                inodes.add(f"socket:[{f[9]}]")
    if not inodes:
        return None
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or not ours to look at
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") not in inodes:
                    continue
            except OSError:
                continue
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                raw = b""
            cmd = "".join(c if c.isprintable() else " " for c in raw.decode("utf-8", "replace")).strip()
            return int(pid), cmd[:200] or "?"
    return None
