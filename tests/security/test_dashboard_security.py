"""Issue #26 item 5: the dashboard listener against a stranger. A real rmqd serves it on a free loopback port;
each test plays one attack (DNS rebinding, cross-site forms, SSRF through a message id, slow and many
connections) and checks both the answer and that nothing happened behind it."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import anyio
import pytest

from rmq.client import Admin
from rmq.plugins.dashboard import allowed_hosts, host_allowed, structure_dashboard
from rmq.protocol.message import host_bytes, offset_msg_id
from rmq.testing.daemon import RmqdProcess, eventually, free_port

pytestmark = pytest.mark.integration  # starts rmqd processes itself (tests/conftest.py: tiers)

HEADER_TIMEOUT = 3  # seconds: [dashboard] headerTimeout and bodyTimeout of the daemon under test
MAX_CONNECTIONS = 6


@pytest.fixture(scope="module")
def dash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RmqdProcess, int]]:
    port = free_port()
    proc = RmqdProcess(tmp_path_factory.mktemp("dashsec"), extra={"dashboard": {
        "listenPort": port, "headerTimeout": HEADER_TIMEOUT, "bodyTimeout": HEADER_TIMEOUT,
        "maxConnections": MAX_CONNECTIONS}})
    proc.start()
    try:
        yield proc, port
    finally:
        proc.stop()


def request(port: int, path: str, form: dict[str, str] | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    """(status, body, headers) of one request to the dashboard; ``form`` makes it a POST."""
    body = urllib.parse.urlencode(form).encode() if form is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - loopback test server
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def token(port: int) -> str:
    """The CSRF token a page hands a browser (cookie and form field are the same value)."""
    status, text, headers = request(port, "/topics")
    assert status == 200, text
    cookie = headers["set-cookie"].split(";")[0].partition("=")[2]
    assert f'name="csrf" value="{cookie}"' in text  # every form carries it
    return cookie


def topics(proc: RmqdProcess) -> set[str]:
    async def run() -> set[str]:
        async with Admin(proc.namesrv_addr) as a:
            return set(await a.list_topics())

    return anyio.run(run)


def test_dns_rebinding_host_is_refused_before_any_change(dash: tuple[RmqdProcess, int]) -> None:
    """A page on evil.example rebound to 127.0.0.1 is same-origin to the browser: it can read the token
    and post the form. Only its Host header tells it apart, and that must be refused for every request."""
    proc, port = dash
    evil = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
    status, text, _ = request(port, "/topics", headers={"Host": f"evil.example:{port}"})
    assert status == 421 and "Host" in text
    t = token(port)  # as the rebound page would have it
    status, _, _ = request(port, "/topics/save", {"topic": "Rebound", "csrf": t},
                           {**evil, "Cookie": f"rmq_csrf={t}"})
    assert status == 421
    status, _, _ = request(port, "/topics/save", {"topic": "Rebound2", "csrf": t},
                           {**evil, "Cookie": f"rmq_csrf={t}"} | {"Host": f"localhost.evil.example:{port}"})
    assert status == 421
    for host in (f"127.0.0.1:{port + 1}", "127.0.0.1", f"127.0.0.1:{port}.evil.example", f"evil.example:{port}"):
        assert request(port, "/static/dash.css", headers={"Host": host})[0] == 421, host
    assert not {"Rebound", "Rebound2"} & topics(proc)
    # the loopback names with the dashboard's port are served, with the same token
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
        assert request(port, "/cluster", headers={"Host": host})[0] == 200, host
    status, _, _ = request(port, "/topics/save", {"topic": "NotRebound", "csrf": t},
                           {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}",
                            "Cookie": f"rmq_csrf={t}"})
    assert status == 200 and "NotRebound" in topics(proc)


def test_allowed_hosts_setting() -> None:
    """``[dashboard] allowedHosts`` replaces the loopback default: a name alone allows any port."""
    cfg = structure_dashboard({"allowedHosts": ["Dash.Example", "10.0.0.5:8080", "[fd00::1]:9000"]})
    allowed = allowed_hosts(cfg, 8080)
    assert host_allowed("dash.example:8080", allowed) and host_allowed("dash.example", allowed)
    assert host_allowed("10.0.0.5:8080", allowed) and not host_allowed("10.0.0.5:8081", allowed)
    assert host_allowed("[FD00::1]:9000", allowed) and not host_allowed("[fd00::1]", allowed)
    assert not host_allowed("127.0.0.1:8080", allowed) and not host_allowed("evil.example:8080", allowed)
    assert not host_allowed("dash.example.evil.example", allowed) and not host_allowed("", allowed)
    default = allowed_hosts(structure_dashboard({"listenHost": "192.0.2.7"}), 8080)
    assert host_allowed("192.0.2.7:8080", default) and host_allowed("localhost:8080", default)
    for bad in ({"allowedHosts": "dash.example"}, {"allowedHosts": ["a b"]}, {"allowedHosts": ["x:99999"]},
                {"headerTimeout": 0}, {"maxConnections": "8"}, {"bodyTimeout": True}):
        with pytest.raises(ValueError):
            structure_dashboard(bad)


def test_post_needs_the_csrf_token(dash: tuple[RmqdProcess, int]) -> None:
    """No token, a forged one, or a form token that is not the browser's cookie: 403, nothing created."""
    proc, port = dash
    forged = "A" * 24 + "." + "B" * 43
    for form, headers in [
        ({"topic": "Csrf1"}, {}),  # no token at all: what a cross-site form sends
        ({"topic": "Csrf2", "csrf": forged}, {"Cookie": f"rmq_csrf={forged}"}),  # matching, but not ours
    ]:
        status, text, _ = request(port, "/topics/save", form, headers)
        assert status == 403 and "token" in text, (form, headers, status)
    t = token(port)
    for form, headers in [
        ({"topic": "Csrf3"}, {"Cookie": f"rmq_csrf={t}"}),  # the cookie alone
        ({"topic": "Csrf4", "csrf": t}, {}),  # a field without the cookie
        ({"topic": "Csrf5", "csrf": t[:-1] + ("A" if t[-1] != "A" else "B")}, {"Cookie": f"rmq_csrf={t}"}),
    ]:
        status, text, _ = request(port, "/topics/save", form, headers)
        assert status == 403 and "token" in text, (form, headers, status)
    status, _, _ = request(port, "/topics/delete", {"topic": "TBW102"})
    assert status == 403
    assert not {f"Csrf{i}" for i in range(1, 6)} & topics(proc)
    status, _, _ = request(port, "/topics/save", {"topic": "CsrfOk", "csrf": t}, {"Cookie": f"rmq_csrf={t}"})
    assert status == 200 and "CsrfOk" in topics(proc)


def test_message_ids_never_reach_outside_the_cluster(dash: tuple[RmqdProcess, int]) -> None:
    """An offset message id names an ip:port; one naming a socket this test listens on (not a broker of
    the cluster) is refused and the socket never sees a connection, by id, by id with a topic, or resend."""
    proc, port = dash
    with socket.socket() as trap:
        trap.bind(("127.0.0.1", 0))
        trap.listen(8)
        trap.setblocking(False)
        evil_id = offset_msg_id(host_bytes("127.0.0.1", trap.getsockname()[1]), 4096)
        by_id = request(port, f"/message?id={evil_id}")
        by_topic = request(port, f"/message?topic=TBW102&id={evil_id}")
        # the dashboard answered, so any connection it made is already in the trap's backlog
        with pytest.raises(BlockingIOError):
            trap.accept()
        t = token(port)
        resend = request(port, "/dlq/resend", {"group": "G", "offsetMsgId": evil_id, "csrf": t},
                         {"Cookie": f"rmq_csrf={t}"})
        with pytest.raises(BlockingIOError):
            trap.accept()
    assert by_id[0] == 400 and "not a broker of this cluster" in by_id[1]
    assert by_topic[0] == 404
    assert resend[0] == 400 and "not a broker of this cluster" in resend[1]
    # an id of the cluster's own broker still reaches it (nothing stored at that offset)
    ip, _, bport = proc.broker_addr.rpartition(":")
    status, text, _ = request(port, f"/message?id={offset_msg_id(host_bytes(ip, int(bport)), 1 << 40)}")
    assert status in (404, 502) and "not a broker of this cluster" not in text


def _closed_within(sock: socket.socket, seconds: float, drip: bytes = b"") -> float:
    """Seconds until the server closes ``sock`` (sending ``drip`` every 0.2 s meanwhile); fails after
    ``seconds``."""
    t0 = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - t0 < seconds:
        try:
            if drip:
                sock.sendall(drip)
            if sock.recv(4096) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - t0
    raise AssertionError(f"connection still open after {seconds} s")


def _exchange(port: int, data: bytes) -> bytes:
    """Send ``data``; everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(10)
        got = b""
        try:
            s.sendall(data)
            while chunk := s.recv(65536):
                got += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass
        return got


def test_hostile_clients(dash: tuple[RmqdProcess, int]) -> None:
    """Garbage, an oversized head and odd methods are answered and closed; a client that never finishes
    its headers, one that sends nothing, and one that never finishes its body are each closed by the
    listener's deadlines, dripping bytes or not; the dashboard serves on."""
    _, port = dash
    host = f"Host: 127.0.0.1:{port}\r\n".encode()
    for junk in (bytes(range(256)) * 8, b"GET / HTTP/1.1\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"):
        got = _exchange(port, junk)
        assert got == b"" or got.startswith(b"HTTP/1.1 400"), (junk[:20], got[:80])
    got = _exchange(port, b"GET /cluster HTTP/1.1\r\n" + host + b"X-Big: " + b"a" * 100_000 + b"\r\n\r\n")
    assert got == b"" or got.startswith(b"HTTP/1.1 4"), got[:80]
    for method in (b"PUT", b"DELETE", b"TRACE", b"PATCH"):
        got = _exchange(port, method + b" /topics/delete HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 405"), (method, got[:80])
    limit = HEADER_TIMEOUT + 5
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"GET /cluster HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        assert _closed_within(s, limit, drip=b"X-Slow: 1\r\n") >= HEADER_TIMEOUT - 0.5
    with socket.create_connection(("127.0.0.1", port)) as s:
        _closed_within(s, limit)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"POST /send HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/x-www-form-"
                  f"urlencoded\r\nContent-Length: 100000\r\n\r\ntopic=".encode())
        _closed_within(s, limit, drip=b"a")
    # a kept-alive connection whose next request dribbles in is closed too
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(f"GET /static/dash.css HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        s.settimeout(10)
        assert s.recv(65536).startswith(b"HTTP/1.1 200")
        s.sendall(b"GET /cluster HTTP/1.1\r\n")
        _closed_within(s, limit, drip=b"X: 1\r\n")
    assert request(port, "/cluster")[0] == 200


def test_connection_cap(dash: tuple[RmqdProcess, int]) -> None:
    """Beyond maxConnections a new connection is answered 503 and closed at once; once the idle ones are
    gone (their header deadline), a normal request is served again."""
    _, port = dash
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_CONNECTIONS)]
    try:
        with socket.create_connection(("127.0.0.1", port)) as extra:
            extra.settimeout(10)
            got = b""
            while chunk := extra.recv(4096):  # closed by the server: recv returns b""
                got += chunk
            assert got.startswith(b"HTTP/1.1 503"), got
        eventually(lambda: request(port, "/cluster")[0] == 200, HEADER_TIMEOUT + 10, "a request served again")
    finally:
        for s in idle:
            s.close()

