"""RocketMQ's remote-address patterns for ACL white lists (``whiteRemoteAddress``,
``globalWhiteRemoteAddresses``), compiled once to a predicate on the peer's IP text.

Forms (reference §4.1): blank = never; ``*``, ``*.*.*.*``, ``*:*:*:*:*:*:*:*`` = any;
``a,b,c`` = a list of full addresses; ``a.b.c.{1,2}`` = a set on the last part;
``*`` or ``n-m`` in one IPv4 octet (2nd to 4th) = a range on the first such octet, earlier octets
exact and later ones ignored (``10.10.*.*`` = 10.10.0-255.x), the same per hex group for IPv6;
otherwise one exact address. A pattern that is none of these is an error at load.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

Matcher = Callable[[str], bool]

_ANY = frozenset(("*", "*.*.*.*", "*:*:*:*:*:*:*:*"))


class AddressPatternError(ValueError):
    pass


def _never(ip: str) -> bool:
    return False


def _always(ip: str) -> bool:
    return True


def normalize(ip: str) -> str:
    """IPv4 as is; IPv6 expanded to 8 upper-case groups (RocketMQ's form); the zone dropped."""
    ip = ip.strip().strip("[]").partition("%")[0]
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    if isinstance(addr, ipaddress.IPv6Address):
        mapped = addr.ipv4_mapped
        if mapped is not None:
            return str(mapped)
        return addr.exploded.upper()
    return str(addr)


def _exact(text: str) -> str:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise AddressPatternError(f"{text!r} is not an IP address") from None
    return normalize(text)


def compile_pattern(pattern: str | None) -> Matcher:
    p = (pattern or "").strip()
    if not p:
        return _never
    if p in _ANY:
        return _always
    if "," in p and "{" not in p:
        members = frozenset(_exact(x.strip()) for x in p.split(",") if x.strip())
        return lambda ip: normalize(ip) in members
    v6 = ":" in p
    sep = ":" if v6 else "."
    if p.endswith("}"):
        head, _, tail = p.rpartition(sep)
        if not tail.startswith("{"):
            raise AddressPatternError(f"{p!r}: a set must be the last part, as a.b.c.{{1,2}}")
        members = frozenset(_exact(f"{head}{sep}{x.strip()}") for x in tail[1:-1].split(",") if x.strip())
        return lambda ip: normalize(ip) in members
    if "*" in p or "-" in p:
        return _range(p, v6)
    exact = _exact(p)
    return lambda ip: normalize(ip) == exact


def _range(p: str, v6: bool) -> Matcher:
    parts = p.split(":" if v6 else ".")
    width, base, top = (8, 16, 0xFFFF) if v6 else (4, 10, 255)
    if len(parts) != width:
        raise AddressPatternError(f"{p!r}: a range pattern needs {width} parts")
    idx = next(i for i, x in enumerate(parts) if "*" in x or "-" in x)
    if idx == 0:
        raise AddressPatternError(f"{p!r}: the first part cannot be a range")
    try:
        prefix = [int(x, base) for x in parts[:idx]]
        part = parts[idx]
        if part == "*":
            lo, hi = 0, top
        else:
            a, _, b = part.partition("-")
            lo, hi = int(a, base), int(b, base)
    except ValueError:
        raise AddressPatternError(f"{p!r}: parts must be numbers, '*' or n-m") from None
    if not (0 <= lo <= hi <= top) or hi == 0 or any(not 0 <= x <= top for x in prefix):
        raise AddressPatternError(f"{p!r}: range {parts[idx]!r} out of order or out of bounds")

    def match(ip: str) -> bool:
        got = normalize(ip).split(":" if v6 else ".")
        if len(got) != width:
            return False
        try:
            nums = [int(x, base) for x in got[: idx + 1]]
        except ValueError:
            return False
        return nums[:idx] == prefix and lo <= nums[idx] <= hi

    return match
