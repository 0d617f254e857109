"""Issue #26 item 8: the Prometheus listener against a hostile client. Garbage, an endless header, other
methods, a slow request and a crowd of idle connections; between and after them the endpoint still serves a
real scrape (the same rmqd throughout: a stranger must not be able to take it down)."""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rmq.testing.daemon import RmqdProcess, eventually, free_port

pytestmark = pytest.mark.integration  # starts rmqd processes itself (tests/conftest.py: tiers)

#: what the listener promises (rmq.plugins.metrics): at most this many connections, this long for a request
MAX_CONNECTIONS = 32
REQUEST_TIMEOUT = 5.0


@pytest.fixture(scope="module")
def metrics(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    port = free_port()
    proc = RmqdProcess(tmp_path_factory.mktemp("metsec"),
                       broker_conf={"metricsExporterType": "PROM", "metricsPromExporterPort": port})
    proc.start()
    try:
        yield port
    finally:
        proc.stop()


def scrape(port: int) -> set[str]:
    """The metric families of one real scrape."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:  # noqa: S310 - loopback
        text = r.read().decode()
    names = {fam.name for fam in text_string_to_metric_families(text)}
    assert "rocketmq_topic_number" in names
    return names


def exchange(port: int, data: bytes, wait: float = 10.0) -> bytes:
    """Send ``data``, then read until the server closes (fails if it has not within ``wait`` s)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(wait)
        try:
            s.sendall(data)
        except (ConnectionResetError, BrokenPipeError):
            return b""
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except ConnectionResetError:
            pass
        return got


def test_garbage_and_huge_headers(metrics: int) -> None:
    port = metrics
    for junk in (os.urandom(4096), b"\x00" * 100 + b"\r\n\r\n", b"GET\r\n\r\n", b"\r\n\r\n",
                 b"GET /metrics HTTP/1.1 extra words\r\n\r\n", b"GET  HTTP/1.1\r\n\r\n"):
        got = exchange(port, junk)
        assert got == b"" or got.startswith(b"HTTP/1.1 400"), (junk[:40], got[:80])
    got = exchange(port, b"GET /metrics HTTP/1.1\r\nX-Big: " + b"a" * 200_000)
    assert got == b"" or got.startswith(b"HTTP/1.1 431"), got[:80]
    scrape(port)


def test_only_get_and_head(metrics: int) -> None:
    """Prometheus only GETs; every other method is refused without a scrape's work."""
    port = metrics
    for method in (b"POST", b"PUT", b"DELETE", b"OPTIONS", b"TRACE", b"PATCH", b"CONNECT", b"BREW"):
        got = exchange(port, method + b" /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        assert got.startswith(b"HTTP/1.1 405") and b"rocketmq_" not in got, (method, got[:120])
    head = exchange(port, b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")  # no body
    assert exchange(port, b"GET /nothing HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/metrics", data=b"x"),  # noqa: S310
                               timeout=10)
    assert e.value.code == 405
    scrape(port)


def test_slow_request_is_closed(metrics: int) -> None:
    """A request line dripped a byte at a time is closed at the request deadline, not held."""
    port = metrics
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(0.2)
        t0 = time.monotonic()
        while True:
            assert time.monotonic() - t0 < REQUEST_TIMEOUT + 3, "slow request still held"
            try:
                s.sendall(b"G")
                if s.recv(4096) == b"":
                    break
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError):
                break
    scrape(port)


def test_many_idle_connections(metrics: int) -> None:
    """A crowd of idle connections: the ones beyond the cap are answered 503 and closed at once (the
    broker's descriptors are not the crowd's), the scrape works again as soon as they go."""
    port = metrics
    idle = []
    try:
        for _ in range(MAX_CONNECTIONS):
            idle.append(socket.create_connection(("127.0.0.1", port)))
        for _ in range(5):
            got = exchange(port, b"", wait=3.0)
            assert got.startswith(b"HTTP/1.1 503"), got[:80]
    finally:
        for s in idle:
            s.close()
    eventually(lambda: scrape(port), REQUEST_TIMEOUT + 10, "a scrape after the crowd left")
