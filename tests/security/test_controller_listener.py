"""A hostile client against a real controller's remoting port (RocketMQ's 904 and 1001-1013; issue #26).

Garbage and oversized frames are answered or closed; malformed controller requests (bad numbers,
names that are no names, bodies of the wrong shape) are refused before anything is decided or
committed; afterwards the controller still serves, and its replicated state is exactly what it
was before the stranger came.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.frame import FrameDecoder, encode
from rmq.testing import remoting
from rmq.testing.daemon import RmqdProcess, eventually, free_port

pytestmark = pytest.mark.integration  # starts rmqd processes itself (tests/conftest.py: tiers)

RC = RequestCode
BASE = {"clusterName": "C", "brokerName": "b"}


def raw(header: bytes, body: bytes = b"", st: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (st << 24) | len(header)) + header + body


def request(code: int, ext: dict[str, Any] | None = None, body: bytes = b"", opaque: int = 7) -> bytes:
    return encode(RemotingCommand.request(code, {k: str(v) for k, v in (ext or {}).items()}, body, opaque=opaque))


def exchange(port: int, data: bytes) -> RemotingCommand | None:
    """Send ``data`` on a fresh connection: the answer, or None when the controller closed it."""
    return remoting.exchange(port, data, timeout=10)


def ask(port: int, code: int, ext: dict[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
    r = exchange(port, request(code, ext, body))
    assert r is not None, f"code {code}: connection closed"
    return r


def state(port: int) -> dict[str, Any]:
    """The replicated state as the leader answers it (every broker set), plus the next broker id of b."""
    r = ask(port, RC.CONTROLLER_GET_SYNC_STATE_DATA, body=b"[]")
    assert r.code == 0, r.remark
    nxt = ask(port, RC.CONTROLLER_GET_NEXT_BROKER_ID, BASE).ext.get("nextBrokerId")
    return {"table": json.loads(r.body)["replicasInfoTable"], "next": nxt}


GARBAGE: list[tuple[str, bytes]] = [
    ("NaN", raw(b'{"code":NaN,"opaque":1}')),
    ("deep", raw(b"[" * 200000)),
    ("huge-code", raw(b'{"code":99999999999999999999999,"opaque":7,"flag":0}')),
    ("invalid-utf8", raw(b'{"code":1005,"opaque":7,"remark":"\xff\xfe"}')),
    ("ext-not-object", raw(b'{"code":1005,"opaque":7,"extFields":"x"}')),
    ("negative-length", b"\xff" * 8),
    ("length-below-4", struct.pack(">i", 3) + b"abc"),
    ("length-beyond-limit", struct.pack(">iI", 1 << 30, 2) + b"{}" * 50),
    ("http", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("pickle", b"\x80\x04\x95" + b"\x00" * 64),
]  # fmt: skip

NAME = "a" * 300
MALFORMED: list[tuple[str, int, dict[str, Any], bytes]] = [
    ("apply-id-not-a-number", RC.CONTROLLER_APPLY_BROKER_ID, {**BASE, "appliedBrokerId": "2x",
                                                             "registerCheckCode": "127.0.0.1:2;x"}, b""),
    ("apply-id-beyond-long", RC.CONTROLLER_APPLY_BROKER_ID, {**BASE, "appliedBrokerId": "9" * 30,
                                                            "registerCheckCode": "127.0.0.1:2;x"}, b""),
    ("apply-no-broker-name", RC.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "C", "appliedBrokerId": 2,
                                                            "registerCheckCode": "127.0.0.1:2;x"}, b""),
    ("apply-blank-names", RC.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "", "brokerName": "", "appliedBrokerId": 1,
                                                         "registerCheckCode": "127.0.0.1:2;x"}, b""),
    ("apply-control-chars", RC.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "C", "brokerName": "x\x00/../y",
                                                           "appliedBrokerId": 1, "registerCheckCode": "h:1;x"}, b""),
    ("apply-long-name", RC.CONTROLLER_APPLY_BROKER_ID, {"clusterName": "C", "brokerName": NAME, "appliedBrokerId": 1,
                                                       "registerCheckCode": "h:1;x"}, b""),
    ("register-id-float", RC.CONTROLLER_REGISTER_BROKER, {**BASE, "brokerId": "1.0",
                                                          "brokerAddress": "127.0.0.1:1"}, b""),
    ("register-bad-address", RC.CONTROLLER_REGISTER_BROKER, {**BASE, "brokerId": 1,
                                                             "brokerAddress": "127.0.0.1:1\n\x00evil"}, b""),
    ("alter-not-json", RC.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "b", "masterBrokerId": 1,
                                                            "masterEpoch": 1}, b"{"),
    ("alter-deep", RC.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "b", "masterBrokerId": 1, "masterEpoch": 1},
     b'{"syncStateSet":' + b"[" * 100000),
    ("alter-set-is-a-string", RC.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "b", "masterBrokerId": 1,
                                                                   "masterEpoch": 1},
     b'{"syncStateSet":"12","syncStateSetEpoch":1}'),
    ("alter-floats", RC.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "b", "masterBrokerId": 1, "masterEpoch": 1},
     b'{"syncStateSet":[1.0,2.5],"syncStateSetEpoch":1.0}'),
    ("alter-beyond-long", RC.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "b", "masterBrokerId": 1,
                                                               "masterEpoch": 1},
     b'{"syncStateSet":[1,' + b"9" * 40 + b'],"syncStateSetEpoch":1}'),
    ("alter-infinity", RC.CONTROLLER_ALTER_SYNC_STATE_SET, {"brokerName": "b", "masterBrokerId": 1,
                                                            "masterEpoch": 1},
     b'{"syncStateSet":[1],"syncStateSetEpoch":Infinity}'),
    ("elect-id-not-a-number", RC.CONTROLLER_ELECT_MASTER, {**BASE, "brokerId": "one"}, b""),
    ("elect-blank-name", RC.CONTROLLER_ELECT_MASTER, {"clusterName": "C", "brokerName": "", "brokerId": 1,
                                                      "designateElect": "true"}, b""),
    ("clean-bad-ids", RC.CLEAN_BROKER_DATA, {"brokerName": "b", "brokerControllerIdsToClean": "1;x",
                                             "isCleanLivingBroker": "true"}, b""),
    ("clean-no-name", RC.CLEAN_BROKER_DATA, {"brokerControllerIdsToClean": "1", "isCleanLivingBroker": "true"}, b""),
    ("sync-data-not-a-list", RC.CONTROLLER_GET_SYNC_STATE_DATA, {}, b'{"b":1}'),
    ("sync-data-deep", RC.CONTROLLER_GET_SYNC_STATE_DATA, {}, b"[" * 100000),
    ("heartbeat-bad-id", RC.BROKER_HEARTBEAT, {**BASE, "brokerAddr": "127.0.0.1:9", "brokerId": "-1"}, b""),
    ("heartbeat-bad-name", RC.BROKER_HEARTBEAT, {"clusterName": "C", "brokerName": "b\r\nX", "brokerId": 5,
                                                 "brokerAddr": "127.0.0.1:9"}, b""),
]  # fmt: skip


@contextmanager
def controller(tmp_path: Path) -> Iterator[tuple[RmqdProcess, int]]:
    port = free_port()
    proc = RmqdProcess(tmp_path / "c0", namesrv=False, broker=False, extra={"controller": {
        "controllerDLegerPeers": f"n0-127.0.0.1:{port}", "controllerDLegerSelfId": "n0", "listenHost": "127.0.0.1",
        "controllerStorePath": str(tmp_path / "ctl")}})
    with proc:
        eventually(lambda: ask(port, RC.CONTROLLER_GET_METADATA_INFO).ext.get("isLeader") == "true", 30, "leader")
        # a broker set with a master: the state a stranger must not change
        r = ask(port, RC.CONTROLLER_APPLY_BROKER_ID, {**BASE, "appliedBrokerId": 1,
                                                      "registerCheckCode": "127.0.0.1:1;x"})
        assert r.code == 0, r.remark
        ask(port, RC.BROKER_HEARTBEAT, {**BASE, "brokerAddr": "127.0.0.1:1", "brokerId": 1,
                                        "heartbeatTimeoutMills": 600_000})
        assert ask(port, RC.CONTROLLER_REGISTER_BROKER, {**BASE, "brokerId": 1,
                                                         "brokerAddress": "127.0.0.1:1"}).code == 0
        assert ask(port, RC.CONTROLLER_ELECT_MASTER, {**BASE, "brokerId": 1}).code == 0
        yield proc, port


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[tuple[RmqdProcess, int]]:
    with controller(tmp_path) as c:
        yield c


@pytest.fixture(scope="module")
def shared_ctl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RmqdProcess, int]]:
    """One controller for the malformed-request cases (a start and an election each cost seconds): each
    case compares the state before and after its own request, so a request that changed it fails there."""
    with controller(tmp_path_factory.mktemp("ctl")) as c:
        yield c


def test_garbage_and_oversized_frames_are_answered_or_closed(ctl: Any) -> None:
    proc, port = ctl
    before = state(port)
    for name, data in GARBAGE:
        r = exchange(port, data)
        assert r is None or r.code != 0, f"{name}: answered {r.code}"
        assert proc.proc.poll() is None, f"{name}: rmqd exited"
        assert ask(port, RC.CONTROLLER_GET_METADATA_INFO).code == 0, f"{name}: not serving afterwards"
    assert state(port) == before


@pytest.mark.parametrize("name,code,ext,body", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_request_is_refused_and_changes_nothing(shared_ctl: Any, name: str, code: int,
                                                          ext: dict[str, Any], body: bytes) -> None:
    proc, port = shared_ctl
    before = state(port)
    r = exchange(port, request(code, ext, body))
    assert r is None or r.code != ResponseCode.SUCCESS, f"{name}: accepted ({r.remark})"
    assert proc.proc.poll() is None
    assert state(port) == before
    # nor did it become a live broker the election would consider
    sync = ask(port, RC.CONTROLLER_GET_SYNC_STATE_DATA, body=b"[]")
    assert set(json.loads(sync.body)["replicasInfoTable"]) == {"b"}


def test_a_heartbeat_flood_of_invented_brokers_is_bounded(ctl: Any) -> None:
    """Liveness is not replicated but held in memory: a stranger inventing brokers cannot grow it without end."""
    proc, port = ctl
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.settimeout(30)
        n = 12_000
        s.sendall(b"".join(request(RC.BROKER_HEARTBEAT, {"clusterName": "C", "brokerName": f"x{i}",
                                                          "brokerAddr": "127.0.0.1:9", "brokerId": 1,
                                                          "heartbeatTimeoutMills": 600_000}, opaque=i)
                           for i in range(n)))
        dec, got = FrameDecoder(), []
        while len(got) < n:
            chunk = s.recv(1 << 20)
            assert chunk, "closed"
            got.extend(dec.feed(chunk))
    refused = sum(1 for c in got if c.code != 0)
    assert refused > 0, "every invented broker was remembered"
    assert proc.proc.poll() is None
    assert ask(port, RC.CONTROLLER_GET_METADATA_INFO).code == 0
