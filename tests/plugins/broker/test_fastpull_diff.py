"""Compiled pulls (the walk ``_faststore.pull_join`` behind pull.py's ``decide``, the per-read requests of
``fastpull``: ``_faststore.pull_decode``) against the pure path.

One rmqd stores a few hundred messages (tags TagA/TagB/TagC or none, bodies up to 3 KiB, four queues of
one topic and one of another), stops, and its store is copied: the copy serves an ``RMQ_PURE=1`` rmqd
(get_messages' pure loop, a bytes object per record), the original the compiled one again, so both
hold the same bytes. Both get the same pull streams on one raw connection each -- offsets in range, at
the end, past it, negative; max counts 0 to 100; TAG subscriptions of one, two or unknown tags,
subscribe-all, SQL92 (refused: property filters are off), the group's heartbeat subscription instead of
the pull's own; commit offsets; unknown topics, groups and queue ids; headers with fields missing or
not numbers; the C++ client's header shape (JSON numbers, ACL fields, a newline) and hostile ones (spaces,
duplicate or escaped keys, non-ASCII, other top-level keys, a body, oneway); pulls that suspend (long polls
of a few milliseconds); sends between them in one read; frames cut anywhere, or at every byte -- and must
answer every pull alike, byte for byte (compared by opaque), and end with the
same consumer offsets, store get counters and per-group get statistics.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.protocol.codes import RequestCode
from rmq.protocol.frame import FrameDecoder, decode, encode
from rmq.testing.daemon import RmqdProcess, eventually, runtime_info
from rmq.testing.fuzz import compiler_present, fuzz_settings

from .test_fastsend_diff import Peer, _admin, _cmd, _frame, _header

pytestmark = pytest.mark.integration

TOPICS = {"PullT": 4, "PullU": 1, "SendT": 2}  # SendT: sends between the pulls (not pulled: the reput races them)
TAGS = ["TagA", "TagB", "TagC", None]
GROUPS = ["g1", "g2", "hb", "nosuchgroup"]
# slaveReadEnable with no memory for messages: every found pull but one of the last record suggests the
# group's whichBrokerWhenConsumeSlowly (the lagging test reads the last record's PHYSICAL_OFFSET)
# No store read by the clock (the timer wheel's, the delay levels', the transaction checker's): the store's
# get counters ("gets": what getTotalTps / getMissTps are made of) count the pulls alone, and compare.
CONF = {"autoCreateTopicEnable": False, "autoCreateSubscriptionGroup": False, "transactionTimeOut": 86_400_000,
        "transactionCheckInterval": 86_400_000, "slaveReadEnable": True, "accessMessageInMemoryMaxRatio": 0,
        "timerWheelEnable": False}
QUIET = {"plugin": {"processors": {"schedule": {"poll_interval_ms": 86_400_000}}}}


def _store_messages(peer: Peer) -> None:
    for i, (topic, queues) in enumerate(TOPICS.items()):
        r = _admin(peer, RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
            "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}, 10 + i)
        assert r.code == 0, r
    for group in GROUPS[:3]:  # known groups (nosuchgroup stays unknown: no auto-creation, see CONF)
        body = json.dumps({"groupName": group, "consumeEnable": True, "consumeBroadcastEnable": True,
                           "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1})
        r = _admin_body(peer, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body.encode())
        assert r.code == 0, r
    frames = []
    for i in range(300):
        topic = "PullT" if i % 7 else "PullU"  # (SendT stays empty here)
        tag = TAGS[i * 5 % 4]
        props = ("" if tag is None else f"TAGS\x01{tag}\x02") + f"KEYS\x01k{i}\x02WAIT\x01true"
        frames.append(encode(_cmd(RequestCode.SEND_MESSAGE_V2, {
            "a": "pg", "b": topic, "e": str(i % TOPICS[topic]), "f": "0", "g": "1700000000000", "h": "0",
            "i": props}, bytes([65 + i % 26]) * (1 + i * 37 % 3000), opaque=100 + i)))
    answers = peer.run(b"".join(frames), [])
    assert [decode(a).code for a in answers] == [0] * len(frames)
    eventually(lambda: all(_admin(peer, RequestCode.GET_MAX_OFFSET, {"topic": "PullT", "queueId": str(q)}, 16)
                           .ext["offset"] != "0" for q in range(4)), 30, "the messages dispatched")


def _admin_body(peer: Peer, code: int, body: bytes) -> Any:
    """One request with a body and its answer (``_admin``'s, for requests that carry JSON)."""
    answers = peer.run(encode(_cmd(code, {}, body, opaque=17)), [])
    assert len(answers) == 1, answers
    return decode(answers[0])


def _heartbeat(peer: Peer) -> None:
    """Group ``hb`` subscribes to PullT by TagA || TagC (its pulls without the SUBSCRIPTION flag use it)."""
    body = {"clientID": "c1", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "hb", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False, "subscriptionDataSet": [{
            "topic": "PullT", "subString": "TagA || TagC", "tagsSet": ["TagA", "TagC"], "codeSet": [],
            "subVersion": 5, "expressionType": "TAG", "classFilterMode": False}]}]}
    r = _admin_body(peer, RequestCode.HEART_BEAT, json.dumps(body).encode())
    assert r.code == 0, r


@pytest.fixture(scope="module")
def peers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Peer, Peer]]:
    """(pure, compiled) over the same store bytes."""
    fast_dir, pure_dir = tmp_path_factory.mktemp("fastpull"), tmp_path_factory.mktemp("purepull")
    with ExitStack() as running:
        fast = RmqdProcess(fast_dir, broker_conf=CONF, env={"RMQ_PURE": ""}, proxy=False, extra=QUIET)
        running.callback(fast.stop)
        _store_messages(Peer(fast.start()))
        fast.stop()
        shutil.copytree(fast_dir / "store", pure_dir / "store")
        pure = RmqdProcess(pure_dir, broker_conf=CONF, env={"RMQ_PURE": "1"}, proxy=False, extra=QUIET)
        running.callback(pure.stop)
        pair = (Peer(pure.start()), Peer(fast.start()))
        for peer in pair:
            _heartbeat(peer)
            peer.prefix = f"7F000001{peer.port:08X}"  # the message ids' broker address (sends to SendT)
        yield pair


def _pull_path(peer: Peer) -> str:
    """What the start line says serves pulls."""
    return next(line for line in peer.proc.log_lines() if "pull path: " in line).split("pull path: ", 1)[1]


def test_the_start_line_says_which_path_serves_pulls(peers: tuple[Peer, Peer]) -> None:
    assert _pull_path(peers[0]) == "pure: store MmapMessageStore has no compiled pull walk"
    assert _pull_path(peers[1]).startswith("compiled") or not compiler_present(), _pull_path(peers[1])


@st.composite
def pull_frame(draw: Callable[..., Any], opaque: int) -> bytes:
    topic = draw(st.sampled_from(["PullT", "PullT", "PullU", "NoSuchT"]))
    suspend = draw(st.sampled_from(["0", "0", "0", "15", "40"]))  # a long poll of a few ms: held, then answered
    ext: dict[str, str] = {
        "consumerGroup": draw(st.sampled_from(GROUPS)), "topic": topic,
        "queueId": str(draw(st.sampled_from([0, 1, 2, 3, 0, 4, -1]))),
        "queueOffset": str(draw(st.one_of(st.integers(0, 80), st.sampled_from([-1, 0, 10**6])))),
        "maxMsgNums": str(draw(st.sampled_from([32, 32, 1, 3, 0, 100]))),
        # SUBSCRIPTION (4) mostly, COMMIT_OFFSET (1), SUSPEND (2)
        "sysFlag": str(draw(st.sampled_from([4, 4, 5, 6, 7, 0, 1, 2, 3]))),
        "commitOffset": str(draw(st.sampled_from([0, 5, 17, -1]))), "suspendTimeoutMillis": suspend,
        "subscription": draw(st.sampled_from(["*", "TagA", "TagA || TagB", "TagC||NoTag", "NoTag", "", "a > 1"])),
        "subVersion": str(draw(st.sampled_from([0, 5, 9]))),
    }
    if ext["subscription"] == "a > 1":
        ext["expressionType"] = "SQL92"
    for k in draw(st.lists(st.sampled_from(["queueOffset", "maxMsgNums", "sysFlag", "queueId", "commitOffset",
                                            "suspendTimeoutMillis", "subVersion", "consumerGroup"]), max_size=1)):
        how = draw(st.sampled_from(["drop", "x1", "", "+3", "007", "-0", "99999999999", "9" * 20]))
        if how == "drop":
            ext.pop(k)
        else:
            ext[k] = how
    code = draw(st.sampled_from([RequestCode.PULL_MESSAGE] * 5 + [361]))  # and LITE_PULL_MESSAGE
    shape = draw(st.sampled_from(["rmq"] * 6 + ["java"] * 3 + ["cpp"] * 3 + [
        "oneway", "space", "dupkey", "escape", "unicode", "extra", "body", "bignum", "numkey"]))
    if shape == "rmq":
        return encode(_cmd(code, ext, opaque=opaque))
    if shape == "cpp" or shape == "bignum":
        return _frame(_cpp_pull(code, ext, opaque, shape == "bignum"))
    top: dict[str, Any] = {"extra": {"other": 1}, "body": {}}.get(shape, {})
    head = _header(code, ext, opaque, 2 if shape == "oneway" else 0, **top)
    if shape == "space":
        head = head.replace(b",", b", ", 1)
    elif shape == "dupkey":
        head = head.replace(b'"extFields":{', b'"extFields":{"topic":"PullU",')
    elif shape == "escape":
        head = head.replace(b'"topic":"PullT"', b'"topic":"Pull\\u0054"').replace(b'"consumerGroup"', b'"consumer\\u0047roup"')
    elif shape == "unicode":
        head = head.replace(b'"subscription":"', '"subscription":"é||'.encode())
    elif shape == "numkey":
        head = head.replace(b'"maxMsgNums":"', b'"maxMsgNums":7,"x":"')
    return _frame(head, b"body" if shape == "body" else b"")


_CPP_NUMBERS = frozenset(("queueId", "maxMsgNums", "sysFlag"))


def _cpp_pull(code: int, ext: dict[str, str], opaque: int, big: bool = False) -> bytes:
    """A pull header in the C++ client's shape: its int fields as JSON numbers (``big``: queueOffset too, past a
    Java int), its ACL fields, "language":"CPP", an empty remark and a newline."""
    ext = {k: int(v) if k in _CPP_NUMBERS and re.fullmatch(r"-?(0|[1-9][0-9]{0,8})", v) else v for k, v in ext.items()}
    if big:
        ext["queueOffset"] = 4294967296  # type: ignore[assignment]
    ext.update({"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "krJQ75CNiuMQmieI+kuoT7R8fFc="})
    h = {"code": code, "extFields": ext, "flag": 0, "language": "CPP", "opaque": opaque, "remark": "", "version": 63}
    return json.dumps(h, separators=(",", ":"), sort_keys=True).encode() + b"\n"


@st.composite
def send_frame(draw: Callable[..., Any], opaque: int) -> bytes:
    """A common-case send to SendT (served by the compiled send path) between the pulls of a read."""
    ext = {"a": "pg", "b": "SendT", "e": str(draw(st.integers(0, 1))), "f": "0", "g": "1700000000000", "h": "0",
           "i": "TAGS\x01TagA\x02WAIT\x01true"}
    return encode(_cmd(RequestCode.SEND_MESSAGE_V2, ext, draw(st.binary(min_size=1, max_size=40)), opaque=opaque))


@st.composite
def streams(draw: Callable[..., Any]) -> tuple[bytes, list[int]]:
    n = draw(st.integers(1, 12))
    frames = [draw(send_frame(1000 + i) if draw(st.integers(0, 5)) == 0 else pull_frame(1000 + i)) for i in range(n)]
    data = b"".join(frames)
    return data, sorted(draw(st.lists(st.integers(0, len(data)), max_size=3)))


def _offsets(peer: Peer) -> list[str]:
    out = []
    for group in GROUPS:
        for topic, queues in TOPICS.items():
            for q in range(queues):
                r = _admin(peer, RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic,
                                                                     "queueId": str(q)}, 18)
                out.append(f"{group} {topic} {q}: {r.code} {r.ext}")
    return out


def _gets(peer: Peer) -> dict[str, Any]:
    """The store's counters of gets (all: a long poll reads once before its hold and once after, a moved offset
    once; CONF keeps the clock's reads out), of those that found messages, and each group's GROUP_GET_NUMS /
    GROUP_GET_SIZE live totals."""
    info = runtime_info(peer.proc.broker_addr)
    out: dict[str, Any] = {k: info[f"store.{k}"] for k in ("gets", "get_messages", "found_gets")}
    for group in GROUPS:
        for name in ("GROUP_GET_NUMS", "GROUP_GET_SIZE"):
            r = _admin(peer, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": f"PullT@{group}"}, 19)
            out[f"{name} {group}"] = (r.code, json.loads(r.body)["statsDay"]["sum"] if r.code == 0 else None)
    return out


def _answers(peer: Peer, stream: tuple[bytes, list[int]]) -> dict[int, bytes]:
    """Each pull's raw answer, by its opaque."""
    return {decode(raw).opaque: raw for raw in peer.normalized(peer.run(*stream))}


def test_compiled_and_pure_pulls_agree(peers: tuple[Peer, Peer]) -> None:
    pure, fast = peers
    same = settings(fuzz_settings(60), deadline=None, suppress_health_check=list(HealthCheck))

    def check(stream: tuple[bytes, list[int]]) -> None:
        want, got = _answers(pure, stream), _answers(fast, stream)
        assert want.keys() == got.keys()
        diff = [(decode(want[k]), decode(got[k])) for k in want if want[k] != got[k]]
        assert not diff, diff[0]

    same(given(streams())(check))()
    # cut at every byte: a read of one byte or a few, each frame completed across reads
    check((b"".join([encode(_cmd(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "g1", "topic": "PullT", "queueId": "1", "queueOffset": str(i), "maxMsgNums": "4",
        "sysFlag": "5", "commitOffset": str(i), "subscription": "TagA || TagB"}, opaque=5000 + i)) for i in range(4)]
        + [_frame(_cpp_pull(RequestCode.PULL_MESSAGE, {"consumerGroup": "g2", "topic": "PullU", "queueId": "0",
                                                       "queueOffset": "3", "maxMsgNums": "2", "sysFlag": "4"}, 5010))]),
           list(range(1, 1500))))
    # long polls held at each queue's end and offsets moved past it, by PULL_MESSAGE and LITE_PULL_MESSAGE: the
    # compiled half plans them and the Python path goes on from its plan (the gets below count each read once)
    frames = []
    for q in range(4):
        end = _admin(fast, RequestCode.GET_MAX_OFFSET, {"topic": "PullT", "queueId": str(q)}, 16).ext["offset"]
        for i, (offset, flag, code) in enumerate([(end, "6", 11), (end, "7", 361), ("1000000", "4", 11),
                                                  (str(int(end) + 1), "5", 361)]):
            frames.append(encode(_cmd(code, {
                "consumerGroup": "g2", "topic": "PullT", "queueId": str(q), "queueOffset": offset, "maxMsgNums": "8",
                "sysFlag": flag, "commitOffset": "3", "suspendTimeoutMillis": "15", "subscription": "TagB"},
                opaque=6000 + 10 * q + i)))
    check((b"".join(frames), list(itertools.accumulate(len(f) for f in frames))))
    assert _offsets(pure) == _offsets(fast)
    pure_info, fast_info = runtime_info(pure.proc.broker_addr), runtime_info(fast.proc.broker_addr)
    assert pure_info["store.compiled_pulls"] == "0" and pure_info["compiledPullRequests"] == "0"
    if compiler_present():
        assert int(fast_info["store.compiled_pulls"]) > 0
        assert int(fast_info["compiledPullRequests"]) > 0

    def same_gets() -> bool | None:  # a group's statistics series starts at its first 1 s sample
        want = _gets(pure)
        return want == _gets(fast) and want["GROUP_GET_NUMS g1"][0] == 0 or None

    eventually(same_gets, 30, "the same get statistics")


POLL_GROUP, POLL_TOPIC = "pg1", "PollT"  # queue 0 stays empty, queue 1 holds 3 messages, queue 2 is woken


def _poll_store(peer: Peer) -> None:
    r = _admin(peer, RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": POLL_TOPIC, "defaultTopic": "TBW102", "readQueueNums": "3", "writeQueueNums": "3", "perm": "6",
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}, 10)
    assert r.code == 0, r
    body = {"groupName": POLL_GROUP, "consumeEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0}
    assert _admin_body(peer, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, json.dumps(body).encode()).code == 0
    answers = peer.run(b"".join(_poll_send(1, i) for i in range(3)), [])
    assert [decode(a).code for a in answers] == [0, 0, 0]
    eventually(lambda: _admin(peer, RequestCode.GET_MAX_OFFSET, {"topic": POLL_TOPIC, "queueId": "1"}, 16)
               .ext["offset"] == "3", 30, "the messages dispatched")


def _poll_send(queue: int, opaque: int) -> bytes:
    return encode(_cmd(RequestCode.SEND_MESSAGE_V2, {
        "a": "pp", "b": POLL_TOPIC, "e": str(queue), "f": "0", "g": "1700000000000", "h": "0",
        "i": "TAGS\x01TagA\x02WAIT\x01true"}, b"polled", opaque=opaque))


def _poll(queue: int, offset: int, opaque: int, suspend_ms: int = 0, code: int = RequestCode.PULL_MESSAGE) -> bytes:
    """A pull of PollT by its own subscription (TagA), SUSPEND (long polling) when ``suspend_ms``."""
    return encode(_cmd(code, {
        "consumerGroup": POLL_GROUP, "topic": POLL_TOPIC, "queueId": str(queue), "queueOffset": str(offset),
        "maxMsgNums": "32", "sysFlag": str(5 | (2 if suspend_ms else 0)), "commitOffset": str(offset),
        "suspendTimeoutMillis": str(suspend_ms), "subscription": "TagA"}, opaque=opaque))


@pytest.fixture(scope="module")
def pollers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Peer, Peer]]:
    """(RMQ_PURE_PULL_REQUESTS=1: every pull a task's, compiled per-read pulls) over stores set up alike."""
    with ExitStack() as running:
        pair = []
        for name, pure in (("polltask", "1"), ("pollread", "")):
            proc = RmqdProcess(tmp_path_factory.mktemp(name), broker_conf=CONF, proxy=False, extra=QUIET,
                               env={"RMQ_PURE": "", "RMQ_PURE_PULL_REQUESTS": pure})
            running.callback(proc.stop)
            peer = Peer(proc.start())
            peer.prefix = f"7F000001{peer.port:08X}"
            _poll_store(peer)
            pair.append(peer)
        yield pair[0], pair[1]


def _counted(peer: Peer, stream: Callable[[Peer], list[bytes]]) -> tuple[dict[str, int], list[tuple[Any, ...]]]:
    """The store's get counters' growth over ``stream`` and its answers by opaque: code, remark, fields, body
    size (the stores were written apart: their records' hosts and times differ)."""
    before = runtime_info(peer.proc.broker_addr)
    answers = sorted((c.opaque, c.code, c.remark, c.ext, len(c.body)) for c in map(decode, stream(peer)))
    after = runtime_info(peer.proc.broker_addr)
    return {k: int(after[f"store.{k}"]) - int(before[f"store.{k}"]) for k in ("gets", "found_gets")}, answers


def test_long_polls_and_moved_offsets_read_the_store_once_per_decision(pollers: tuple[Peer, Peer]) -> None:
    """Long polls that time out on an empty queue (or at a queue's end), offsets moved, each pull its own read
    (the compiled half takes each but the first) or all in one: the same answers and the same store gets as
    the task path -- two per held pull (before and after its hold), one per other pull, none counted twice."""
    task, read = pollers
    polls = [_poll(0, 0, 100)]  # the first pull of the connection: the task path's (the compiled half is installed)
    polls += [_poll(0, 0, 101 + i, 5) for i in range(12)]  # an empty queue: held 5 ms, then PULL_NOT_FOUND
    polls += [_poll(1, 3, 120 + i, 5, 361) for i in range(6)]  # at the end of a queue, LITE_PULL_MESSAGE
    polls += [_poll(0, 7, 130), _poll(1, 9, 131), _poll(1, 2, 132)]  # moved offsets (an event stored), a found one
    assert "requests per task" in _pull_path(task) or not compiler_present(), _pull_path(task)
    assert "answered per read" in _pull_path(read) or not compiler_present(), _pull_path(read)

    def each(peer: Peer) -> list[bytes]:
        return [a for p in polls for a in peer.run(p, [])]

    def joined(peer: Peer) -> list[bytes]:  # one read: the compiled half plans the first, the rest are tasks'
        return peer.run(b"".join(polls), [])

    for stream in (each, joined):
        (want_gets, want), (gets, answers) = _counted(task, stream), _counted(read, stream)
        assert answers == want
        assert [a[1] for a in want].count(19) == 19 and [a[1] for a in want].count(21) == 2, want
        assert gets == want_gets
        assert want_gets == {"gets": 2 * 18 + 4, "found_gets": 1}, want_gets
    assert int(runtime_info(read.proc.broker_addr)["compiledPullRequests"]) > 0 or not compiler_present()


def _answer_to(peer: Peer, opaque: int) -> Any:
    """The next answer of ``opaque`` on ``peer``'s connection."""
    dec = FrameDecoder()
    while True:
        for c in dec.feed(peer.sock.recv(1 << 16)):
            if c.opaque == opaque:
                return c


def test_a_held_long_poll_is_woken_by_a_message(pollers: tuple[Peer, Peer]) -> None:
    """A long poll held (for a minute) on an empty queue answers the message another connection stores: woken by
    the arrival notifier on both paths, its store read once before the hold and once after."""
    got = []
    for peer in pollers:
        assert [decode(a).code for a in peer.run(_poll(0, 0, 140), [])] == [19]  # the compiled half installed
        before = runtime_info(peer.proc.broker_addr)
        peer.sock.sendall(_poll(2, 0, 141, 60_000))
        eventually(lambda: int(runtime_info(peer.proc.broker_addr)["store.gets"]) > int(before["store.gets"]),  # noqa: B023
                   30, "the held pull's first read")
        sender = Peer(peer.proc)
        assert [decode(a).code for a in sender.run(_poll_send(2, 142), [])] == [0]
        sender.sock.close()
        answer = _answer_to(peer, 141)
        after = runtime_info(peer.proc.broker_addr)
        got.append(((answer.opaque, answer.code, answer.ext, len(answer.body)),
                    {k: int(after[f"store.{k}"]) - int(before[f"store.{k}"]) for k in ("gets", "found_gets")}))
    assert got[0] == got[1]
    assert got[0][0][:2] == (141, 0) and got[0][1] == {"gets": 2, "found_gets": 1}, got[0]
