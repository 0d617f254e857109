"""The nemesis's own guarantees: it touches only its address range, a cut blocks exactly the chosen
pair (127.0.0.1 untouched), heal and close restore, a leftover table is removed, a pause is resumed."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.testing.daemon import eventually
from rmq.testing.fuzz import fuzz_settings
from rmq.testing.nemesis import HIGH, LOW, TABLE_PREFIX, Nemesis, _tables, check_addr, node_addrs


def _allowed(addr: str) -> bool:
    try:
        ip = ipaddress.IPv4Address(addr)
    except ValueError:
        return False
    return str(ip) == addr and str(ip).startswith("127.0.0.") and LOW <= int(ip) & 0xFF <= HIGH


@fuzz_settings(300)
@given(st.one_of(st.text(max_size=20), st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str),
                 st.integers(0, 255).map(lambda n: f"127.0.0.{n}"),
                 st.tuples(*[st.integers(0, 300)] * 4).map(lambda t: ".".join(map(str, t)))))
def test_check_addr_accepts_only_its_range(addr: str) -> None:
    if _allowed(addr):
        assert check_addr(addr) == addr
    else:
        with pytest.raises(ValueError):
            check_addr(addr)


@pytest.mark.parametrize("addr", ["127.0.0.1", "127.0.0.9", "127.0.0.251", "127.0.1.11", "10.0.0.11", "0.0.0.0",
                                  "::1", "localhost", " 127.0.0.11", "127.0.0.011", "127.0.0.11/32", ""])
def test_check_addr_refuses(addr: str) -> None:
    with pytest.raises(ValueError):
        check_addr(addr)


def test_node_addr_blocks_are_disjoint_per_worker() -> None:
    blocks = [set(node_addrs(12, f"gw{k}")) for k in range(12)]
    assert all(a.isdisjoint(b) for i, a in enumerate(blocks) for b in blocks[i + 1:])
    assert node_addrs(3, "") == ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
    with pytest.raises(ValueError):
        node_addrs(3, "gw12")  # past 127.0.0.250


def _connects(src: str, dst: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.5)
        s.bind((src, 0))
        try:
            s.connect((dst, port))
        except OSError:
            return False
        return True


@pytest.mark.chaos
def test_cut_blocks_exactly_the_pair_and_heal_restores() -> None:
    a, b, c = node_addrs(3)
    with socket.socket() as srv_b, socket.socket() as srv_lo:
        srv_b.bind((b, 0))
        srv_b.listen(16)
        srv_lo.bind(("127.0.0.1", 0))
        srv_lo.listen(16)
        pb, plo = srv_b.getsockname()[1], srv_lo.getsockname()[1]
        # an established connection a -> b, to see it stall under the cut
        est = socket.create_connection((b, pb), timeout=5, source_address=(a, 0))
        peer, _ = srv_b.accept()
        with Nemesis() as n, est, peer:
            n.cut(a, b)
            assert not _connects(a, b, pb), n.rules()
            assert _connects(c, b, pb) and _connects("127.0.0.1", b, pb)
            assert _connects(a, "127.0.0.1", plo) and _connects("127.0.0.1", "127.0.0.1", plo)
            est.sendall(b"x")
            peer.settimeout(1.5)
            with pytest.raises(TimeoutError):
                peer.recv(1)  # held back: the segment is dropped (TCP retransmits it after the heal)
            n.heal()
            assert _connects(a, b, pb)
            peer.settimeout(10)
            assert peer.recv(1) == b"x"
            n.cut(b, a, both=False)  # one way: b's packets to a dropped, a's reach b
            assert _datagram(a, b) and not _datagram(b, a)
            assert not _connects(a, b, pb)  # TCP needs both ways: a's SYN arrives, b's SYN-ACK does not
        assert n.table not in _tables()
        assert _connects(a, b, pb)


def _datagram(src: str, dst: str) -> bool:
    """Whether one UDP datagram from ``src`` reaches ``dst``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        rx.bind((dst, 0))
        rx.settimeout(1.0)
        tx.bind((src, 0))
        try:
            tx.sendto(b"d", rx.getsockname())  # a local packet dropped on output: EPERM at once
            return rx.recv(8) == b"d"
        except OSError:
            return False


@pytest.mark.chaos
def test_a_dead_owners_table_is_removed_and_refusals_add_nothing() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    stale = f"{TABLE_PREFIX}{dead.stdout.strip()}"
    subprocess.run(["nft", "add", "table", "inet", stale], check=True)
    with Nemesis() as n:
        assert stale not in _tables()
        with pytest.raises(ValueError):
            n.cut("127.0.0.1", node_addrs(1)[0])
        with pytest.raises(ValueError):
            n.partition([node_addrs(1)[0]], ["192.168.0.1"])
        assert "drop" not in n.rules()


@pytest.mark.chaos
def test_pause_is_resumed_at_close() -> None:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        with Nemesis() as n:
            n.pause(p.pid, "sleeper")
            eventually(lambda: _state(p.pid) == "T", 10, "stopped")
        eventually(lambda: _state(p.pid) != "T", 10, "resumed")
    finally:
        p.kill()
        p.wait(10)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


@pytest.mark.chaos  # Nemesis() sets up its nft table
def test_clock_seam_shifts_one_process_only(tmp_path: Path) -> None:
    """``rmq.kernel.clock.now_ms`` in a process started with the seam follows the skew file (and its
    undo at close); a process without it, and this one, keep the machine's time."""
    from rmq.kernel import clock
    from rmq.testing.nemesis import clock_env

    skew = tmp_path / "skew"
    env = {**os.environ, **clock_env(skew)}
    probe = ("import sys, time\nfrom rmq.kernel import clock\nfor line in sys.stdin:\n"
             "    print(clock.now_ms() - time.time_ns() // 1_000_000, flush=True)\n")
    p = subprocess.Popen([sys.executable, "-c", probe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=env)
    assert p.stdin is not None and p.stdout is not None

    def offset() -> int:
        p.stdin.write("?\n")
        p.stdin.flush()
        return int(p.stdout.readline())

    try:
        assert abs(offset()) < 50
        with Nemesis() as n:
            n.jump_clock(skew, 3_600_000)
            eventually(lambda: abs(offset() - 3_600_000) < 50, 10, "an hour ahead")
            n.jump_clock(skew, -60_000)
            eventually(lambda: abs(offset() + 60_000) < 50, 10, "a minute behind")
            assert abs(clock.now_ms() - time.time_ns() // 1_000_000) < 50  # this process: no seam
        eventually(lambda: abs(offset()) < 50, 10, "undone at close")
    finally:
        p.kill()
        p.wait(10)
