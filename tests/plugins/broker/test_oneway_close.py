"""A producer that sends oneway messages and closes its connection at once loses none of them.

RocketMQ's broker processes every request it has decoded, even when the channel is gone by the
time the processor runs (only the answer's write fails); a oneway producer that exits right after
its last ``sendOneway`` relies on that. Here a raw socket pipelines the frames and closes
immediately, on the main port, the VIP channel (listenPort - 2), over TLS (the permissive default
takes TLS and plaintext on one port) and with SYNC_FLUSH (whose answers are held, not awaited)."""

from __future__ import annotations

import socket
import ssl
from typing import Any

import pytest

from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.frame import encode
from rmq.testing.daemon import call, eventually

N = 300
TOPIC = "OnewayClose"


def oneway_send(i: int) -> bytes:
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE, {
        "producerGroup": "PG", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": f"KEYS\x01k{i}"},
        b"m%04d" % i + b"." * 200, oneway=True, opaque=i + 1)
    return encode(cmd)


def max_offset(addr: str) -> int:
    r = call(addr, RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0})
    return int(r.ext["offset"]) if r.code == 0 else -1


@pytest.mark.parametrize(("listener", "broker_conf"), [
    ("main", {}), ("vip", {}), ("tls", {}), ("main", {"flushDiskType": "SYNC_FLUSH"}),
], ids=["main", "vip", "tls", "sync-flush"])
def test_oneway_sends_then_close_are_all_stored(rmqd_factory: Any, listener: str, broker_conf: dict[str, Any]) -> None:
    rmqd = rmqd_factory(broker_conf=broker_conf)
    port = rmqd.broker_port - 2 if listener == "vip" else rmqd.broker_port
    # the topic exists first, so every one of the N is a plain store
    assert call(rmqd.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": TOPIC, "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}).code == 0
    frames = b"".join(oneway_send(i) for i in range(N))
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    if listener == "tls":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # rmqd's test-mode certificate
        # TLS 1.3 servers send session tickets after the handshake; a client closing with them unread
        # makes its kernel answer with RST, and an RST discards what the broker had not read yet (TCP's
        # rule, the same for any server). TLS 1.2 sends its tickets inside the handshake.
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        raw = ctx.wrap_socket(raw)
    with raw:
        raw.sendall(frames)
    # closed right after the last byte: the broker still stores every request it had read
    eventually(lambda: max_offset(rmqd.broker_addr) == N, 30, f"{N} oneway sends stored")
