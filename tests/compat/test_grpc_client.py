"""The official RocketMQ 5 Python SDK (gRPC, rocketmq-python-client 5.1.2, run from its own virtualenv
``.venv5`` in a child process) against rmqd's gRPC endpoint: producer normal / FIFO / delay /
transactions (commit, rollback, check-back over Telemetry), SimpleConsumer receive + ack, a change of
invisible duration with the redelivery's attempt count, and messages crossing protocols both ways
(5.x gRPC <-> the 4.x C++ client)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from rmq.testing.daemon import RmqdProcess

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("grpcworker.py")
PY5 = os.environ.get("RMQ5_PYTHON") or str(ROOT / ".venv5" / "bin" / "python")
pytestmark = pytest.mark.grpc


def run5(timeout: float = 90, **cfg: Any) -> list[dict[str, Any]]:
    """Run the 5.x SDK worker to completion; its JSON lines."""
    assert Path(PY5).exists(), f"the RocketMQ 5 SDK's virtualenv is missing ({PY5}): run `make install-test`"
    p = subprocess.run([PY5, str(WORKER), json.dumps(cfg)], capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert p.returncode == 0 and lines and lines[-1] == {"exit": True}, p.stderr[-3000:]
    return lines


def msgs(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [ln["msg"] for ln in lines if "msg" in ln]


def create5(compat: Any, proc: RmqdProcess, topic: str, queues: int, message_type: str = "") -> None:
    """A topic as ``mqadmin updateTopic -a +message.type=...`` creates it (RocketMQ 5 topic types)."""
    ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
           "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
    if message_type:
        ext["attributes"] = f"+message.type={message_type}"
    r = compat.admin(proc.broker_addr, 17, ext)
    assert r.code == 0, r.remark


@pytest.fixture
def g5(rmqd_factory: Any) -> RmqdProcess:
    return rmqd_factory(broker_conf={"transactionCheckInterval": 500, "transactionTimeOut": 1000,  # type: ignore[no-any-return]
                                     "timerPrecisionMs": 100})


def dlq_bodies(namesrv: str, group: str, reader: str) -> list[bytes]:
    """The bodies in the first queue of ``group``'s dead-letter topic, pulled by consumer group ``reader``."""
    import anyio

    from rmq.client import PullConsumer, PullStatus

    async def read() -> list[bytes]:
        async with PullConsumer(reader, namesrv) as pc:
            mq = (await pc.fetch_queues(f"%DLQ%{group}"))[0]
            r = await pc.pull(mq, 0, 8)
            return [m.body for m in r.messages] if r.status is PullStatus.FOUND else []

    return anyio.run(read)


def test_produce_and_simple_consume_with_the_5x_sdk(g5: RmqdProcess, compat: Any) -> None:
    compat.create_topic(g5, "G5Normal", 4)
    sent = run5(mode="produce", endpoint=g5.grpc_endpoint, topic="G5Normal", count=5, tag="TagA", keys="k1")
    ids = [ln["message_id"] for ln in sent if "message_id" in ln]
    assert len(ids) == 5, sent
    got = msgs(run5(mode="receive", endpoint=g5.grpc_endpoint, topic="G5Normal", group="CG5N", want=5, await_s=2))
    assert sorted(m["body"] for m in got) == [f"body-{i}" for i in range(5)]
    assert {m["id"] for m in got} == set(ids) and {m["tag"] for m in got} == {"TagA"}
    assert all(m["keys"] == ["k1"] and m["attempt"] == 1 for m in got)
    again = msgs(run5(mode="receive", endpoint=g5.grpc_endpoint, topic="G5Normal", group="CG5N", want=1, await_s=1,
                      timeout_s=3))
    assert again == []  # all acked


def test_change_invisible_duration_redelivers_with_the_next_attempt(g5: RmqdProcess, compat: Any) -> None:
    compat.create_topic(g5, "G5Inv", 1)
    run5(mode="produce", endpoint=g5.grpc_endpoint, topic="G5Inv", count=1)
    first = run5(mode="receive", endpoint=g5.grpc_endpoint, topic="G5Inv", group="CG5I", want=1, change_to_s=1)
    assert [m["attempt"] for m in msgs(first)] == [1] and any("changed" in ln for ln in first)
    time.sleep(1.2)
    second = msgs(run5(mode="receive", endpoint=g5.grpc_endpoint, topic="G5Inv", group="CG5I", want=1))
    assert [(m["body"], m["attempt"]) for m in second] == [("body-0", 2)]


def test_fifo_and_delay_messages(g5: RmqdProcess, compat: Any) -> None:
    create5(compat, g5, "G5Fifo", 4, "FIFO")
    run5(mode="produce", endpoint=g5.grpc_endpoint, topic="G5Fifo", count=6, group="order-1")
    got = msgs(run5(mode="receive", endpoint=g5.grpc_endpoint, topic="G5Fifo", group="CG5F", want=6))
    assert [m["body"] for m in got] == [f"body-{i}" for i in range(6)]  # one queue: in order
    assert {m["group"] for m in got} == {"order-1"}
    create5(compat, g5, "G5Delay", 1, "DELAY")
    t0 = time.time()
    run5(mode="produce", endpoint=g5.grpc_endpoint, topic="G5Delay", count=1, delay_s=3)
    got = msgs(run5(mode="receive", endpoint=g5.grpc_endpoint, topic="G5Delay", group="CG5D", want=1, timeout_s=30))
    assert [m["body"] for m in got] == ["body-0"] and time.time() - t0 >= 1.9  # due at a whole second, >= 2 s on


def test_transactions_commit_rollback_and_check_back(g5: RmqdProcess, compat: Any) -> None:
    create5(compat, g5, "G5Tx", 1, "TRANSACTION")
    run5(mode="produce", endpoint=g5.grpc_endpoint, topic="G5Tx", count=1, tx="commit")
    run5(mode="produce", endpoint=g5.grpc_endpoint, topic="G5Tx", count=1, tx="rollback")
    held = run5(mode="produce", endpoint=g5.grpc_endpoint, topic="G5Tx", count=1, tx="hold", check_answer="commit",
                linger_s=6)
    assert any("checked" in ln for ln in held), held  # the broker asked over Telemetry; the checker committed
    got = msgs(run5(mode="receive", endpoint=g5.grpc_endpoint, topic="G5Tx", group="CG5T", want=2, timeout_s=20))
    assert sorted(m["body"] for m in got) == ["body-0", "body-0"]  # the committed and the checked one
    more = msgs(run5(mode="receive", endpoint=g5.grpc_endpoint, topic="G5Tx", group="CG5T", want=1, await_s=1,
                     timeout_s=3))
    assert more == []  # the rolled-back one never shows


def test_messages_cross_between_5x_grpc_and_the_4x_cpp_client(g5: RmqdProcess, cpp: Any, compat: Any) -> None:
    compat.create_topic(g5, "G5Cross", 1)
    run5(mode="produce", endpoint=g5.grpc_endpoint, topic="G5Cross", count=3, tag="T5")
    c = cpp("pull", namesrv=g5.namesrv_addr, topic="G5Cross", group="CG_CPP_X")
    got = [ln["msg"] for ln in c.finish(60) if "msg" in ln]
    assert sorted(m["body"] for m in got) == ["body-0", "body-1", "body-2"] and {m["tags"] for m in got} == {"T5"}
    compat.create_topic(g5, "G4Cross", 1)
    p = cpp("produce", namesrv=g5.namesrv_addr, topic="G4Cross", count=3, method="sync", tags="T4")
    assert all(ln.get("status") == 0 for ln in p.finish(60) if "i" in ln)
    got5 = msgs(run5(mode="receive", endpoint=g5.grpc_endpoint, topic="G4Cross", group="CG5X", want=3))
    assert sorted(m["body"] for m in got5) == ["body-0", "body-1", "body-2"] and {m["tag"] for m in got5} == {"T4"}



def test_push_consumer_with_a_failure_and_its_nack(g5: RmqdProcess, compat: Any) -> None:
    """The 5.x PushConsumer: QueryAssignment, receive with auto-renew, ack; a FAILURE is a nack (a change
    of invisible duration to the first backoff step, 1 s) and the message comes back with attempt 2."""
    compat.create_topic(g5, "G5Push", 2)
    run5(mode="produce", endpoint=g5.grpc_endpoint, topic="G5Push", count=4)
    lines = run5(mode="push", endpoint=g5.grpc_endpoint, topic="G5Push", group="CG5P", want=4, fail_first=1,
                 timeout_s=40)
    got = msgs(lines)
    assert lines[-2] == {"done": True, "ok": 4}, lines[-5:]
    firsts = [m for m in got if m["result"] == "FAILURE"]
    seconds = [m for m in got if m["result"] == "SUCCESS"]
    assert sorted(m["body"] for m in firsts) == sorted(m["body"] for m in seconds) == [f"body-{i}" for i in range(4)]
    assert {m["attempt"] for m in firsts} == {1} and {m["attempt"] for m in seconds} == {2}


def test_push_consumer_working_longer_than_the_invisible_time_gets_each_message_once(rmqd_factory: Any,
                                                                                    compat: Any) -> None:
    """The PushConsumer receives with auto_renew: the proxy renews the receipt while the listener works
    (here twice the invisible time), so no message comes back, and the ack with the first receipt holds."""
    renew = {"defaultInvisibleTimeMills": 2000, "renewAheadTimeMillis": 1500, "renewSchedulePeriodMillis": 200}
    proc: RmqdProcess = rmqd_factory(extra={"plugin": {"processors": {"grpc": renew}}})
    compat.create_topic(proc, "G5Slow", 1)
    run5(mode="produce", endpoint=proc.grpc_endpoint, topic="G5Slow", count=2)
    lines = run5(mode="push", endpoint=proc.grpc_endpoint, topic="G5Slow", group="CG5S", want=2, work_s=4,
                 timeout_s=40)
    assert lines[-2] == {"done": True, "ok": 2}, lines[-5:]
    got = msgs(lines)
    assert sorted((m["body"], m["attempt"]) for m in got) == [("body-0", 1), ("body-1", 1)], got
    again = msgs(run5(mode="receive", endpoint=proc.grpc_endpoint, topic="G5Slow", group="CG5S", want=1, await_s=1,
                      timeout_s=4))
    assert again == []  # acked through the renewed receipts


def test_a_receiver_killed_mid_receive_loses_nothing(g5: RmqdProcess, compat: Any) -> None:
    compat.create_topic(g5, "G5Kill", 1)
    run5(mode="produce", endpoint=g5.grpc_endpoint, topic="G5Kill", count=3)
    cfg = {"mode": "receive", "endpoint": g5.grpc_endpoint, "topic": "G5Kill", "group": "CG5K", "want": 3,
           "invisible_s": 10, "ack": False, "await_s": 2}
    child = subprocess.Popen([PY5, str(WORKER), json.dumps(cfg)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    seen = []
    for line in child.stdout:
        if line.startswith('{"msg"'):
            seen.append(json.loads(line)["msg"]["body"])
        if len(seen) == 3:
            break
    child.kill()  # received, never acked
    child.wait(10)
    t0 = time.time()
    got = msgs(run5(mode="receive", endpoint=g5.grpc_endpoint, topic="G5Kill", group="CG5K", want=3, timeout_s=40))
    assert sorted(m["body"] for m in got) == sorted(seen) == ["body-0", "body-1", "body-2"]
    assert {m["attempt"] for m in got} == {2} and time.time() - t0 >= 5  # back once invisible time ran out


def test_acl_signatures_over_grpc(rmqd_factory: Any, compat: Any, tmp_path: Path) -> None:
    """With ACL on, a 5.x client's gRPC signature (Credentials(ak, sk)) authenticates it against the same
    accounts as remoting clients, and the account's permissions apply; a wrong secret is refused."""
    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n  - accessKey: grpcuser1\n    secretKey: grpcsecret1\n    defaultTopicPerm: DENY\n"
                   "    topicPerms: [G5Acl=PUB|SUB]\n    defaultGroupPerm: SUB\n"
                   "  - accessKey: rmqadmin\n    secretKey: adminsecret\n    admin: true\n")
    proc = rmqd_factory(broker_conf={"aclEnable": True, "plainAclFile": str(acl)})
    created = compat.admin(proc.broker_addr, 17, {
        "topic": "G5Acl", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}, credentials=("rmqadmin", "adminsecret"))
    assert created.code == 0, created.remark
    ok = run5(mode="produce", endpoint=proc.grpc_endpoint, topic="G5Acl", count=2,
              credentials=["grpcuser1", "grpcsecret1"])
    assert len([ln for ln in ok if "message_id" in ln]) == 2, ok
    bad = run5(mode="produce", endpoint=proc.grpc_endpoint, topic="G5Acl", count=1,
               credentials=["grpcuser1", "wrong-secret"])
    assert [ln for ln in bad if "error" in ln], bad
    got = msgs(run5(mode="receive", endpoint=proc.grpc_endpoint, topic="G5Acl", group="CG5A", want=2,
                    credentials=["grpcuser1", "grpcsecret1"]))
    assert sorted(m["body"] for m in got) == ["body-0", "body-1"]


def test_topic_message_types_in_routes_and_sends(g5: RmqdProcess, compat: Any) -> None:
    """RocketMQ 5 topic types: routes announce them, a send of another type is refused, attributes are
    validated when set; rmq's own gRPC stubs play the client (not the SDK: one process cannot hold both)."""
    import anyio
    import grpc

    from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
    from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
    from rmq.plugins.grpc_proxy.v2 import service_pb2_grpc as sg

    create5(compat, g5, "G5TypeF", 2, "FIFO")
    bad = compat.admin(g5.broker_addr, 17, {"topic": "G5TypeX", "readQueueNums": "1", "writeQueueNums": "1",
                                           "perm": "6", "attributes": "+message.type=WEIRD"})
    assert bad.code != 0 and "WEIRD" in bad.remark
    bad = compat.admin(g5.broker_addr, 17, {"topic": "G5TypeX", "readQueueNums": "1", "writeQueueNums": "1",
                                           "perm": "6", "attributes": "+colour=red"})
    assert bad.code != 0 and "unsupported attribute key" in bad.remark

    async def go() -> None:
        md = (("x-mq-client-id", "test@1@1@x"),)
        async with grpc.aio.insecure_channel(g5.grpc_endpoint) as ch:
            stub = sg.MessagingServiceStub(ch)
            route = await stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="G5TypeF")), metadata=md)
            assert route.status.code == d.Code.OK
            assert {tuple(q.accept_message_types) for q in route.message_queues} == {(d.FIFO,)}
            msg = d.Message(topic=d.Resource(name="G5TypeF"), body=b"x", system_properties=d.SystemProperties(
                message_id="01AB", message_type=d.NORMAL, body_encoding=d.IDENTITY))
            r = await stub.SendMessage(s.SendMessageRequest(messages=[msg]), metadata=md)
            assert r.status.code == d.Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
            msg.system_properties.message_type = d.FIFO
            msg.system_properties.message_group = "g1"
            r = await stub.SendMessage(s.SendMessageRequest(messages=[msg]), metadata=md)
            assert r.status.code == d.Code.OK and len(r.entries) == 1 and r.entries[0].transaction_id
            r = await stub.SendMessage(s.SendMessageRequest(messages=[msg]))  # no client id
            assert r.status.code == d.Code.CLIENT_ID_REQUIRED

    anyio.run(go)


def test_fifo_push_consumer_of_an_orderly_group(g5: RmqdProcess, compat: Any) -> None:
    """consumeMessageOrderly on the group: settings say fifo, POP blocks a queue until its batch is acked,
    the 5.x PushConsumer consumes a message group in order, its local retries included."""
    create5(compat, g5, "G5FifoPush", 2, "FIFO")
    body = json.dumps({"groupName": "CG5FP", "consumeMessageOrderly": True, "retryMaxTimes": 16}).encode()
    assert compat.admin(g5.broker_addr, 200, {}, body).code == 0  # UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
    run5(mode="produce", endpoint=g5.grpc_endpoint, topic="G5FifoPush", count=8, group="order-A")
    lines = run5(mode="push", endpoint=g5.grpc_endpoint, topic="G5FifoPush", group="CG5FP", want=8, fail_first=1,
                 timeout_s=60)
    ok = [m["body"] for m in msgs(lines) if m["result"] == "SUCCESS"]
    assert ok == [f"body-{i}" for i in range(8)], msgs(lines)  # in order, each after its local retry


def test_tls_on_the_grpc_port_when_enforcing(rmqd_factory: Any, compat: Any, tmp_path: Path) -> None:
    """[tls] server.mode enforcing: the gRPC port speaks TLS only; the 5.x SDK (tls_enable, trusting our CA
    through gRPC's roots file) sends over it, a plaintext client gets nothing through."""
    d = tmp_path / "pki"
    d.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(d / "k.pem"), "-out", str(d / "c.pem")],
                   check=True, capture_output=True, timeout=60)
    tls = {"enable": True, "server": {"mode": "enforcing", "certPath": str(d / "c.pem"), "keyPath": str(d / "k.pem")}}
    proc = rmqd_factory(extra={"tls": tls})
    # remoting is TLS-only too: the topic is created over TLS
    import anyio

    from rmq.kernel.hookspecs.remoting import RemotingConfig
    from rmq.plugins.remoting_tcp import TcpRemotingClient
    from rmq.plugins.remoting_tcp.tls import client_context
    from rmq.protocol.command import RemotingCommand

    async def mk() -> None:
        async with TcpRemotingClient(RemotingConfig(name="g5tls", tls_client=client_context())) as c:
            r = await c.invoke(proc.broker_addr, RemotingCommand.request(17, {
                "topic": "G5Tls", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
                "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}), 5)
            assert r.code == 0

    anyio.run(mk)
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(d / "c.pem")}
    cfg = {"mode": "produce", "endpoint": proc.grpc_endpoint, "topic": "G5Tls", "count": 2, "tls": True}
    p = subprocess.run([PY5, str(WORKER), json.dumps(cfg)], capture_output=True, text=True, timeout=90, env=env)
    assert len([ln for ln in p.stdout.splitlines() if '"message_id"' in ln]) == 2, p.stdout + p.stderr[-2000:]
    plain = run5(mode="produce", endpoint=proc.grpc_endpoint, topic="G5Tls", count=1, timeout=120)
    assert [ln for ln in plain if "error" in ln]  # plaintext refused


def test_dlq_after_the_groups_max_attempts(g5: RmqdProcess, compat: Any) -> None:
    """retryMaxTimes 1 on the group: a message nacked twice (change of invisible duration) is not handed
    out a third time but lands in %DLQ%<group>."""
    create5(compat, g5, "G5Dlq", 1)
    body = json.dumps({"groupName": "CG5DLQ", "retryMaxTimes": 1}).encode()
    assert compat.admin(g5.broker_addr, 200, {}, body).code == 0
    run5(mode="produce", endpoint=g5.grpc_endpoint, topic="G5Dlq", count=1)
    for attempt in (1, 2):
        got = msgs(run5(mode="receive", endpoint=g5.grpc_endpoint, topic="G5Dlq", group="CG5DLQ", want=1,
                        change_to_s=1, timeout_s=20))
        assert [m["attempt"] for m in got] == [attempt]
        time.sleep(1.2)
    assert msgs(run5(mode="receive", endpoint=g5.grpc_endpoint, topic="G5Dlq", group="CG5DLQ", want=1,
                     await_s=1, timeout_s=4)) == []

    assert dlq_bodies(g5.namesrv_addr, "CG5DLQ", "CG_DLQ_READ") == [b"body-0"]


def test_permissive_grpc_port_takes_tls_and_plaintext(rmqd_factory: Any, compat: Any, tmp_path: Path) -> None:
    """RocketMQ's default permissive mode: one gRPC port, a TLS client (as Java 5 SDKs default to) and a
    plaintext one (the Python SDK's default) both served; the broker sees the real client address."""
    d = tmp_path / "pki"
    d.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(d / "k.pem"), "-out", str(d / "c.pem")],
                   check=True, capture_output=True, timeout=60)
    proc = rmqd_factory(extra={"tls": {"server": {"mode": "permissive", "certPath": str(d / "c.pem"),
                                                  "keyPath": str(d / "k.pem")}}})
    create5(compat, proc, "G5Perm", 1)
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(d / "c.pem")}
    cfg = {"mode": "produce", "endpoint": proc.grpc_endpoint, "topic": "G5Perm", "count": 2, "tls": True}
    p = subprocess.run([PY5, str(WORKER), json.dumps(cfg)], capture_output=True, text=True, timeout=90, env=env)
    assert len([ln for ln in p.stdout.splitlines() if '"message_id"' in ln]) == 2, p.stdout + p.stderr[-2000:]
    run5(mode="produce", endpoint=proc.grpc_endpoint, topic="G5Perm", count=1)  # plaintext on the same port
    got = msgs(run5(mode="receive", endpoint=proc.grpc_endpoint, topic="G5Perm", group="CG5PM", want=3))
    assert sorted(m["body"] for m in got) == ["body-0", "body-0", "body-1"]
    joined = [ln for ln in proc.log_lines() if "producer joined group G5Perm" in ln]
    assert joined and all("from 127.0.0.1:" in ln for ln in joined)  # the client's own port, not grpcio's side


def test_recall_and_forward_to_dlq_over_grpc(rmqd_factory: Any, compat: Any) -> None:
    """RecallMessage cancels a delay message by its handle; ForwardMessageToDeadLetterQueue moves a received
    message to %DLQ%<group> and acks it (rmq's own stubs as the client)."""
    import anyio
    import grpc
    from google.protobuf import duration_pb2, timestamp_pb2

    from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
    from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
    from rmq.plugins.grpc_proxy.v2 import service_pb2_grpc as sg

    proc = rmqd_factory(broker_conf={"recallMessageEnable": True, "timerPrecisionMs": 100})
    create5(compat, proc, "G5Recall", 1, "DELAY")
    create5(compat, proc, "G5Dead", 1)

    async def go() -> None:
        md = (("x-mq-client-id", "test@2@1@x"),)
        async with grpc.aio.insecure_channel(proc.grpc_endpoint) as ch:
            stub = sg.MessagingServiceStub(ch)
            when = timestamp_pb2.Timestamp(seconds=int(time.time()) + 30)
            msg = d.Message(topic=d.Resource(name="G5Recall"), body=b"later", system_properties=d.SystemProperties(
                message_id="01RECALL", message_type=d.DELAY, body_encoding=d.IDENTITY, delivery_timestamp=when))
            r = await stub.SendMessage(s.SendMessageRequest(messages=[msg]), metadata=md)
            assert r.status.code == d.Code.OK and r.entries[0].recall_handle
            rr = await stub.RecallMessage(s.RecallMessageRequest(topic=d.Resource(name="G5Recall"),
                                                                 recall_handle=r.entries[0].recall_handle), metadata=md)
            assert rr.status.code == d.Code.OK and rr.message_id == "01RECALL"
            bad = await stub.RecallMessage(s.RecallMessageRequest(topic=d.Resource(name="G5Recall"),
                                                                  recall_handle="junk"), metadata=md)
            assert bad.status.code != d.Code.OK
            msg = d.Message(topic=d.Resource(name="G5Dead"), body=b"poison", system_properties=d.SystemProperties(
                message_id="01DEAD", message_type=d.NORMAL, body_encoding=d.IDENTITY))
            assert (await stub.SendMessage(s.SendMessageRequest(messages=[msg]), metadata=md)).status.code == d.Code.OK
            mq = d.MessageQueue(topic=d.Resource(name="G5Dead"), id=-1, broker=d.Broker(name="broker-a"))
            got = []
            async for resp in stub.ReceiveMessage(s.ReceiveMessageRequest(
                    group=d.Resource(name="CG5DEAD"), message_queue=mq, batch_size=4,
                    filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
                    invisible_duration=duration_pb2.Duration(seconds=30),
                    long_polling_timeout=duration_pb2.Duration(seconds=5)), metadata=md, timeout=20):
                if resp.HasField("message"):
                    got.append(resp.message)
            assert [m.body for m in got] == [b"poison"] and got[0].system_properties.body_digest.checksum
            fr = await stub.ForwardMessageToDeadLetterQueue(s.ForwardMessageToDeadLetterQueueRequest(
                group=d.Resource(name="CG5DEAD"), topic=d.Resource(name="G5Dead"),
                receipt_handle=got[0].system_properties.receipt_handle, message_id="01DEAD", delivery_attempt=1,
                max_delivery_attempts=1), metadata=md)
            assert fr.status.code == d.Code.OK

    anyio.run(go)

    assert dlq_bodies(proc.namesrv_addr, "CG5DEAD", "CG_DLQ_READ2") == [b"poison"]


def test_routes_span_every_broker_of_a_topic(rmqd_factory: Any, compat: Any) -> None:
    """Two brokers hold the topic: the route lists both (each with its own proxy's endpoint, RocketMQ's
    local mode: the broker's host with the common gRPC port), the SDK's sends spread over both and a
    SimpleConsumer connected to one endpoint receives every message."""
    from rmq.testing.daemon import free_port

    port = free_port()
    a = rmqd_factory(extra={"proxy": {"grpcServerPort": port}})
    b = rmqd_factory(namesrv=False, extra={"proxy": {"grpcServerPort": port}},
                     broker_conf={"brokerName": "broker-b", "listenHost": "127.0.0.2", "brokerIP1": "127.0.0.2",
                                  "namesrvAddr": a.namesrv_addr})
    b_addr = f"127.0.0.2:{b.broker_port}"
    for addr in (a.broker_addr, b_addr):
        r = compat.admin(addr, 17, {"topic": "G5Multi", "defaultTopic": "TBW102", "readQueueNums": "2",
                                    "writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG",
                                    "topicSysFlag": "0", "order": "false"})
        assert r.code == 0, r.remark
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # both brokers registered the topic with the name server
        route = compat.admin(a.namesrv_addr, 105, {"topic": "G5Multi"})
        if route.code == 0 and b"broker-b" in route.body and b"broker-a" in route.body:
            break
        time.sleep(0.2)
    sent = run5(mode="produce", endpoint=f"127.0.0.1:{port}", topic="G5Multi", count=20)
    assert len([ln for ln in sent if "message_id" in ln]) == 20, (sent[:2], a.log_tail(30))
    on_b = 0
    for q in range(2):
        r = compat.admin(b_addr, 30, {"topic": "G5Multi", "queueId": str(q)})
        on_b += int(r.ext["offset"])
    assert 0 < on_b < 20, on_b  # the producer used both brokers
    got = msgs(run5(mode="receive", endpoint=f"127.0.0.1:{port}", topic="G5Multi", group="CG5Multi", want=20, await_s=2))
    assert sorted(m["body"] for m in got) == sorted(f"body-{i}" for i in range(20))
