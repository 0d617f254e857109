"""The real RocketMQ C++ client (librocketmq 1.2.3 via PyPI ``rocketmq`` 0.4.4) against real rmqd processes.

(a) sync send with tags, keys, user properties; (b) orderly send with a queue
selector; (c) oneway send; (d) a pull consumer reads everything back identical
with increasing offsets; (e) two push consumers of one clustering group consume
exactly once between them; (f) broadcasting; (g) resume from the committed offset
after an rmqd restart; (h) a missing topic with auto-create off is a clear client
error while rmqd keeps serving. Also batch send and delay level / retry.
"""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Callable
from typing import Any

import pytest

from rmq.protocol.codes import RequestCode, ResponseCode

PROPS = {"user_a": "A-{i}", "user_b": "B-{i}"}
FAST_DELAYS = "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"


@pytest.fixture
def rmqd_factory(rmqd_factory: Callable[..., Any]) -> Callable[..., Any]:
    """The C++ client speaks remoting only: this module's daemons (``rmqd`` too) open no gRPC endpoint,
    whose start-up is ~80 ms CPU of each."""
    return functools.partial(rmqd_factory, proxy=False)


def pulled(cpp: Any, ns: str, topic: str, group: str, timeout: float = 60, **kw: Any) -> list[dict[str, Any]]:
    w = cpp("pull", namesrv=ns, topic=topic, group=group, props=list(PROPS), **kw)
    lines = w.finish(timeout)
    assert any("done" in ln for ln in lines), lines[-3:]
    return [ln["msg"] for ln in lines if "msg" in ln]


def test_a_sync_send_and_d_pull_back(rmqd: Any, cpp: Any, compat: Any) -> None:
    n = 1000
    w = cpp("produce", namesrv=rmqd.namesrv_addr, topic="CompatA", count=n, method="sync",
            tags="Tag{i}", keys="key-{i} alt-{i}", props=PROPS)
    lines = w.finish(90)
    results = [ln for ln in lines if "i" in ln]
    assert len(results) == n and all(r.get("status") == 0 for r in results), results[:3]
    assert len({r["msg_id"] for r in results}) == n  # UNIQ_KEY per message
    # (d): a pull consumer sees everything back, identical, offsets increasing per queue
    msgs = pulled(cpp, rmqd.namesrv_addr, "CompatA", "CG_A")
    assert len(msgs) == n
    by_body = {m["body"]: m for m in msgs}
    for i in range(n):
        m = by_body[f"body-{i}"]
        assert m["topic"] == "CompatA" and m["tags"] == f"Tag{i}" and m["keys"] == f"key-{i} alt-{i}"
        assert m["props"] == {"user_a": f"A-{i}", "user_b": f"B-{i}"}
    per_queue: dict[int, list[int]] = collections.defaultdict(list)
    for m in msgs:
        per_queue[m["queue_id"]].append(m["queue_offset"])
    assert len(per_queue) == 4
    for offsets in per_queue.values():
        assert offsets == list(range(len(offsets)))
    # every message id of the send results is one the consumers saw
    assert {r["msg_id"] for r in results} == {m["id"] for m in msgs}


def test_b_orderly_send_with_selector(rmqd: Any, cpp: Any, compat: Any) -> None:
    n = 200
    w = cpp("produce", namesrv=rmqd.namesrv_addr, topic="CompatB", count=n, method="orderly", arg_mod=4,
            tags="o", keys="k{i}")
    results = [ln for ln in w.finish(60) if "i" in ln]
    assert len(results) == n and all(r.get("status") == 0 for r in results)
    msgs = pulled(cpp, rmqd.namesrv_addr, "CompatB", "CG_B")
    assert len(msgs) == n
    # hashing selector: message i goes to queue (i % 4) % queues, in send order
    for q in range(4):
        bodies = [m["body"] for m in sorted((m for m in msgs if m["queue_id"] == q), key=lambda m: m["queue_offset"])]
        assert bodies == [f"body-{i}" for i in range(n) if i % 4 == q]


def test_c_oneway_and_batch_send(rmqd: Any, cpp: Any, compat: Any) -> None:
    w = cpp("produce", namesrv=rmqd.namesrv_addr, topic="CompatC", count=300, method="oneway", tags="ow")
    assert len([ln for ln in w.finish(60) if "i" in ln]) == 300
    w = cpp("produce", namesrv=rmqd.namesrv_addr, topic="CompatC", count=100, start=300, method="batch",
            batch_size=10, tags="bt", keys="bk{i}")
    batches = [ln for ln in w.finish(60) if "i" in ln]
    assert len(batches) == 10 and all(b["status"] == 0 for b in batches)
    deadline = time.monotonic() + 20
    msgs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        msgs = pulled(cpp, rmqd.namesrv_addr, "CompatC", f"CG_C{int(time.monotonic() * 1000)}")
        if len(msgs) >= 400:
            break
        time.sleep(0.2)
    assert sorted(m["body"] for m in msgs) == sorted(f"body-{i}" for i in range(400))
    assert {m["tags"] for m in msgs if m["body"] == "body-350"} == {"bt"}


def test_e_two_push_consumers_share_a_clustering_group(rmqd: Any, cpp: Any, compat: Any) -> None:
    compat.create_topic(rmqd, "CompatE", 8)
    group = "CG_E"
    c1 = cpp("push", namesrv=rmqd.namesrv_addr, topic="CompatE", group=group, instance="e1")
    c2 = cpp("push", namesrv=rmqd.namesrv_addr, topic="CompatE", group=group, instance="e2")
    for c in (c1, c2):
        c.wait(lambda c=c: c.has("started"), 30, "consumer started")
    deadline = time.monotonic() + 30
    while len(compat.consumer_ids(rmqd, group)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(compat.consumer_ids(rmqd, group)) == 2
    # both rebalanced (NOTIFY_CONSUMER_IDS_CHANGED): the 8 topic queues held between them (the retry
    # queue joins later: librocketmq re-reads the route of %RETRY%group only on its 30 s timer)
    deadline = time.monotonic() + 20
    while compat.held_pulls(rmqd) < 8 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    n = 1000
    p = cpp("produce", namesrv=rmqd.namesrv_addr, topic="CompatE", count=n, method="sync", tags="e")
    sent = [ln for ln in p.finish(120) if "i" in ln]
    assert len(sent) == n and all(s.get("status") == 0 for s in sent)

    def total() -> int:
        return len(c1.messages()) + len(c2.messages())

    c1.wait(lambda: total() >= n, 60, "all messages consumed")
    time.sleep(1.0)  # anything extra would be a duplicate
    b1 = [m["body"] for m in c1.messages()]
    b2 = [m["body"] for m in c2.messages()]
    assert len(b1) + len(b2) == n, (len(b1), len(b2))
    assert sorted(b1 + b2) == sorted(f"body-{i}" for i in range(n))
    assert b1 and b2  # both consumers got a share
    assert not set(b1) & set(b2)


def test_f_broadcasting_consumers_get_everything(rmqd: Any, cpp: Any, compat: Any) -> None:
    compat.create_topic(rmqd, "CompatF", 4)
    consumers = [cpp("push", namesrv=rmqd.namesrv_addr, topic="CompatF", group="CG_F", model="broadcasting",
                     instance=f"f{k}") for k in range(2)]
    for c in consumers:
        c.wait(lambda c=c: c.has("started"), 30, "consumer started")
    deadline = time.monotonic() + 20
    while compat.held_pulls(rmqd) < 8 and time.monotonic() < deadline:  # 4 queues x 2 consumers
        time.sleep(0.1)
    assert compat.held_pulls(rmqd) >= 8
    n = 500
    p = cpp("produce", namesrv=rmqd.namesrv_addr, topic="CompatF", count=n, method="sync", tags="f")
    assert len([ln for ln in p.finish(60) if "i" in ln]) == n
    for c in consumers:
        c.wait(lambda c=c: len(c.messages()) >= n, 60, "broadcast consumer got all")
    time.sleep(0.5)
    for c in consumers:
        assert sorted(m["body"] for m in c.messages()) == sorted(f"body-{i}" for i in range(n))


def test_g_push_consumer_resumes_after_rmqd_restart(rmqd_factory: Any, cpp: Any, compat: Any) -> None:
    proc = rmqd_factory()
    compat.create_topic(proc, "CompatG", 4)
    group = "CG_G"
    c = cpp("push", namesrv=proc.namesrv_addr, topic="CompatG", group=group, instance="g1")
    c.wait(lambda: c.has("started"), 30, "consumer started")
    deadline = time.monotonic() + 20
    while compat.held_pulls(proc) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    n1 = 300
    p = cpp("produce", namesrv=proc.namesrv_addr, topic="CompatG", count=n1, method="sync")
    assert len([ln for ln in p.finish(60) if "i" in ln]) == n1
    c.wait(lambda: len(c.messages()) >= n1, 60, "first batch consumed")
    c.stop(30)  # graceful: the client persists its offsets to the broker
    assert c.has("done")
    first = [m["body"] for m in c.messages()]
    assert sorted(set(first)) == sorted(f"body-{i}" for i in range(n1))
    committed = {q: int(compat.admin(proc.broker_addr, RequestCode.QUERY_CONSUMER_OFFSET, {
        "consumerGroup": group, "topic": "CompatG", "queueId": q}).ext.get("offset", -1)) for q in range(4)}

    proc.stop()
    proc.start()
    for q in range(4):  # offsets survived the restart
        r = compat.admin(proc.broker_addr, RequestCode.QUERY_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": "CompatG", "queueId": q})
        assert r.code == 0 and int(r.ext["offset"]) == committed[q]
    n2 = 200
    p = cpp("produce", namesrv=proc.namesrv_addr, topic="CompatG", count=n2, start=n1, method="sync")
    assert len([ln for ln in p.finish(60) if "i" in ln]) == n2
    c2 = cpp("push", namesrv=proc.namesrv_addr, topic="CompatG", group=group, instance="g2")
    c2.wait(lambda: len({m["body"] for m in c2.messages()} & {f"body-{i}" for i in range(n1, n1 + n2)}) == n2,
            60, "second batch consumed after restart")
    time.sleep(0.5)
    again = [m["body"] for m in c2.messages()]
    redelivered = [b for b in again if int(b.split("-")[1]) < n1]
    # no loss; duplicates only from the window that was not committed before the stop
    uncommitted = sum(proc_max - committed[q] for q, proc_max in
                      ((q, int(compat.admin(proc.broker_addr, RequestCode.GET_MAX_OFFSET, {
                          "topic": "CompatG", "queueId": q}).ext["offset"])) for q in range(4)))
    assert len(redelivered) <= max(0, uncommitted - n2), (len(redelivered), committed)


def test_h_missing_topic_with_auto_create_off(rmqd_factory: Any, cpp: Any, compat: Any) -> None:
    proc = rmqd_factory(broker_conf={"autoCreateTopicEnable": False})
    w = cpp("produce", namesrv=proc.namesrv_addr, topic="NoSuchTopic", count=1, method="sync")
    lines = w.finish(60)
    errors = [ln["error"] for ln in lines if "error" in ln]
    assert errors and "NoSuchTopic" in errors[0], lines
    # the broker itself answers TOPIC_NOT_EXIST naming the topic to a direct send
    r = compat.admin(proc.broker_addr, RequestCode.SEND_MESSAGE, {
        "producerGroup": "PG", "topic": "NoSuchTopic", "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": 0, "sysFlag": 0, "bornTimestamp": 0, "flag": 0, "properties": ""}, b"x")
    assert r.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in r.remark
    # and rmqd keeps serving: an existing topic works for the same client library
    compat.create_topic(proc, "Exists", 2)
    w = cpp("produce", namesrv=proc.namesrv_addr, topic="Exists", count=5, method="sync")
    assert [ln.get("status") for ln in w.finish(60) if "i" in ln] == [0] * 5
    assert proc.proc.poll() is None


def test_delay_level_and_consumer_retry(rmqd_factory: Any, cpp: Any, compat: Any) -> None:
    proc = rmqd_factory(broker_conf={"messageDelayLevel": FAST_DELAYS})
    compat.create_topic(proc, "CompatR", 2)
    # librocketmq fetches routes before its first heartbeat creates %RETRY%CG_R and then only every 30 s;
    # creating the retry topic up front keeps the test short (a Java broker behaves the same).
    compat.create_topic(proc, "%RETRY%CG_R", 1)
    # a consumer that fails each message once: send-back -> %RETRY% group -> redelivered (reconsume 1)
    c = cpp("push", namesrv=proc.namesrv_addr, topic="CompatR", group="CG_R", instance="r1", fail_first=1)
    c.wait(lambda: c.has("started"), 30, "consumer started")
    deadline = time.monotonic() + 20
    while compat.held_pulls(proc) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    p = cpp("produce", namesrv=proc.namesrv_addr, topic="CompatR", count=5, method="sync", delay=2)
    sent = [ln for ln in p.finish(60) if "i" in ln]
    assert all(s["status"] == 0 for s in sent)
    t_sent = time.monotonic()
    want = {f"body-{i}" for i in range(5)}
    # librocketmq fails a whole consume batch when one message fails, so every message is seen
    # failing at least once (or sent back unseen) and then succeeds from %RETRY%CG_R.
    c.wait(lambda: {m["body"] for m in c.messages()} >= want, 60, "retried messages consumed")
    assert time.monotonic() - t_sent >= 0.8  # delay level 2 (1 s here) then retry level 3 (1 s)
    got = c.messages()
    assert {m["body"] for m in got} == want
    assert all(m["reconsume"] >= 1 and m["topic"] == "CompatR" for m in got)
    assert {f["failed"]["body"] for f in c.lines if "failed" in f} <= want


def test_orderly_push_consumer_keeps_queue_order(rmqd: Any, cpp: Any, compat: Any) -> None:
    compat.create_topic(rmqd, "CompatO", 4)
    c = cpp("push", namesrv=rmqd.namesrv_addr, topic="CompatO", group="CG_O", instance="o1", orderly=True)
    c.wait(lambda: c.has("started"), 30, "consumer started")
    n = 400
    p = cpp("produce", namesrv=rmqd.namesrv_addr, topic="CompatO", count=n, method="orderly", arg_mod=4)
    assert len([ln for ln in p.finish(60) if "i" in ln]) == n
    c.wait(lambda: len(c.messages()) >= n, 60, "orderly consumer got everything")
    got = c.messages()
    for q in range(4):  # per queue, in send order (LOCK_BATCH_MQ granted the queues)
        assert [m["body"] for m in got if m["queue_id"] == q] == [f"body-{i}" for i in range(n) if i % 4 == q]


def test_two_namesrvs_one_down(rmqd_factory: Any, cpp: Any, compat: Any) -> None:
    ns1 = rmqd_factory(broker=False)
    ns2 = rmqd_factory(broker=False)
    broker = rmqd_factory(namesrv=False, broker_conf={"namesrvAddr": f"{ns1.namesrv_addr};{ns2.namesrv_addr}"})
    r = compat.admin(broker.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": "TwoNs", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6})
    assert r.code == 0
    for ns in (ns1, ns2):
        deadline = time.monotonic() + 5
        while compat.admin(ns.namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TwoNs"}).code != 0:
            assert time.monotonic() < deadline, "route missing on a namesrv"
            time.sleep(0.05)
    ns1.stop()  # the client is given both; the first one is gone
    both = f"{ns1.namesrv_addr};{ns2.namesrv_addr}"
    p = cpp("produce", namesrv=both, topic="TwoNs", count=20, method="sync")
    assert [ln.get("status") for ln in p.finish(60) if "i" in ln] == [0] * 20
    msgs = pulled(cpp, both, "TwoNs", "CG_TWO")
    assert sorted(m["body"] for m in msgs) == sorted(f"body-{i}" for i in range(20))


def test_timer_properties_from_the_cpp_client(rmqd_factory: Any, cpp: Any, compat: Any) -> None:
    """librocketmq 1.2.3 predates timer messages, but a user property is all a 5.x producer sends:
    TIMER_DELAY_MS set by the C++ client is honoured (never early), and a beyond-horizon one refused."""
    proc = rmqd_factory(broker_conf={"timerPrecisionMs": 100, "timerMaxDelaySec": 60})
    compat.create_topic(proc, "CompatTm", 1)
    t0 = time.time()
    p = cpp("produce", namesrv=proc.namesrv_addr, topic="CompatTm", count=3, method="sync",
            props={"TIMER_DELAY_MS": "1500"})
    sent = [ln for ln in p.finish(60) if "i" in ln]
    assert [s.get("status") for s in sent] == [0, 0, 0]
    c = cpp("pull", namesrv=proc.namesrv_addr, topic="CompatTm", props=["TIMER_OUT_MS", "REAL_TOPIC"])
    early = [ln for ln in c.finish(60) if "msg" in ln]
    assert early == [] or time.time() - t0 >= 1.4  # nothing visible before it is due
    deadline = time.monotonic() + 30
    got: list[dict[str, Any]] = []
    while len(got) < 3 and time.monotonic() < deadline:
        time.sleep(0.3)
        c = cpp("pull", namesrv=proc.namesrv_addr, topic="CompatTm", props=["TIMER_OUT_MS", "REAL_TOPIC"])
        got = [ln["msg"] for ln in c.finish(60) if "msg" in ln]
    assert sorted(m["body"] for m in got) == ["body-0", "body-1", "body-2"]
    assert all(m["props"]["REAL_TOPIC"] == "CompatTm" and m["props"]["TIMER_OUT_MS"] for m in got)
    assert time.time() - t0 >= 1.4
    far = cpp("produce", namesrv=proc.namesrv_addr, topic="CompatTm", count=1, method="sync",
              props={"TIMER_DELAY_MS": "120000"})
    lines = [ln for ln in far.finish(60) if "i" in ln]
    assert len(lines) == 1 and "error" in lines[0]  # librocketmq reports its last retry, not the broker's remark
    c = cpp("pull", namesrv=proc.namesrv_addr, topic="CompatTm")
    assert len([ln for ln in c.finish(60) if "msg" in ln]) == 3  # the refused one was not stored


def test_acl_signatures_from_the_cpp_client(rmqd_factory: Any, cpp: Any, compat: Any, tmp_path: Any) -> None:
    """librocketmq's set_session_credentials signs as our broker checks (its OnsChannel field
    included); a wrong secret is refused and nothing is stored."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n  - accessKey: cppuser1\n    secretKey: cppsecret1\n    defaultTopicPerm: PUB|SUB\n"
                   "    defaultGroupPerm: SUB\n  - accessKey: rmqadmin\n    secretKey: adminsecret\n    admin: true\n"
                   "globalWhiteRemoteAddresses: []\n")
    proc = rmqd_factory(broker_conf={"aclEnable": True, "plainAclFile": str(acl)})
    created = compat.admin(proc.broker_addr, RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": "CompatAcl", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}, credentials=("rmqadmin", "adminsecret"))
    assert created.code == 0, created.remark
    good = cpp("produce", namesrv=proc.namesrv_addr, topic="CompatAcl", count=3, method="sync",
               credentials=["cppuser1", "cppsecret1", "ALIYUN"])
    assert [ln.get("status") for ln in good.finish(60) if "i" in ln] == [0, 0, 0]
    bad = cpp("produce", namesrv=proc.namesrv_addr, topic="CompatAcl", count=1, method="sync",
              credentials=["cppuser1", "not-the-secret", "ALIYUN"])
    lines = [ln for ln in bad.finish(60) if "i" in ln]
    assert len(lines) == 1 and "error" in lines[0]
    c = cpp("pull", namesrv=proc.namesrv_addr, topic="CompatAcl", group="CG_ACL",
            credentials=["cppuser1", "cppsecret1", "ALIYUN"])
    assert sorted(ln["msg"]["body"] for ln in c.finish(60) if "msg" in ln) == ["body-0", "body-1", "body-2"]
    assert any("Check signature failed for accessKey=cppuser1" in ln for ln in proc.log_lines())
