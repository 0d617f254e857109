"""Heartbeats answered per read (plugins/broker/fastbeat.py, ``_faststore.beat_decode``) against the Python path.

Two rmqd run side by side, one with ``RMQ_PURE=1`` (consumer.py's ``heart_beat`` serves every heartbeat) and
one as installed (an unchanged heartbeat is answered in the read). Both get the same streams on two raw
connections each (A and B, the same client ids and groups, so one's heartbeat can change what the other's
would): heartbeats identical, changed (groups, subscriptions and their versions, client id, message
model, the header's language or version), in rmq's, Java's and the C++ client's shapes, escaped, oneway,
hostile bodies (not JSON, not an object, bad group names, non-printable client ids, bytes); sends and
pulls between them in one read; UNREGISTER_CLIENT; frames cut anywhere, or at every byte. Every request
must be answered alike, byte for byte (compared by opaque; message ids' broker address and the ports
normalized), and the client tables must end alike: every consumer group's channels (client id, language,
version, connection), consume type, model, where-from and subscriptions, every producer group's channels.
The compiled daemon must have answered heartbeats per read.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.protocol.codes import RequestCode
from rmq.protocol.frame import decode, encode
from rmq.testing.daemon import RmqdProcess, runtime_info
from rmq.testing.fuzz import compiler_present, fuzz_settings

from .test_fastsend_diff import Peer, _cmd, _frame, _header

pytestmark = pytest.mark.integration

GROUPS = ["g1", "g2", "g3"]
PRODUCERS = ["pg1", "pg2"]
CONF = {"autoCreateTopicEnable": True, "transactionTimeOut": 86_400_000, "transactionCheckInterval": 86_400_000}


def _sub(topic: str, expr: str = "*", version: int = 1) -> dict[str, Any]:
    tags = [] if expr == "*" else [t.strip() for t in expr.split("||")]
    return {"topic": topic, "subString": expr, "tagsSet": tags, "codeSet": [], "subVersion": version,
            "expressionType": "TAG", "classFilterMode": False}


def _consumer(group: str, subs: list[dict[str, Any]], model: str = "CLUSTERING") -> dict[str, Any]:
    return {"groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": model,
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False, "subscriptionDataSet": subs}


def _hb(client: str, producers: list[str], consumers: list[dict[str, Any]]) -> bytes:
    return json.dumps({"clientID": client, "producerDataSet": [{"groupName": g} for g in producers],
                       "consumerDataSet": consumers}).encode()


BODIES = [
    _hb("c1", ["pg1"], []),
    _hb("c1", [], [_consumer("g1", [_sub("HbT")])]),
    _hb("c1", ["pg1"], [_consumer("g1", [_sub("HbT")]), _consumer("g2", [_sub("HbT", "TagA || TagB")])]),
    _hb("c1", [], [_consumer("g1", [_sub("HbT", "TagA", 2)])]),  # a newer subscription: replaced, not notified
    _hb("c1", [], [_consumer("g1", [_sub("HbU")])]),  # another topic: notified
    _hb("c2", [], [_consumer("g1", [_sub("HbT")])]),  # another client id on the connection
    _hb("c1", ["pg2"], [_consumer("g1", [_sub("HbT")], "BROADCASTING")]),
    _hb("c1", ["pg1", "pg1"], [_consumer("g3", [_sub("HbT"), _sub("HbT", "TagB", 3)])]),  # duplicates
    _hb("c1", [], [_consumer("g3", [])]),
    # the C++ client's enums as integers, a string subVersion and atoi codes
    json.dumps({"clientID": "c1", "consumerDataSet": [{
        "groupName": "g2", "consumeType": 1, "messageModel": 1, "consumeFromWhere": 0, "unitMode": False,
        "subscriptionDataSet": [{"topic": "HbT", "subString": "TagA || TagB", "tagsSet": ["TagA", "TagB"],
                                 "codeSet": [0, 0], "subVersion": "1", "expressionType": "TAG"}]}]}).encode(),
    # hostile
    b"{", b"[]", b"\xff\xfe", b"", _hb("c\x01", ["pg1"], []), _hb("c1", ["bad group"], []),
    _hb("c1", [], [_consumer("%RETRY%x" * 40, [])]), _hb("c1", [], [_consumer("g1", [_sub("bad topic")])]),
]


@st.composite
def beat_frame(draw: Callable[..., Any], opaque: int) -> bytes:
    body = draw(st.sampled_from(BODIES[:3] * 4 + BODIES))  # the same few bodies mostly: unchanged heartbeats
    shape = draw(st.sampled_from(["rmq"] * 4 + ["java"] * 4 + ["cpp"] * 2 + ["oldjava", "escape", "oneway", "space"]))
    if shape == "rmq":
        return encode(_cmd(RequestCode.HEART_BEAT, {}, body, opaque=opaque))
    top: dict[str, Any] = {"cpp": {"language": "CPP", "remark": "", "version": 63}, "oldjava": {"version": 373},
                           "escape": {"remark": "\u00e9"}}.get(shape, {})
    head = _header(RequestCode.HEART_BEAT, {}, opaque, 2 if shape == "oneway" else 0, **top)
    if shape == "space":
        head = head.replace(b",", b", ", 1)
    return _frame(head + (b"\n" if shape == "cpp" else b""), body)


@st.composite
def other_frame(draw: Callable[..., Any], opaque: int) -> bytes:
    """A send or a pull (each served per read) or an UNREGISTER_CLIENT between the heartbeats."""
    kind = draw(st.sampled_from(["send", "pull", "unregister"]))
    if kind == "send":
        ext = {"a": "pg1", "b": "HbT", "e": str(draw(st.integers(0, 3))), "f": "0", "g": "1700000000000", "h": "0",
               "i": "WAIT\x01true"}
        return encode(_cmd(RequestCode.SEND_MESSAGE_V2, ext, draw(st.binary(min_size=1, max_size=20)), opaque=opaque))
    if kind == "pull":  # of a queue nothing is sent to: answered at once, alike
        return encode(_cmd(RequestCode.PULL_MESSAGE, {
            "consumerGroup": "g1", "topic": "HbU", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
            "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*"}, opaque=opaque))
    ext = {"clientID": "c1", "producerGroup": draw(st.sampled_from(["", "pg1"])),
           "consumerGroup": draw(st.sampled_from(["", "g1", "g2"]))}
    return encode(_cmd(RequestCode.UNREGISTER_CLIENT, ext, opaque=opaque))


@st.composite
def streams(draw: Callable[..., Any]) -> list[tuple[int, bytes, list[int]]]:
    """Segments, each on connection 0 (A) or 1 (B): frames, cuts."""
    out = []
    opaque = 1000
    for _ in range(draw(st.integers(1, 4))):
        frames = []
        for _ in range(draw(st.integers(1, 8))):
            opaque += 1
            frames.append(draw(other_frame(opaque) if draw(st.integers(0, 4)) == 0 else beat_frame(opaque)))
        data = b"".join(frames)
        out.append((draw(st.sampled_from([0, 0, 1])), data, sorted(draw(st.lists(st.integers(0, len(data)), max_size=3)))))
    return out


class Side:
    """One rmqd and two raw connections to its broker."""

    def __init__(self, proc: RmqdProcess) -> None:
        self.proc = proc
        self.conns = (Peer(proc), Peer(proc))

    def answers(self, stream: list[tuple[int, bytes, list[int]]]) -> dict[int, bytes]:
        out = {}
        for which, data, cuts in stream:
            peer = self.conns[which]
            out.update({decode(raw).opaque: raw for raw in peer.normalized(peer.run(data, cuts))})
        return out

    def ask(self, code: int, ext: dict[str, str]) -> Any:
        (raw,) = self.conns[0].run(encode(_cmd(code, ext, opaque=77)), [])
        return decode(raw)

    def tables(self) -> list[Any]:
        """Every group's members and subscriptions, the connections named A and B (their ports differ)."""
        names = {f"127.0.0.1:{p.sock.getsockname()[1]}": "AB"[i] for i, p in enumerate(self.conns)}
        out: list[Any] = []
        for code, key, groups in ((RequestCode.GET_CONSUMER_CONNECTION_LIST, "consumerGroup", GROUPS),
                                  (RequestCode.GET_PRODUCER_CONNECTION_LIST, "producerGroup", PRODUCERS)):
            for group in groups:
                r = self.ask(code, {key: group})
                body = json.loads(r.body) if r.code == 0 else None
                for ch in (body or {}).get("connectionSet", []):
                    ch["clientAddr"] = names.get(ch["clientAddr"], "?")
                out.append((group, r.code, body))
        groups = json.loads(self.ask(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {}).body)["subscriptionGroupTable"]
        topics = json.loads(self.ask(RequestCode.GET_ALL_TOPIC_CONFIG, {}).body)["topicConfigTable"]
        return [*out, sorted(groups), sorted(t for t in topics if t.startswith("%RETRY%"))]


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Side, Side]]:
    """(pure, compiled)."""
    with ExitStack() as running:
        pair = []
        for env in ({"RMQ_PURE": "1"}, {"RMQ_PURE": ""}):  # "": unset, whatever the suite runs under
            p = RmqdProcess(tmp_path_factory.mktemp("fastbeat"), broker_conf=CONF, env=env, proxy=False)
            running.callback(p.stop)
            p.start()
            side = Side(p)
            for topic in ("HbT", "HbU"):
                r = side.ask(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                    "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
                    "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})
                assert r.code == 0, r
            r = side.ask(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "HbT", "e": "0", "f": "0", "g": "1", "h": "0",
                                                      "i": "WAIT\x01true"})
            assert r.code == 0, r
            for peer in side.conns:
                peer.prefix = r.ext["msgId"][:-16]
            pair.append(side)
        yield pair[0], pair[1]


def _path(side: Side) -> str:
    line = next(line for line in side.proc.log_lines() if "heartbeat path: " in line)
    return line.split("heartbeat path: ", 1)[1].split("; pull path: ", 1)[0]


def _compare(pure: Side, fast: Side, stream: list[tuple[int, bytes, list[int]]]) -> None:
    want, got = pure.answers(stream), fast.answers(stream)
    assert want.keys() == got.keys()
    diff = [(decode(want[k]), decode(got[k])) for k in want if want[k] != got[k]]
    assert not diff, diff[0]
    assert pure.tables() == fast.tables()


def test_the_start_line_says_which_path_serves_heartbeats(sides: tuple[Side, Side]) -> None:
    assert _path(sides[0]) == "pure: no compiled request decoder"
    assert _path(sides[1]).startswith("compiled") or not compiler_present(), _path(sides[1])


def test_heartbeats_per_read_and_per_request_agree(sides: tuple[Side, Side]) -> None:
    pure, fast = sides
    same = settings(fuzz_settings(60), deadline=None, suppress_health_check=list(HealthCheck))
    same(given(streams())(lambda stream: _compare(pure, fast, stream)))()
    # the same heartbeat again and again, cut at every byte, a send and a pull between them
    beat = encode(_cmd(RequestCode.HEART_BEAT, {}, BODIES[2], opaque=1))
    _compare(pure, fast, [(0, beat, [])])
    frames = [encode(_cmd(RequestCode.HEART_BEAT, {}, BODIES[2], opaque=5000 + i)) for i in range(6)]
    frames[2] = encode(_cmd(RequestCode.SEND_MESSAGE_V2, {"a": "pg1", "b": "HbT", "e": "1", "f": "0", "g": "1",
                                                          "h": "0", "i": "WAIT\x01true"}, b"x", opaque=5002))
    data = b"".join(frames)
    before = int(runtime_info(fast.proc.broker_addr)["compiledHeartbeats"])
    _compare(pure, fast, [(0, data, list(range(1, len(data))))])
    _compare(pure, fast, [(0, data * 3, [])])  # one read: the heartbeats around the send in it
    assert runtime_info(pure.proc.broker_addr)["compiledHeartbeats"] == "0"
    if compiler_present():
        assert int(runtime_info(fast.proc.broker_addr)["compiledHeartbeats"]) >= before + 5 + 15


def _beat(body: bytes, opaque: int) -> bytes:
    return encode(_cmd(RequestCode.HEART_BEAT, {}, body, opaque=opaque))


def _admin(code: int, ext: dict[str, str], opaque: int) -> bytes:
    return encode(_cmd(code, ext, opaque=opaque))


# (connection, frame) steps: what changes a registration between two heartbeats identical on their connection
# -- the other connection's heartbeat, an unregister, an admin's deletion -- and the heartbeat that follows
SCENARIOS = {
    "the other connection drops a topic": [(0, _beat(BODIES[2], 1)), (1, _beat(BODIES[4], 2)), (0, _beat(BODIES[2], 3))],
    "the other connection's newer subscription": [(0, _beat(BODIES[1], 1)), (1, _beat(BODIES[3], 2)),
                                                  (0, _beat(BODIES[1], 3)), (0, _beat(BODIES[1], 4))],
    "the other connection's model": [(0, _beat(BODIES[2], 1)), (1, _beat(BODIES[6], 2)), (0, _beat(BODIES[2], 3))],
    "unregistered": [(0, _beat(BODIES[2], 1)), (0, _admin(RequestCode.UNREGISTER_CLIENT, {
        "clientID": "c1", "consumerGroup": "g2", "producerGroup": "pg1"}, 2)), (0, _beat(BODIES[2], 3))],
    "the other connection adds a topic": [(0, _beat(BODIES[1], 1)), (1, _beat(_hb("c1", [], [_consumer("g1", [
        _sub("HbT"), _sub("HbU")])]), 2)), (0, _beat(BODIES[1], 3))],
    "the other connection's consume type": [(0, _beat(BODIES[1], 1)), (1, _beat(_hb("c1", [], [dict(
        _consumer("g1", [_sub("HbT")]), consumeType="CONSUME_ACTIVELY")]), 2)), (0, _beat(BODIES[1], 3))],
    "the retry topic deleted": [(0, _beat(BODIES[2], 1)), (1, _admin(RequestCode.DELETE_TOPIC_IN_BROKER, {
        "topic": "%RETRY%g2"}, 2)), (0, _beat(BODIES[2], 3))],
    "the group deleted": [(0, _beat(BODIES[2], 1)), (1, _admin(RequestCode.DELETE_SUBSCRIPTIONGROUP, {
        "groupName": "g2"}, 2)), (0, _beat(BODIES[2], 3))],
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_registration_changed_elsewhere_takes_the_python_path(sides: tuple[Side, Side], name: str) -> None:
    pure, fast = sides
    for side in sides:  # from no member on either connection
        for peer in side.conns:
            for i, group in enumerate(GROUPS):
                peer.run(_admin(RequestCode.UNREGISTER_CLIENT, {"clientID": "c1", "consumerGroup": group,
                                                                "producerGroup": PRODUCERS[i % 2]}, 9), [])
    assert pure.tables() == fast.tables()
    served = []
    for which, frame in SCENARIOS[name]:
        before = int(runtime_info(fast.proc.broker_addr)["compiledHeartbeats"])
        _compare(pure, fast, [(which, frame, [])])
        served.append(int(runtime_info(fast.proc.broker_addr)["compiledHeartbeats"]) - before)
    if compiler_present():  # the last heartbeat: per read only when the change elsewhere left it unchanged
        assert served[-1] == (name == "the other connection's newer subscription"), served
