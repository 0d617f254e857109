"""The relay (rmq.testing.relay) behind a nemesis redirect: a connection open before the redirect is
reset, the next one goes through the relay and each direction waits its delay; a cut breaks it; the
relay stops by itself at the end of its lifetime. Plain sockets on the nemesis's addresses."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from rmq.testing.daemon import eventually
from rmq.testing.nemesis import Nemesis, node_addrs
from rmq.testing.relay import Impair, Relay

pytestmark = [pytest.mark.chaos]


@contextlib.contextmanager
def echo_server(host: str) -> Iterator[int]:
    srv = socket.create_server((host, 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve(c: socket.socket) -> None:
        with c, contextlib.suppress(OSError):
            while data := c.recv(65536):
                c.sendall(data)

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                c, _ = srv.accept()
                threading.Thread(target=serve, args=(c,), daemon=True).start()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join(5)
        srv.close()


def connect(src: str, dst: str, port: int) -> socket.socket:
    s = socket.socket()
    s.settimeout(10)
    s.bind((src, 0))
    s.connect((dst, port))
    return s


def round_trip(s: socket.socket, payload: bytes = b"ping") -> float:
    t0 = time.monotonic()
    s.sendall(payload)
    got = b""
    while len(got) < len(payload):
        chunk = s.recv(65536)
        assert chunk, "closed"
        got += chunk
    assert got == payload
    return time.monotonic() - t0


def test_redirect_through_delaying_relay() -> None:
    client, server, relay_host = node_addrs(3)
    with echo_server(server) as port, Nemesis() as n, \
            Relay(relay_host, f"{server}:{port}", to_target=Impair(delay_s=0.1),
                  to_client=Impair(delay_s=0.2)) as relay:
        before = connect(client, server, port)
        assert round_trip(before) < 5
        n.redirect(client, server, port, relay.addr)
        with pytest.raises(OSError):  # reset: the old connection is gone, not stalled
            for _ in range(20):
                round_trip(before)
                time.sleep(0.1)
        after = connect(client, server, port)  # the same destination, through the relay
        rtts = [round_trip(after) for _ in range(3)]
        assert min(rtts) >= 0.3, rtts  # 0.1 s there, 0.2 s back: the relay held both
        eventually(lambda: relay.stats.bytes_to_client == 12, 10, "the relay counted the echoes")
        assert relay.stats.conns == 1
        n.heal()
        direct = connect(client, server, port)
        round_trip(direct)
        assert relay.stats.conns == 1  # healed: the new connection went straight to the server
        for s in (before, after, direct):
            s.close()


def test_cut_breaks_the_connection_and_lifetime_ends_the_relay() -> None:
    client, server, relay_host = node_addrs(3)
    with echo_server(server) as port:
        relay = Relay(relay_host, f"{server}:{port}", to_client=Impair(cut=1.0), lifetime_s=3).start()
        s = connect(client, relay.host, relay.port)
        s.sendall(b"x")
        assert s.recv(10) == b""  # the answer's chunk cut the connection: closed, nothing delivered
        assert relay.stats.cuts == 1
        eventually(lambda: not relay._thread.is_alive(), 30, "the relay stopped at the end of its lifetime")
        with pytest.raises(OSError):
            connect(client, relay.host, relay.port)
        relay.close()
