"""A hostile client against a real rmqd, both roles: malformed frames, a reset storm, the connection limit,
announced-but-never-sent frames. Afterwards rmqd is alive, a normal produce/consume round trip works,
and its log holds a bounded number of single-line warnings.

Every malformed frame gets the outcome the decode boundary promises: a SYSTEM_ERROR answer on the
same (still usable) connection when the header's opaque could be read, a closed connection otherwise.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
from typing import Any

import anyio
import pytest

from rmq.client import Message, Producer, SendStatus
from rmq.client.testing import create_topic, drain
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.frame import encode
from rmq.testing.remoting import read_frame

# one log record per line: time, level, logger, message
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO |WARNING|ERROR|CRITICAL) [\w.]+: \S")


def frame(header: bytes, body: bytes = b"", st: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (st << 24) | len(header)) + header + body


def binary(code: int, opaque: int, rest: bytes) -> bytes:
    return struct.pack(">hbhii", code, 0, 1, opaque, 0) + rest


ANSWERED = "answered"  # SYSTEM_ERROR with this opaque, then the connection still serves
CLOSED = "closed"

HOSTILE: list[tuple[str, bytes, str]] = [
    ("Infinity", frame(b'{"code":Infinity,"opaque":1}'), CLOSED),
    ("NaN", frame(b'{"code":NaN,"opaque":1}'), CLOSED),
    ("1E99511627776", frame(b'{"code":1E99511627776,"opaque":1}'), CLOSED),
    ("deep-objects", frame(b'{"a":' * 20000 + b"1" + b"}" * 20000), CLOSED),
    ("deep-arrays", frame(b"[" * 200000), CLOSED),
    ("huge-code", frame(b'{"code":99999999999999999999999,"opaque":7,"flag":0}'), CLOSED),
    ("code-beyond-int", frame(b'{"code":2147483648,"opaque":7,"flag":0}'), ANSWERED),
    ("huge-opaque", frame(b'{"code":34,"opaque":99999999999999999999,"flag":0}'), CLOSED),
    ("opaque-beyond-int", frame(b'{"code":34,"opaque":4294967296,"flag":0}'), CLOSED),
    ("huge-flag", frame(b'{"code":34,"opaque":7,"flag":1E400}'), CLOSED),
    ("flag-beyond-int", frame(b'{"code":34,"opaque":7,"flag":2147483648}'), CLOSED),
    ("version-beyond-int", frame(b'{"code":34,"opaque":7,"flag":0,"version":-2147483649}'), ANSWERED),
    ("invalid-utf8", frame(b'{"code":34,"opaque":7,"remark":"\xff\xfe"}'), CLOSED),
    ("lone-surrogate", frame(b'{"code":10,"opaque":7,"extFields":{"topic":"\\udc00"}}'), ANSWERED),
    ("ext-not-object", frame(b'{"code":10,"opaque":7,"extFields":"x"}'), ANSWERED),
    ("binary-truncated-after-flag", frame(binary(34, 7, b""), st=1), ANSWERED),
    ("binary-truncated-before-opaque", frame(b"\x00\x22\x00\x00\x01\x00", st=1), CLOSED),
    ("binary-remark-overrun", frame(binary(34, 7, struct.pack(">i", 1 << 30) + b"\x00" * 8), st=1), ANSWERED),
    ("binary-ext-overrun", frame(binary(34, 7, struct.pack(">ii", 0, 99) + b"\x00\x01k"), st=1), ANSWERED),
    ("binary-invalid-utf8", frame(binary(34, 7, struct.pack(">ii", 0, 8) + b"\x00\x01\xff" + struct.pack(">i", 1)
                                         + b"v"), st=1), ANSWERED),
    ("wrong-serialize-type", frame(b'{"code":34,"opaque":7}', st=9), CLOSED),
    ("length-below-4", struct.pack(">i", 3) + b"abc", CLOSED),
    ("negative-length", b"\xff" * 8, CLOSED),
    ("length-beyond-limit", struct.pack(">iI", 64 * 1024 * 1024, 2) + b"{}" * 50, CLOSED),
    ("header-beyond-frame", struct.pack(">iI", 8, 1000) + b"1234", CLOSED),
    ("http", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", CLOSED),
]  # fmt: skip


def connect(port: int, timeout: float = 10) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.settimeout(timeout)
    return s



def probe(opaque: int) -> bytes:
    """A harmless request every role answers (unknown code: REQUEST_CODE_NOT_SUPPORTED)."""
    return encode(RemotingCommand.request(9999, {"probe": "1"}, opaque=opaque))


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def reset(s: socket.socket) -> None:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def reset_storm(port: int, n: int) -> None:
    """``n`` connections that reset (RST, SO_LINGER 0): at once, after half a frame, after a request."""
    half = probe(1)[:11]

    def worker(k: int) -> None:
        for i in range(k, n, 4):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                continue  # the accept queue is full for an instant: that is the storm working
            try:
                if i % 3 == 1:
                    s.sendall(half)
                elif i % 3 == 2:
                    s.sendall(probe(2))
            except OSError:
                pass
            reset(s)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def check_log(lines: list[str], max_warnings: int) -> None:
    assert lines, "rmqd wrote no log"
    for line in lines:
        assert LOG_LINE.match(line), f"not one log record per line: {line[:300]!r}"
        assert len(line) < 2000, f"unbounded log line ({len(line)} chars): {line[:200]}"
    warnings = [ln for ln in lines if " WARNING " in ln or " ERROR " in ln or " CRITICAL " in ln]
    assert len(warnings) <= max_warnings, "\n".join(warnings)
    assert not any("Traceback" in ln for ln in lines)


async def round_trip(ns: str, topic: str, n: int = 20) -> None:
    with anyio.fail_after(60):
        await create_topic(ns, topic, 2)
        async with Producer(f"P_{topic}", ns) as producer:
            for i in range(n):
                r = await producer.send(Message(topic, f"m{i}", tags="T"))
                assert r.status is SendStatus.SEND_OK
        got = await drain(ns, topic)
    assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(n))


@pytest.mark.anyio
async def test_hostile_frames_and_reset_storm_against_every_remoting_port(rmqd: Any) -> None:
    # the VIP channel (listenPort - 2) serves the broker's table behind the same decode boundary
    ports = {"namesrv": rmqd.namesrv_port, "broker": rmqd.broker_port, "broker-vip": rmqd.broker_port - 2}
    silent: list[socket.socket] = []
    base_rss = rss_kib(rmqd.proc.pid)
    for role, port in ports.items():
        # frames announcing 16 MiB, then silence: nothing is allocated for them up front
        for _ in range(20):
            s = connect(port)
            s.sendall(struct.pack(">iI", 16 * 1024 * 1024 - 4, 2) + b"{}")
            silent.append(s)
        for name, data, expect in HOSTILE:
            s = connect(port)
            try:
                s.sendall(data)
            except (BrokenPipeError, ConnectionResetError):  # refused before we finished writing
                assert expect == CLOSED, (role, name)
                s.close()
                continue
            if expect == CLOSED:
                assert read_frame(s) is None, (role, name)
            else:
                r = read_frame(s)
                assert r is not None and r.is_response and r.opaque == 7, (role, name, r)
                assert r.code == ResponseCode.SYSTEM_ERROR and r.remark, (role, name, r)
                assert r.serialize_type == data[4], (role, name)
                s.sendall(probe(8))  # the same connection still serves
                r = read_frame(s)
                assert r is not None and r.opaque == 8 and r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            s.close()
        reset_storm(port, 300)
        assert rmqd.proc.poll() is None, f"rmqd died during the {role} storm:\n{rmqd.log_tail()}"

    grown_mib = (rss_kib(rmqd.proc.pid) - base_rss) / 1024
    assert grown_mib < 100, f"rmqd grew by {grown_mib:.0f} MiB holding 60 announced 16 MiB frames"
    for s in silent:  # still open (the idle timeout is 120 s): they cost nothing meanwhile
        s.sendall(b"}")
        s.close()

    await round_trip(rmqd.namesrv_addr, "HostileAfter")
    for port in ports.values():
        s = connect(port)
        s.sendall(probe(9))
        r = read_frame(s)
        assert r is not None and r.opaque == 9
        s.close()
    assert rmqd.proc.poll() is None
    check_log(rmqd.log_lines(), max_warnings=60)


@pytest.mark.anyio
async def test_connection_limit_per_role(rmqd_factory: Any) -> None:
    limit = 6
    proc = rmqd_factory(broker_conf={"maxConnections": limit}, namesrv_conf={"maxConnections": limit})
    for port in (proc.namesrv_port, proc.broker_port):
        socks = [connect(port, timeout=3) for _ in range(limit + 6)]
        served = refused = 0
        for i, s in enumerate(socks):
            try:
                s.sendall(probe(100 + i))
            except OSError:
                refused += 1
                continue
            r = read_frame(s)
            if r is None:
                refused += 1
            else:
                assert r.opaque == 100 + i
                served += 1
        assert served <= limit and refused >= 6, (port, served, refused)
        for s in socks:
            s.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the slots free up once rmqd sees the closes
        s = connect(proc.broker_port)
        s.sendall(probe(1))
        ok = read_frame(s) is not None
        s.close()
        if ok:
            break
        await anyio.sleep(0.1)
    await round_trip(proc.namesrv_addr, "AfterLimit", 5)
    assert proc.proc.poll() is None
    limit_lines = [ln for ln in proc.log_lines() if "maxConnections" in ln]
    assert 1 <= len(limit_lines) <= 4, limit_lines  # rate-limited: one line per role and interval
    check_log(proc.log_lines(), max_warnings=10)


@pytest.mark.anyio
async def test_large_frames_leave_no_buffer_behind(rmqd_factory: Any) -> None:
    """Eight connections each send a 12 MiB request (refused: the body exceeds maxMessageSize) and stay
    open; rmqd does not keep a frame-sized buffer for any of them.

    glibc's malloc would keep freed large blocks in its heap after raising its mmap threshold
    (RSS then says nothing about what Python holds): the threshold is pinned for this process.
    """
    rmqd = rmqd_factory(env={"MALLOC_MMAP_THRESHOLD_": "131072"})
    ext = {"producerGroup": "PG", "topic": "Big", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0"}
    big = encode(RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, body=b"x" * (12 * 1024 * 1024), opaque=3))
    base = rss_kib(rmqd.proc.pid)
    socks = []
    for _ in range(8):
        s = connect(rmqd.broker_port, timeout=30)
        s.sendall(big)
        r = read_frame(s)
        assert r is not None and r.opaque == 3 and r.code != ResponseCode.SUCCESS
        socks.append(s)
    await anyio.sleep(0.5)
    grown_mib = (rss_kib(rmqd.proc.pid) - base) / 1024
    assert grown_mib < 64, f"rmqd holds {grown_mib:.0f} MiB for 8 idle connections"
    for s in socks:
        s.sendall(probe(4))
        r = read_frame(s)
        assert r is not None and r.opaque == 4
        s.close()
    assert rmqd.proc.poll() is None
