"""The compiled send path (``_faststore.send_serve`` behind plugins/broker/fastsend.py) against the Python one.

Two rmqd run side by side, one with ``RMQ_PURE=1`` (send.py serves every send) and one as installed (the
compiled path serves the common sends of a read). Both get the same request streams on one raw
connection each -- valid sends in both spellings (SEND_MESSAGE_V2, SEND_MESSAGE), WAIT=true at every
place, properties malformed or deferring (DELAY, TIMER_*, TRAN_MSG, CLUSTER), hostile headers (spaces,
duplicate keys, numbers, escapes, non-ASCII, other top-level keys), unknown, system, retry and
read-only topics, queue ids out of range or not plain digits, bodies over maxMessageSize, transaction
flags, batches, oneway sends, other requests between them, frames cut at arbitrary bytes -- and must
answer every request alike, byte for byte (the message id's broker address and the producer's port in
remarks aside; compared by opaque, see below), and store
alike: every message pulled back (topic, queue, queue offset, commitlog offset, body, properties, flag,
sysflag, born host IP) matches. Store timestamps and the born port may differ.
"""

from __future__ import annotations

import json
import re
import socket
import struct
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.frame import FrameDecoder, decode, encode
from rmq.protocol.message import decode_messages, encode_batch
from rmq.testing.daemon import RmqdProcess, eventually, runtime_info
from rmq.testing.fuzz import compiler_present, fuzz_settings

pytestmark = pytest.mark.integration

MAX_BODY = 2048
TOPICS = ["FastT", "FastU", "ReadOnlyT", "NewAutoT", "%RETRY%g1", "rmq_sys_x", "SCHEDULE_TOPIC_XXXX", "bad topic"]
QUEUES = 4
SENTINEL = 0x7FFFFF00


def _cmd(code: int, ext: dict[str, str], body: bytes = b"", opaque: int = 0) -> RemotingCommand:
    c = RemotingCommand.request(code, ext, body, opaque=opaque, language="JAVA")
    return c


def _frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), len(header)) + header + body


def _header(code: int, ext: dict[str, Any], opaque: int, flag: int = 0, **top: Any) -> bytes:
    h: dict[str, Any] = {"code": code, "extFields": ext, "flag": flag, "language": "JAVA", "opaque": opaque,
                         "serializeTypeCurrentRPC": "JSON", "version": 409}
    h.update(top)
    return json.dumps(h, separators=(",", ":"), sort_keys=True).encode()


# What librocketmq 1.2.3 (PyPI rocketmq 0.4.4, the C++ producer) writes, captured with strace from a send to rmqd:
# SEND_MESSAGE with long keys in jsoncpp's sorted order, some ext values as JSON numbers, its ACL fields (empty
# key), "language":"CPP", an empty remark, and a newline after the header.
CPP_SEND = (b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"krJQ75CNiuMQmieI+kuoT7R8fFc=",'
            b'"batch":"0","bornTimestamp":"1795896377692","defaultTopic":"TBW102","defaultTopicQueueNums":4,"flag":0,'
            b'"producerGroup":"PG_COMPAT","properties":"KEYS\\u0001k0\\u0002TAGS\\u0001tg\\u0002UNIQ_KEY\\u0001'
            b'0100007F00003C390000DC63B9940100\\u0002WAIT\\u0001true\\u0002","queueId":0,"reconsumeTimes":"0",'
            b'"sysFlag":0,"topic":"CapT","unitMode":"0"},"flag":0,"language":"CPP","opaque":2,"remark":"",'
            b'"version":63}\n', b"body-0")
# its batch: SEND_MESSAGE with batch "1", the MessageBatch body (each member's own properties, WAIT=true kept)
CPP_BATCH = (CPP_SEND[0].replace(b'"batch":"0"', b'"batch":"1"').replace(
    b'"properties":"KEYS\\u0001k0\\u0002TAGS\\u0001tg\\u0002UNIQ_KEY\\u00010100007F00003C390000DC63B9940100\\u0002'
    b'WAIT\\u0001true\\u0002"', b'"properties":"WAIT\\u0001true\\u0002"'),
    b"".join(b"\x00\x00\x00`" + bytes(12) + b"\x00\x00\x00\x06body-%d\x00DKEYS\x01k%d\x02TAGS\x01tg\x02UNIQ_KEY\x01"
             b"0100007F00004ED30000A269B994%02X00\x02WAIT\x01true\x02" % (i, i, i + 1) for i in range(3)))
CPP_NUMBERS = frozenset(("defaultTopicQueueNums", "flag", "queueId", "sysFlag", "d", "e", "f", "h"))


def _captured(frame: tuple[bytes, bytes], topic: str, queue: int, opaque: int) -> bytes:
    """A captured C++ frame sent to ``topic``/``queue`` with ``opaque``, its bytes otherwise as captured."""
    head, body = frame
    head = head.replace(b'"topic":"CapT"', f'"topic":"{topic}"'.encode()).replace(
        b'"queueId":0,', f'"queueId":{queue},'.encode()).replace(b'"opaque":2,', f'"opaque":{opaque},'.encode(), 1)
    return _frame(head, body)


def _cpp_header(code: int, ext: dict[str, Any], opaque: int, flag: int) -> bytes:
    """A header in the C++ client's shape (see CPP_SEND) for ``ext``: its number fields as JSON numbers when
    they are plain ints, its ACL fields added."""
    ext = {k: int(v) if k in CPP_NUMBERS and re.fullmatch(r"-?(0|[1-9][0-9]{0,9})", v) else v for k, v in ext.items()}
    ext.update({"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "krJQ75CNiuMQmieI+kuoT7R8fFc="})
    h = {"code": code, "extFields": ext, "flag": flag, "language": "CPP", "opaque": opaque, "remark": "",
         "version": 63}
    return json.dumps(h, separators=(",", ":"), sort_keys=True).encode() + b"\n"


def _props(items: list[tuple[str, str]], tail: str) -> str:
    return "\x02".join(f"{k}\x01{v}" for k, v in items) + tail


prop_item = st.one_of(
    st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "a", "WAIT", "XWAIT"]),
              st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=8)),
    st.just(("WAIT", "true")), st.just(("WAIT", "false")), st.just(("DELAY", "18")), st.just(("TIMER_DELAY_SEC", "86400")),
    st.just(("TRAN_MSG", "true")), st.just(("CLUSTER", "other")), st.just(("é", "ü")),
)
props_st = st.one_of(
    st.builds(_props, st.lists(prop_item, max_size=5), st.sampled_from(["", "\x02", "\x02\x02", "\x01", "WAIT\x01true"])),
    st.sampled_from(["", "WAIT\x01true", "WAIT\x01true\x02", "\x02WAIT\x01true", "a\x01b\x01c", "\x01x", "x"]),
)


@st.composite
def send_frame(draw: Callable[..., Any], opaque: int) -> bytes:
    v2 = draw(st.booleans())
    keys = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m"] if v2 else [
        "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
        "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch"]
    vals: list[Any] = ["pg", draw(st.sampled_from(TOPICS)), "TBW102", "4",
                       draw(st.sampled_from(["0", "1", "3", "4", "9", "007", "abc", "", "2147483648", "99999999999"])),
                       draw(st.sampled_from(["0", "0", "1", "2", "4", "8", "12", "16", "x"])),
                       draw(st.sampled_from(["1700000000000", "0", "-5", "99999999999999999999"])),
                       draw(st.sampled_from(["0", "7", "-1"])), draw(props_st), "0", "false", "16",
                       draw(st.sampled_from(["false", "false", "true", "1", "TRUE", "no"]))]
    common = draw(st.integers(0, 2)) > 0  # two in three: a send as producers write them
    if common:
        vals[1] = draw(st.sampled_from(["FastT", "FastU"]))
        vals[4:8] = [str(draw(st.integers(0, QUEUES - 1))), "0", "1700000000000", draw(st.sampled_from(["0", "3"]))]
        vals[8] = _props([("TAGS", "t"), ("UNIQ_KEY", "u" * draw(st.integers(0, 30))), *draw(st.lists(
            st.sampled_from([("KEYS", "k1 k2"), ("WAIT", "true"), ("WAIT", "false")]), max_size=2))], "")
        vals[12] = "false"
    ext = dict(zip(keys, vals, strict=True))
    for k in draw(st.lists(st.sampled_from(keys), max_size=0 if common else 2)):  # fields left out
        ext.pop(k, None)
    body = draw(st.one_of(st.binary(max_size=64), st.sampled_from([b"x" * MAX_BODY, b"y" * (MAX_BODY + 1)])))
    shape = draw(st.sampled_from(["plain"] * 4 + ["cpp", "cpp", "oneway", "cpp-oneway"])) if common else draw(
        st.sampled_from(["plain"] * 6 + ["oneway", "space", "dupkey", "number", "escape", "unicode", "extra", "remark",
                                         "nolang", "cpp", "cpp-oneway"]))
    code = RequestCode.SEND_MESSAGE_V2 if v2 else RequestCode.SEND_MESSAGE
    flag = 2 if shape.endswith("oneway") else 0
    if shape.startswith("cpp"):
        return _frame(_cpp_header(code, ext, opaque, flag), body)
    top: dict[str, Any] = {}
    if shape == "number" and ext:
        ext[next(iter(ext))] = 5
    if shape == "extra":
        top["other"] = 1
    if shape == "remark":
        top["remark"] = "hi"
    head = _header(code, ext, opaque, flag, **top)
    if shape == "nolang":
        head = head.replace(b'"language":"JAVA",', b"")
    if shape == "space":
        head = head.replace(b",", b", ", 1)
    if shape == "escape":
        head = head.replace(b'"pg"', b'"p\\u0067"').replace(b'"FastT"', b'"Fast\\u0054"')
    if shape == "unicode":
        head = head.replace(b'"pg"', '"pé"'.encode())
    if shape == "dupkey":
        k = "b" if v2 else "topic"
        head = head.replace(b'"extFields":{', f'"extFields":{{"{k}":"FastU",'.encode())
    return _frame(head, body)


member_props = st.one_of(
    st.builds(lambda u, extra: _props([("TAGS", "t"), ("UNIQ_KEY", u), *extra], "\x02"), st.text("0123456789ABCDEF", max_size=32),
              st.lists(st.sampled_from([("KEYS", "k1"), ("WAIT", "true"), ("WAIT", "false"), ("é", "ü")]), max_size=2)),
    st.sampled_from(["", "TAGS\x01a", "DELAY\x013", "TIMER_DELAY_SEC\x0110", "TRAN_MSG\x01true", "\x01x", "a\x01b\x01c",
                     "WAIT\x01false\x02"]),
)


@st.composite
def batch_frame(draw: Callable[..., Any], opaque: int) -> bytes:
    """A batch in every spelling (SEND_BATCH_MESSAGE, batch=true on SEND_MESSAGE(_V2), the C++ client's), valid
    or not: members refused by send.py's checks, bodies cut, flipped or holding bytes that are not UTF-8."""
    items = draw(st.lists(st.tuples(st.binary(max_size=40), st.sampled_from([0, 3, -1, 2**31 - 1]), member_props),
                          min_size=1, max_size=8))
    body = encode_batch(items)
    broken = draw(st.sampled_from(["no"] * 6 + ["cut", "flip", "utf8", "empty", "tail", "big"]))
    if broken == "cut":
        body = body[:draw(st.integers(0, len(body)))]
    elif broken == "flip" and body:
        i = draw(st.integers(0, len(body) - 1))
        body = body[:i] + bytes((body[i] ^ draw(st.integers(1, 255)),)) + body[i + 1:]
    elif broken == "utf8":
        body = encode_batch([(b"x", 0, "")]) + struct.pack(">iiiii", 26, 0, 0, 0, 1) + b"y\x00\x03\xffab"
    elif broken == "empty":
        body = b""
    elif broken == "tail":
        body += b"\x00\x00"
    elif broken == "big":
        body = encode_batch([(b"z" * (MAX_BODY - 60), 0, "")]) + body
    spelling = draw(st.sampled_from(["320", "320", "v2", "long", "cpp"]))
    long_ext = {"producerGroup": "pg", "topic": draw(st.sampled_from(["FastT"] * 4 + ["FastU", "ReadOnlyT", "%RETRY%g1"])),
                "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                "queueId": draw(st.sampled_from(["0", "1", "2", "3", "007", "9"])),
                "sysFlag": draw(st.sampled_from(["0"] * 4 + ["4", "16"])), "bornTimestamp": "1700000000000",
                "flag": "0", "properties": draw(st.sampled_from(["WAIT\x01true\x02"] * 3 + [
                    "", "WAIT\x01false", "TAGS\x01h", "CLUSTER\x01o", "DELAY\x012"])),
                "reconsumeTimes": "0", "unitMode": "false", "maxReconsumeTimes": "16", "batch": "true" if spelling != "320" else "false"}
    if spelling == "cpp":
        long_ext["batch"] = "1"
    ext = long_ext if spelling in ("long", "cpp") else dict(zip("abcdefghijklm", long_ext.values(), strict=True))
    code = {"320": RequestCode.SEND_BATCH_MESSAGE, "v2": RequestCode.SEND_MESSAGE_V2}.get(spelling, RequestCode.SEND_MESSAGE)
    flag = draw(st.sampled_from([0, 0, 0, 2]))
    head = _cpp_header(code, ext, opaque, flag) if spelling == "cpp" else _header(code, ext, opaque, flag)
    return _frame(head, body)


@st.composite
def other_frame(draw: Callable[..., Any], opaque: int) -> bytes:
    # requests whose answers do not depend on how far the reput got (GET_MAX_OFFSET's would: a race on both paths)
    kind = draw(st.sampled_from(["minoffset", "unsupported", "garbage-header", "heartbeat", "consumeroffset", "cpp"]))
    if kind == "cpp":  # a captured C++ send, replayed as it came
        return _captured(CPP_SEND, draw(st.sampled_from(["FastT", "FastU", "ReadOnlyT"])), draw(st.integers(0, 5)),
                         opaque)
    if kind == "minoffset":
        return encode(_cmd(RequestCode.GET_MIN_OFFSET, {"topic": draw(st.sampled_from(TOPICS[:2])), "queueId": "1"},
                           opaque=opaque))
    if kind == "consumeroffset":
        return encode(_cmd(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "FastT", "queueId": "0"},
                           opaque=opaque))
    if kind == "unsupported":
        return encode(_cmd(9999, {}, opaque=opaque))
    if kind == "heartbeat":
        return encode(_cmd(RequestCode.HEART_BEAT, {}, b'{"clientID":"c1","producerDataSet":[],"consumerDataSet":[]}',
                           opaque=opaque))
    # a header the pure decoder refuses after reading its opaque: answered, the connection goes on (a frame
    # that closes it is not generated: whether answers of its read leave first is a race on either path)
    bad = draw(st.sampled_from([b'"extFields":{"b":{"x":1}}', b'"extFields":[1]', b'"extFields":{"b":null,"b":true}']))
    return _frame(b'{"code":310,' + bad + b',"flag":0,"opaque":' + str(opaque).encode() + b"}")


@st.composite
def streams(draw: Callable[..., Any]) -> tuple[bytes, list[int]]:
    n = draw(st.integers(1, 40))
    frames = []
    for i in range(n):
        opaque = 1000 + i
        kind = draw(st.integers(0, 7))
        frames.append(draw(send_frame(opaque) if kind < 5 else batch_frame(opaque) if kind < 7 else other_frame(opaque)))
    data = b"".join(frames)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=6)))
    return data, cuts


class Peer:
    """One rmqd and a raw connection to its broker."""

    def __init__(self, proc: RmqdProcess) -> None:
        self.proc = proc
        self.port = int(proc.broker_addr.rsplit(":", 1)[1])
        self.sock = self._connect()
        self.dec = FrameDecoder()
        self.prefix = ""

    def _connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def run(self, data: bytes, cuts: list[int]) -> list[bytes]:
        """Write ``data`` in the pieces ``cuts`` make, then a sentinel; the raw answers to ``data``, read until
        the sentinel's came and every request that expects one has its answer (under SYNC_FLUSH a held answer
        may leave after the sentinel's); all answers, and a marker, when the broker closed the connection."""
        expected, pos = 0, 0
        while pos < len(data):  # the generator's frames are whole; a oneway header says "flag":2
            (length,) = struct.unpack_from(">i", data, pos)
            (hlen,) = struct.unpack_from(">i", data, pos + 4)
            expected += b'"flag":2,' not in data[pos + 8:pos + 8 + (hlen & 0xFFFFFF)]
            pos += 4 + length
        sentinel = False
        last = 0
        try:
            for c in [*cuts, len(data)]:
                if c > last:
                    self.sock.sendall(data[last:c])
                    last = c
            self.sock.sendall(encode(_cmd(9999, {}, opaque=SENTINEL)))
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed on a bad frame: what it answered before is still read
        out: list[bytes] = []
        buf = b""
        while True:
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                n = 4 + struct.unpack_from(">i", buf)[0]
                raw, buf = buf[:n], buf[n:]
                cmd = decode(raw)
                if cmd.opaque == SENTINEL:
                    sentinel = True
                elif cmd.flag & 1:  # not a request of the broker's own
                    out.append(raw)
            if sentinel and len(out) >= expected:
                return out
            try:
                chunk = self.sock.recv(1 << 20)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.sock.close()
                self.sock = self._connect()
                return [*out, b"closed"]
            buf += chunk

    def normalized(self, answers: list[bytes]) -> list[bytes]:
        """The answers without what differs between the two daemons: the broker's address in message ids and
        the producer's port in remarks (lengths kept, so the frames' length words still compare)."""
        me = f"127.0.0.1:{self.sock.getsockname()[1]}".encode()
        broker = self.prefix.encode()
        return [a.replace(broker, b"B" * len(broker)).replace(me, b"P" * len(me)) for a in answers]


def _admin(peer: Peer, code: int, ext: dict[str, str], opaque: int) -> RemotingCommand:
    peer.sock.sendall(encode(_cmd(code, ext, opaque=opaque)))
    dec = FrameDecoder()
    while True:
        cmds = dec.feed(peer.sock.recv(1 << 16))
        if cmds:
            return cmds[0]


@pytest.fixture(scope="module", params=["ASYNC_FLUSH", "SYNC_FLUSH"])
def peers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Peer, Peer]]:
    """(pure, compiled) with the flush type of the param: under SYNC_FLUSH the compiled path's answers of a
    read are held for one flush, as send.py's HeldAnswers are."""
    # nothing the brokers do by the clock may append meanwhile (a delay level, a timer, a transaction check
    # due during the test would land at different offsets on the two): delays of hours, no checks
    conf = {"maxMessageSize": MAX_BODY, "autoCreateTopicEnable": True, "transactionTimeOut": 86_400_000,
            "transactionCheckInterval": 86_400_000, "flushDiskType": request.param}
    procs = []
    try:
        for env in ({"RMQ_PURE": "1"}, {"RMQ_PURE": ""}):  # "": unset, whatever the suite runs under
            p = RmqdProcess(tmp_path_factory.mktemp("fastsend"), broker_conf=conf, env=env, proxy=False)
            procs.append(p)
            p.start()
        pair = (Peer(procs[0]), Peer(procs[1]))
        for peer in pair:
            for i, (topic, perm) in enumerate((("FastT", "6"), ("FastU", "6"), ("ReadOnlyT", "4"))):
                r = _admin(peer, RequestCode.UPDATE_AND_CREATE_TOPIC, {
                    "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(QUEUES),
                    "writeQueueNums": str(QUEUES), "perm": perm, "topicFilterType": "SINGLE_TAG",
                    "topicSysFlag": "0", "order": "false"}, 10 + i)
                assert r.code == 0, r
            for i, topic in enumerate(("FastT", "FastU")):  # a first stored send gives the connection its path
                ext = {"a": "pg", "b": topic, "e": "0", "f": "0", "g": "1", "h": "0", "i": "WAIT\x01true"}
                r = _admin(peer, RequestCode.SEND_MESSAGE_V2, ext, 20 + i)
                assert r.code == 0, r
                peer.prefix = r.ext["msgId"][:-16]
        yield pair
    finally:
        for p in procs:
            p.stop()


def test_both_paths_serve_as_the_start_line_says(peers: tuple[Peer, Peer]) -> None:
    pure, fast = peers
    assert any("send path: pure: pure store append" in line for line in pure.proc.log_lines())
    if compiler_present():
        assert any("send path: compiled" in line for line in fast.proc.log_lines()), fast.proc.log_tail()


def test_cpp_client_frames_take_the_compiled_path(peers: tuple[Peer, Peer]) -> None:
    """The C++ producer's sends and batch as captured (and a oneway send in its shape) are served by the
    compiled path, answered and stored as send.py does."""
    pure, fast = peers
    frames = [_captured(CPP_SEND, "FastT", 0, 500 + i) for i in range(QUEUES)]  # queues the store has (fixture)
    oneway = {"producerGroup": "pg", "topic": "FastU", "queueId": "0", "sysFlag": "0", "bornTimestamp": "1",
              "flag": "0", "properties": "TAGS\x01t\x02WAIT\x01true\x02"}
    frames.append(_frame(_cpp_header(RequestCode.SEND_MESSAGE, oneway, 510, 2), b"oneway"))
    before = int(runtime_info(fast.proc.broker_addr)["store.compiled_sends"])
    answers = [peer.normalized(peer.run(b"".join(frames), [])) for peer in (pure, fast)]
    assert answers[0] == answers[1] and [decode(a).code for a in answers[1]] == [0] * QUEUES
    if compiler_present():
        assert int(runtime_info(fast.proc.broker_addr)["store.compiled_sends"]) == before + len(frames)
    before += len(frames)
    batch = _captured(CPP_BATCH, "FastU", 0, 520)
    answers = [peer.normalized(peer.run(batch, [])) for peer in (pure, fast)]
    assert answers[0] == answers[1] and decode(answers[1][0]).code == 0
    assert decode(answers[1][0]).ext["msgId"].count(",") == 2  # one message id per member
    if compiler_present():
        assert int(runtime_info(fast.proc.broker_addr)["store.compiled_sends"]) == before + 3
    for topic in ("FastT", "FastU"):
        assert _stored(pure, topic, 0) == _stored(fast, topic, 0), topic


def _stored(peer: Peer, topic: str, queue: int) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    offset = 0
    while True:
        r = _admin(peer, RequestCode.PULL_MESSAGE, {
            "consumerGroup": "cmp", "topic": topic, "queueId": str(queue), "queueOffset": str(offset),
            "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
            "subscription": "*", "subVersion": "0"}, 77)
        if r.code != 0 or not r.body:
            return out
        for m in decode_messages(r.body, decompress=False):
            out.append((m.topic, m.queue_id, m.queue_offset, m.commit_log_offset, m.body, m.properties, m.flag,
                        m.sys_flag, m.born_host[0], m.store_size, m.reconsume_times))
        offset = int(r.ext["nextBeginOffset"])


def test_compiled_and_pure_sends_agree(peers: tuple[Peer, Peer]) -> None:
    pure, fast = peers

    @settings(fuzz_settings(60), deadline=None, suppress_health_check=list(HealthCheck))
    @given(streams())
    def same_answers(stream: tuple[bytes, list[int]]) -> None:
        data, cuts = stream
        a = pure.normalized(pure.run(data, cuts))
        b = fast.normalized(fast.run(data, cuts))
        assert len(a) == len(b)
        # by opaque: the pure path itself answers a header it refuses before the requests of the same read
        # (so the order of answers follows where reads happened to end); the order the sends were stored
        # in is what their queue offsets say, and those are compared
        a.sort(key=lambda raw: decode(raw).opaque)
        b.sort(key=lambda raw: decode(raw).opaque)
        for x, y in zip(a, b, strict=True):
            assert x == y, (decode(x) if x != b"closed" else x, decode(y) if y != b"closed" else y)

    served = int(runtime_info(fast.proc.broker_addr).get("store.compiled_sends", "0"))
    same_answers()
    assert runtime_info(pure.proc.broker_addr)["store.compiled_sends"] == "0"
    if compiler_present():  # the compiled path did serve (a read whose first frame it refuses serves none)
        assert int(runtime_info(fast.proc.broker_addr)["store.compiled_sends"]) > served
    for topic in ("FastT", "FastU", "NewAutoT"):
        for q in range(QUEUES):
            assert _stored(pure, topic, q) == _stored(fast, topic, q), (topic, q)
    for topic in ("FastT", "FastU"):  # the broker's statistics count compiled sends alike (mqadmin statsAll)
        assert _put_stats(pure, topic) == _put_stats(fast, topic), topic


def _put_stats(peer: Peer, topic: str) -> tuple[Any, Any]:
    """TOPIC_PUT_NUMS's day snapshot (messages since the topic was first counted, per send): (sum, avgpt)."""
    def day() -> Any:
        r = _admin(peer, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": topic}, 78)
        return json.loads(r.body)["statsDay"] if r.code == 0 else None

    d = eventually(day, 30, f"{topic}'s put statistics")  # the series starts at its first 1 s sample
    return d["sum"], d["avgpt"]  # the live counters since that sample's zero: every answered send is in


def test_held_answers_that_time_out_leave_as_flush_disk_timeout(rmqd_factory: Callable[..., RmqdProcess]) -> None:
    """A disk that never confirms (the fake plugin's stalled flush policy, which holds answers): the
    compiled path's answers of a read leave after syncFlushTimeout as FLUSH_DISK_TIMEOUT with their
    message ids and offsets, as send.py's HeldAnswers do (compared with RMQ_PURE=1), stored all the same."""
    conf = {"syncFlushTimeout": 400, "flushDiskType": "SYNC_FLUSH"}
    extra = {"plugins": {"flush": ["stalled"]}}
    pure = Peer(rmqd_factory(broker_conf=conf, extra=extra, env={"RMQ_PURE": "1"}))
    fast = Peer(rmqd_factory(broker_conf=conf, extra=extra, env={"RMQ_PURE": ""}))
    frames = [encode(_cmd(RequestCode.SEND_MESSAGE_V2, {
        "a": "pg", "b": "HeldT", "c": "TBW102", "d": "4", "e": str(i % 2), "f": "0", "g": "1", "h": "0",
        "i": "TAGS\x01t\x02WAIT\x01true"}, b"m%d" % i, opaque=100 + i)) for i in range(5)]
    answers = []
    for peer in (pure, fast):
        # the first read creates the topic and its queues (a queue the store has not seen is the Python
        # path's), and the compiled path is given to the connection after it
        first = peer.run(b"".join(frames[:2]), [])
        rest = peer.run(b"".join(frames[2:]), [])
        peer.prefix = decode(first[0]).ext["msgId"][:-16]
        answers.append(peer.normalized(first + rest))
    assert answers[0] == answers[1]
    assert [decode(a).code for a in answers[1]] == [ResponseCode.FLUSH_DISK_TIMEOUT] * 5
    if compiler_present():
        assert runtime_info(fast.proc.broker_addr)["store.compiled_sends"] == "3"
    for q in range(2):
        assert _stored(pure, "HeldT", q) == _stored(fast, "HeldT", q)


def test_a_held_pull_on_the_connection_leaves_sends_compiled(rmqd_factory: Callable[..., RmqdProcess]) -> None:
    """A client whose producer and consumer share one connection (Java's MQClientInstance): while its
    long-poll pull is held, its sends still take the compiled path (the pull's request has begun; only
    requests not yet begun could be overtaken), and a send to the pulled queue wakes the pull."""
    peer = Peer(rmqd_factory(env={"RMQ_PURE": ""}, proxy=False))
    for i, topic in enumerate(("HoldT", "PullT")):
        r = _admin(peer, RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6",
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}, 10 + i)
        assert r.code == 0, r

    def send(topic: str, q: int, opaque: int) -> bytes:
        return encode(_cmd(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": topic, "e": str(q), "f": "0", "g": "1",
                                                         "h": "0", "i": "WAIT\x01true"}, b"x", opaque=opaque))

    assert [decode(a).code for a in peer.run(send("HoldT", 0, 20) + send("HoldT", 1, 21), [])] == [0, 0]
    pull = encode(_cmd(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "cg", "topic": "PullT", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1",
        "sysFlag": "6", "commitOffset": "0", "suspendTimeoutMillis": "20000", "subscription": "*",
        "subVersion": "0"}, opaque=30))
    peer.sock.sendall(pull)
    eventually(lambda: runtime_info(peer.proc.broker_addr)["pullHeld"] == "1", 30, "the pull held")
    held = peer.run(send("HoldT", 0, 40) + send("HoldT", 1, 41), [])  # answered while the pull is held
    assert [(decode(a).opaque, decode(a).code) for a in held] == [(40, 0), (41, 0)]
    if compiler_present():
        assert runtime_info(peer.proc.broker_addr)["store.compiled_sends"] == "2"
    woke = peer.run(send("PullT", 0, 50), [])
    assert sorted((decode(a).opaque, decode(a).code) for a in woke) == [(30, 0), (50, 0)] or \
        [(decode(a).opaque, decode(a).code) for a in woke] == [(50, 0)]
    if len(woke) == 1:  # the pull's answer follows its wake-up by the reput
        assert decode(eventually(lambda: _next_frame(peer), 30, "the held pull's answer")).opaque == 30


def _next_frame(peer: Peer) -> bytes | None:
    head = peer.sock.recv(4, socket.MSG_PEEK)
    if len(head) < 4:
        return None
    n = 4 + struct.unpack(">i", head)[0]
    data = b""
    while len(data) < n:
        data += peer.sock.recv(n - len(data))
    return data


def test_a_producer_of_batches_only_gets_the_compiled_path(rmqd_factory: Callable[..., RmqdProcess]) -> None:
    """A connection whose first stored request is a batch is given the compiled path too (a Java producer
    that only calls send(Collection), bench/broker.py --batch): its next batches are served compiled."""
    peer = Peer(rmqd_factory(env={"RMQ_PURE": ""}, proxy=False))

    def batch(opaque: int) -> bytes:
        items = [(b"m%d" % i, 0, f"UNIQ_KEY\x01u{opaque}-{i}\x02WAIT\x01true") for i in range(4)]
        return encode(_cmd(RequestCode.SEND_BATCH_MESSAGE, {"a": "pg", "b": "BatchT", "c": "TBW102", "d": "4",
                                                            "e": "0", "f": "0", "g": "1", "h": "0", "i": "",
                                                            "m": "true"}, encode_batch(items), opaque=opaque))

    answers = peer.run(batch(1), []) + peer.run(batch(2) + batch(3), [])
    assert [decode(a).code for a in answers] == [0, 0, 0]
    assert [decode(a).ext["queueOffset"] for a in answers] == ["0", "4", "8"]
    if compiler_present():
        assert runtime_info(peer.proc.broker_addr)["store.compiled_sends"] == "8"
