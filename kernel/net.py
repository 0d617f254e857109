"""The host's network facts the roles ask about: the local address, and a port's bind and holder.

``local_ipv4``: what peers would reach this host by. Brokers write it into message ids
(when no address is configured) and clients into client ids and UNIQ_KEYs; both ask here, once
per process. A UDP ``connect`` picks the route and sends no packet; hosts without a route fall
back to their name's address, then loopback.

``check_bindable`` and ``port_holder`` serve the one line ``rmqd`` prints when a listener
cannot bind (``rmq.protocol.ports`` words it): the first for listeners whose own bind hides
the errno, the second for the daemon to name who holds a port in use (Linux ``/proc``).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import socket
from pathlib import Path


@functools.cache
def local_ipv4() -> str:
    """The first non-loopback IPv4 address of this host, else ``127.0.0.1``."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            ip = str(s.getsockname()[0])
            if ip and not ip.startswith(("0.", "127.")):
                return ip
    except OSError:
        pass
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            ip = str(info[4][0])
            if not ip.startswith("127."):
                return ip
    except OSError:
        pass
    return "127.0.0.1"


def source_host(listen_host: str) -> str:
    """The address a role's outgoing connections bind: its ``listenHost`` when that names one address,
    "" (the OS picks by route) for the wildcards. A node on 127.0.0.12 then reaches its peers from
    127.0.0.12, not from 127.0.0.1, so peers and packet filters see which node is talking. The plain
    loopback names stay "": the OS already picks them for loopback peers, and binding them would make
    any other peer unreachable (rmqd's no-config default listens on 127.0.0.1)."""
    host = listen_host.strip().strip("[]")
    return "" if host in ("", "0.0.0.0", "::", "127.0.0.1", "::1", "localhost") else host


def check_bindable(key: str, host: str, port: int) -> None:
    """Bind and release ``host:port`` (SO_REUSEADDR, as the listeners do) for listeners whose own bind
    reports no errno (grpcio, pysyncobj's thread); raise ``rmq.protocol.ports.bind_error``'s error if it fails."""
    if not port:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host or ("::" if family == socket.AF_INET6 else "0.0.0.0"), port))
            s.listen(1)  # a port held by a bound, non-listening socket binds under SO_REUSEADDR; listen() fails
        except OSError as e:
            from rmq.protocol.ports import bind_error  # protocol/ imports the kernel: not at import time

            bind_error(e, key, host, port)


def port_holder(port: int) -> tuple[int, str] | None:
    """(pid, command line) of a process with a socket listening on ``port``, when ``/proc`` tells (the
    listening sockets' inodes from /proc/net/tcp{,6}, then the process whose descriptor links to one)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for f in (line.split() for line in Path(table).read_text().splitlines()[1:]):
                if len(f) > 9 and f[3] == "0A" and int(f[1].rpartition(":")[2], 16) == port:  # 0A: TCP_LISTEN
                    inodes.add(f"socket:[{f[9]}]")
    for fd in glob.iglob("/proc/[0-9]*/fd/*") if inodes else ():  # unreadable processes are skipped
        with contextlib.suppress(OSError):
            if os.readlink(fd) in inodes:
                pid = fd.split("/")[2]
                raw = b""
                with contextlib.suppress(OSError):
                    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                cmd = "".join(c if c.isprintable() else " " for c in raw.decode("utf-8", "replace")).strip()
                return int(pid), cmd[:200] or "?"
    return None
