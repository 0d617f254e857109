"""The one local-address probe: what peers would reach this host by.

Brokers write it into message ids (when no address is configured) and clients into client ids
and UNIQ_KEYs; both ask here, once per process. A UDP ``connect`` picks the route and
sends no packet; hosts without a route fall back to their name's address, then loopback.
"""

from __future__ import annotations

import functools
import socket


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
