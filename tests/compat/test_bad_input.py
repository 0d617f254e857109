"""Hostile and broken input against a real rmqd while a real C++ producer and consumer keep working.

Each bad input gets the right response code or a closed connection (logged by
rmqd); meanwhile the C++ clients lose nothing and rmqd keeps serving.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import encode_properties
from rmq.protocol.frame import encode
from rmq.testing import remoting


def connect(addr: str) -> socket.socket:
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    s.settimeout(10)
    return s


def read_frame(s: socket.socket, timeout: float = 10) -> RemotingCommand | None:
    """The next frame, or None if the server closed the connection (silence past ``timeout`` raises)."""
    s.settimeout(timeout)
    return remoting.read_frame(s, max_frame_size=64 * 1024 * 1024, silence_is_close=False)


def closed_by_server(s: socket.socket, timeout: float = 10) -> bool:
    s.settimeout(timeout)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def send_request(code: int, ext: dict[str, Any], body: bytes = b"", opaque: int = 1) -> bytes:
    return encode(RemotingCommand.request(code, {k: str(v) for k, v in ext.items()}, body, opaque=opaque))


def send_header(topic: str) -> dict[str, Any]:
    return {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
            "queueId": 0, "sysFlag": 0, "bornTimestamp": 0, "flag": 0,
            "properties": encode_properties({"TAGS": "bad"})}


def test_bad_input_next_to_live_cpp_clients(rmqd: Any, cpp: Any, compat: Any) -> None:
    compat.create_topic(rmqd, "Live", 4)
    consumer = cpp("push", namesrv=rmqd.namesrv_addr, topic="Live", group="CG_LIVE", instance="live")
    consumer.wait(lambda: consumer.has("started"), 30, "consumer started")
    deadline = time.monotonic() + 20
    while compat.held_pulls(rmqd) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    n = 3000
    producer = cpp("produce", namesrv=rmqd.namesrv_addr, topic="Live", count=n, method="sync", tags="live")
    addr = rmqd.broker_addr

    # half-open / idle connections: connected, silent or mid-frame; they must not block anyone
    idle = [connect(addr) for _ in range(20)]
    partial = connect(addr)
    partial.sendall(send_request(RequestCode.GET_MAX_OFFSET, {"topic": "Live", "queueId": 0})[:15])

    # 1. garbage bytes: negative frame length -> connection closed
    s = connect(addr)
    s.sendall(b"\xff" * 64)
    assert closed_by_server(s)
    s.close()

    # 2. a truncated frame then EOF from the client: nothing to answer, the server just drops it
    s = connect(addr)
    frame = send_request(RequestCode.GET_MAX_OFFSET, {"topic": "Live", "queueId": 0})
    s.sendall(frame[: len(frame) // 2])
    s.shutdown(socket.SHUT_WR)
    assert closed_by_server(s)
    s.close()

    # 3. a 20 MiB frame: refused from its length word alone, without reading the payload
    s = connect(addr)
    s.sendall(struct.pack(">ii", 20 * 1024 * 1024, 0) + b"x" * 4096)
    assert closed_by_server(s)
    s.close()

    # 4. header length beyond the frame, and a header that is not JSON -> closed
    for bad in (struct.pack(">ii", 8, 1000) + b"1234", struct.pack(">ii", 8, 4) + b"{no}"):
        s = connect(addr)
        s.sendall(bad)
        assert closed_by_server(s)
        s.close()

    # On one connection, several well-framed bad requests each get their answer and the connection lives.
    s = connect(addr)
    # 5. a 5 MiB message -> MESSAGE_ILLEGAL
    s.sendall(send_request(RequestCode.SEND_MESSAGE, send_header("Live"), b"x" * (5 * 1024 * 1024), opaque=11))
    r = read_frame(s)
    assert r is not None and r.opaque == 11 and r.code == ResponseCode.MESSAGE_ILLEGAL, r
    # 6. a 200-byte topic -> SYSTEM_ERROR (4.9's TopicValidator)
    s.sendall(send_request(RequestCode.SEND_MESSAGE, send_header("T" * 200), b"x", opaque=12))
    r = read_frame(s)
    assert r is not None and r.code == ResponseCode.SYSTEM_ERROR and "127" in (r.remark or "")
    # 7. unknown request codes -> REQUEST_CODE_NOT_SUPPORTED
    for code in (9999, 0, 77):
        s.sendall(send_request(code, {}, opaque=13))
        r = read_frame(s)
        assert r is not None and r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    # 8. missing header fields and a non-JSON heartbeat body -> SYSTEM_ERROR, connection kept
    s.sendall(send_request(RequestCode.SEND_MESSAGE, {"topic": "Live"}, b"x", opaque=14))
    r = read_frame(s)
    assert r is not None and r.code == ResponseCode.SYSTEM_ERROR
    s.sendall(send_request(RequestCode.HEART_BEAT, {}, b"\x00garbage", opaque=15))
    r = read_frame(s)
    assert r is not None and r.code == ResponseCode.SYSTEM_ERROR
    s.sendall(send_request(RequestCode.PULL_MESSAGE, {"consumerGroup": "g", "topic": "Live", "queueId": "x",
                                                      "queueOffset": 0, "maxMsgNums": 1, "sysFlag": 0}, opaque=16))
    r = read_frame(s)
    assert r is not None and r.code == ResponseCode.SYSTEM_ERROR
    # 9. a ROCKETMQ binary header request is answered in binary
    s.sendall(encode(RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "Live", "queueId": "0"},
                                             opaque=17, serialize_type=1)))
    r = read_frame(s)
    assert r is not None and r.code == 0 and r.serialize_type == 1 and int(r.ext["offset"]) >= 0
    s.close()

    # the live clients lost nothing
    sent = [ln for ln in producer.finish(120) if "i" in ln]
    assert len(sent) == n and all(x.get("status") == 0 for x in sent), [x for x in sent if x.get("status") != 0][:3]
    consumer.wait(lambda: len({m["body"] for m in consumer.messages()}) >= n, 60, "live consumer got everything")
    assert {m["body"] for m in consumer.messages()} == {f"body-{i}" for i in range(n)}

    # the half-open connections are still harmless; the partial one gets its answer once completed
    partial.sendall(send_request(RequestCode.GET_MAX_OFFSET, {"topic": "Live", "queueId": 0})[15:])
    r = read_frame(partial)
    assert r is not None and r.code == 0
    for sock in idle + [partial]:
        sock.close()
    assert rmqd.proc.poll() is None
    log = "\n".join(rmqd.log_lines())
    assert log.count("bad frame") >= 4, log[-2000:]
    assert "exceeds the 16777216-byte limit" in log
