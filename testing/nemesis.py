"""The nemesis (issue #31): network partitions and process pauses for a test cluster on one machine.

Every node of a cluster gets its own loopback address (Linux answers on all of 127.0.0.0/8) and rmqd
connects from the address it listens on (``rmq.kernel.net.source_host``), so an nftables rule on a
(source, destination) pair of node addresses cuts exactly that link and nothing else.

Safety, because other test runs on the machine use 127.0.0.1 at the same time:

* only addresses in ``127.0.0.10``–``127.0.0.250`` (:data:`LOW`–:data:`HIGH`) are accepted
  (:func:`check_addr`); a rule always names both a source and a destination from that range, so no
  rule can match 127.0.0.1 or anything off loopback;
* every rule lives in one nftables table of this process, ``inet rmq_nemesis_<pid>``, deleted when
  the nemesis closes, at interpreter exit, and by the next nemesis that finds its owner dead;
* every paused process is resumed when the nemesis closes.

Each pytest-xdist worker takes its own block of addresses (:func:`node_addrs`), so two chaos tests
running side by side never share one.
"""

from __future__ import annotations

import atexit
import contextlib
import ipaddress
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

LOW, HIGH = 10, 250  # the last octet range of 127.0.0.x the nemesis may use
TABLE_PREFIX = "rmq_nemesis_"
BLOCK = 20  # addresses per xdist worker


class NemesisError(RuntimeError):
    """The nemesis cannot do what was asked (no nft, an address outside its range, nft failed)."""


def check_addr(addr: str) -> str:
    """``addr`` in canonical form if it is an IPv4 address in 127.0.0.LOW–127.0.0.HIGH; ValueError
    otherwise (127.0.0.1, other loopback networks, anything off the machine, host names, v6)."""
    if not isinstance(addr, str) or addr.strip() != addr or not re.fullmatch(r"[0-9.]+", addr):
        raise ValueError(f"nemesis: {addr!r} is not a dotted IPv4 address")
    try:
        ip = ipaddress.IPv4Address(addr)
    except ipaddress.AddressValueError as e:
        raise ValueError(f"nemesis: {addr!r}: {e}") from None
    if str(ip) != addr:
        raise ValueError(f"nemesis: {addr!r} is not in canonical form")
    if ip not in ipaddress.IPv4Network("127.0.0.0/24") or not LOW <= int(ip) & 0xFF <= HIGH:
        raise ValueError(f"nemesis: {addr} is outside 127.0.0.{LOW}-127.0.0.{HIGH}")
    return addr


def node_addrs(n: int, worker: str | None = None) -> list[str]:
    """``n`` node addresses of this test process's block: 127.0.0.11, .12, ... for xdist worker gw0 (or
    no xdist), 127.0.0.31, ... for gw1, and so on."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "") if worker is None else worker
    k = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    first = LOW + 1 + BLOCK * k
    if n > BLOCK - 1 or first + n - 1 > HIGH:
        raise ValueError(f"nemesis: no block of {n} addresses for worker {worker!r}")
    return [check_addr(f"127.0.0.{first + i}") for i in range(n)]


def _nft(script: str) -> None:
    nft = shutil.which("nft") or ("/usr/sbin/nft" if os.path.exists("/usr/sbin/nft") else None)
    if nft is None:
        raise NemesisError("nemesis: no nft (apt-get install nftables: make chaos-deps)")
    r = subprocess.run([nft, "-f", "-"], input=script, text=True, capture_output=True, timeout=30)
    if r.returncode != 0:
        raise NemesisError(f"nemesis: nft failed ({r.returncode}): {r.stderr.strip()}\n{script}")


def _tables() -> list[str]:
    nft = shutil.which("nft") or "/usr/sbin/nft"
    r = subprocess.run([nft, "list", "tables", "inet"], text=True, capture_output=True, timeout=30)
    return [ln.split()[-1] for ln in r.stdout.splitlines() if ln.split()[-1:] and
            ln.split()[-1].startswith(TABLE_PREFIX)]


def remove_stale_tables() -> list[str]:
    """Delete every nemesis table whose owning process is gone; the names deleted."""
    gone = []
    for t in _tables():
        pid = t[len(TABLE_PREFIX):]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            with contextlib.suppress(NemesisError):
                _nft(f"delete table inet {t}\n")
                gone.append(t)
    return gone


class Nemesis:
    """Cuts links between node addresses (``cut``, ``partition``, ``bridge``, ``isolate``), heals them,
    pauses and resumes processes. Use as a context manager (or call :meth:`close`)."""

    def __init__(self) -> None:
        self.table = f"{TABLE_PREFIX}{os.getpid()}"
        self.cuts: set[tuple[str, str]] = set()
        self.redirects: set[tuple[str, str, int]] = set()
        self.paused: dict[int, str] = {}
        self.skews: set[Path] = set()
        self._closed = False
        remove_stale_tables()
        _nft(f"table inet {self.table}\ndelete table inet {self.table}\n"
             f"table inet {self.table} {{\n  chain out {{ type filter hook output priority 0; policy accept; }}\n"
             f"  chain nat_out {{ type nat hook output priority -100; policy accept; }}\n}}\n")
        atexit.register(self.close)

    def __enter__(self) -> Nemesis:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ network
    def cut(self, a: str, b: str, both: bool = True) -> None:
        """Drop every packet from ``a`` to ``b`` (and from ``b`` to ``a`` with ``both``): existing
        connections stall, new ones time out, as on a real partition (drop, not reject)."""
        pairs = [(check_addr(a), check_addr(b))] + ([(b, a)] if both else [])
        new = [p for p in pairs if p not in self.cuts and p[0] != p[1]]
        if new:
            _nft("".join(f"add rule inet {self.table} out ip saddr {s} ip daddr {d} drop\n" for s, d in new))
            self.cuts.update(new)

    def partition(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        """Cut every link between the two sides, both ways."""
        bs = list(side_b)
        for a in side_a:
            for b in bs:
                self.cut(a, b)

    def isolate(self, node: str, others: Iterable[str]) -> None:
        """Cut ``node`` from each of ``others``, both ways."""
        self.partition([node], others)

    def bridge(self, side_a: Sequence[str], side_b: Sequence[str], bridge: str) -> None:
        """Two halves that cannot reach each other, and ``bridge`` (in neither list) that sees both."""
        if bridge in side_a or bridge in side_b:
            raise ValueError("nemesis: the bridge node belongs to neither side")
        check_addr(bridge)
        self.partition(side_a, side_b)

    def redirect(self, src: str, dst: str, port: int, via: str) -> None:
        """``src``'s new connections to ``dst``:``port`` go to ``via`` (host:port, a
        :class:`rmq.testing.relay.Relay`) instead. Neither node knows: a NAT rule rewrites the
        destination. The connection open now is reset at ``src``'s end, so it reconnects through
        ``via``, while ``dst`` never gets the reset (it is dropped like the rest of that flow) and
        finds the connection dead by itself, as when a reset is lost."""
        vhost, _, vport = via.rpartition(":")
        src, dst, vhost = check_addr(src), check_addr(dst), check_addr(vhost)
        if vhost in (src, dst):
            raise ValueError("nemesis: the relay needs an address of its own")
        p, vp = int(port), int(vport)
        t = self.table
        # NAT runs before the filter: a redirected packet no longer names dst:port, so the resets
        # below hit only the connection that was open before
        _nft(f"add rule inet {t} nat_out ip saddr {src} ip daddr {dst} tcp dport {p} dnat ip to {vhost}:{vp}\n"
             f"add rule inet {t} out ip saddr {src} ip daddr {dst} tcp dport {p} reject with tcp reset\n"
             f"add rule inet {t} out ip saddr {dst} ip daddr {src} tcp sport {p} reject with tcp reset\n")
        self.redirects.add((src, dst, p))

    def heal(self) -> None:
        """Remove every cut and redirect (connections already relayed stay until their relay closes)."""
        if self.cuts or self.redirects:
            _nft(f"flush chain inet {self.table} out\nflush chain inet {self.table} nat_out\n")
            self.cuts.clear()
            self.redirects.clear()

    def rules(self) -> str:
        """The table as nft lists it (for a failure message)."""
        nft = shutil.which("nft") or "/usr/sbin/nft"
        return subprocess.run([nft, "list", "table", "inet", self.table], text=True, capture_output=True,
                              timeout=30).stdout

    # ------------------------------------------------------------------ processes
    def pause(self, pid: int, name: str = "") -> None:
        """SIGSTOP ``pid`` (a long GC pause, a stopped VM); resumed at :meth:`resume` or close."""
        os.kill(pid, signal.SIGSTOP)
        self.paused[pid] = name or str(pid)

    def resume(self, pid: int | None = None) -> None:
        """SIGCONT ``pid`` (every paused process when None)."""
        for p in [pid] if pid is not None else list(self.paused):
            self.paused.pop(p, None)
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGCONT)

    # ------------------------------------------------------------------ clocks
    def jump_clock(self, skew_file: Path, ms: int) -> None:
        """Shift the wall clock of the process started with :func:`clock_env` (``skew_file``) to
        ``ms`` milliseconds from the machine's (seen within 100 ms); undone at close."""
        write_skew(skew_file, ms)
        self.skews.add(Path(skew_file))

    def close(self) -> None:
        """Resume every paused process, undo clock jumps and delete the table (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.resume()
        for f in self.skews:
            with contextlib.suppress(OSError):
                write_skew(f, 0)
        with contextlib.suppress(NemesisError):
            _nft(f"delete table inet {self.table}\n")
        self.cuts.clear()
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)


def write_skew(skew_file: Path, ms: int) -> None:
    """Write a clock offset for ``rmq.kernel.clock`` atomically (the process reads it whole or not at all)."""
    tmp = Path(skew_file).with_name(f".{Path(skew_file).name}.tmp")
    tmp.write_text(f"{int(ms)}\n")
    os.replace(tmp, skew_file)


def clock_env(skew_file: Path) -> dict[str, str]:
    """The environment that gives a daemon the clock seam (``RmqdProcess(env=...)``), offset 0 to start."""
    from rmq.kernel.clock import ENV

    write_skew(skew_file, 0)
    return {ENV: str(skew_file)}


def tcp_peers(local: str, port: int) -> set[str]:
    """The remote addresses of established TCP connections to ``local:port`` (IPv4, from
    /proc/net/tcp): who is connected to a node's listener, and from which address."""
    want_local = f"{_hex_addr(local)}:{port:04X}"
    out: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            f = line.split()
            if len(f) > 3 and f[1] == want_local and f[3] == "01":  # 01: ESTABLISHED
                out.add(_unhex_addr(f[2].partition(":")[0]))
    return out


def tcp_unread(local: str, port: int) -> int:
    """Bytes received but not yet read on the established connections to ``local:port``: requests
    waiting in a stopped process's sockets."""
    want_local = f"{_hex_addr(local)}:{port:04X}"
    total = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            f = line.split()
            if len(f) > 4 and f[1] == want_local and f[3] == "01":
                total += int(f[4].partition(":")[2], 16)
    return total


def _hex_addr(addr: str) -> str:
    return "".join(f"{b:02X}" for b in reversed(ipaddress.IPv4Address(addr).packed))


def _unhex_addr(h: str) -> str:
    return str(ipaddress.IPv4Address(bytes(reversed(bytes.fromhex(h)))))
