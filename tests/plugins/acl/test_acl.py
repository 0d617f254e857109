"""ACL against a real rmqd: signed requests with our client, every way a request is refused (wrong
secret, no signature, a replayed request with a changed field, no PUB on a topic, a non-admin
admin request), white lists, hot reload, the admin codes 50-53, a malformed accounts file, and
the audit lines."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.client import Admin, BrokerError, Message, Producer, PullConsumer, PullStatus, SendError
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.acl import sign
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import encode_properties
from rmq.testing.acl import account, acl_file
from rmq.testing.daemon import RmqdProcess

pytestmark = pytest.mark.anyio

USER = ("RocketMQ", "12345678")
ADMIN = ("rocketmq2", "87654321")
ACCOUNTS = acl_file(account(USER, False, defaultTopicPerm="DENY", defaultGroupPerm="SUB",
                            topicPerms=["TopicA=PUB|SUB", "TopicB=SUB"], groupPerms=["GroupDenied=DENY"]),
                    account(ADMIN, True))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def acl_rmqd(rmqd_factory: Any, tmp_path: Path) -> RmqdProcess:
    f = tmp_path / "plain_acl.yml"
    f.write_text(ACCOUNTS)
    return rmqd_factory(broker_conf={"aclEnable": True, "plainAclFile": str(f)},  # type: ignore[no-any-return]
                        extra={"plugin": {"auth": {"plain": {"watch_interval_ms": 100}}}})


def send_cmd(topic: str, group: str = "PG") -> RemotingCommand:
    ext = {"a": group, "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
           "g": str(time.time_ns() // 1_000_000), "h": "0", "i": encode_properties({"UNIQ_KEY": "U1"}),
           "j": "0", "k": "false", "m": "false"}
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"hello")


async def call(addr: str, cmd: RemotingCommand, creds: tuple[str, str] | None = None) -> RemotingCommand:
    if creds:
        sign(cmd.ext, cmd.body, *creds)
    async with TcpRemotingClient(RemotingConfig(name="acl-test")) as c:
        return await c.invoke(addr, cmd, 5)


async def create_topic(addr: str, topic: str, creds: tuple[str, str]) -> RemotingCommand:
    return await call(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}), creds)


async def test_signed_clients_work_and_refusals_name_the_reason(acl_rmqd: RmqdProcess) -> None:
    addr, ns = acl_rmqd.broker_addr, acl_rmqd.namesrv_addr
    r = await create_topic(addr, "TopicA", USER)
    assert r.code == ResponseCode.NO_PERMISSION and "Need admin permission for request code=17" in r.remark
    for t in ("TopicA", "TopicB"):
        assert (await create_topic(addr, t, ADMIN)).code == 0
    async with Producer("PG_ACL", ns, credentials=USER) as p:
        assert (await p.send(Message("TopicA", b"signed"))).ok
    async with PullConsumer("GroupA", ns, credentials=USER) as pc:
        mq = (await pc.fetch_queues("TopicA"))[0]
        res = await pc.pull(mq, 0, 8)
        assert res.status is PullStatus.FOUND and [m.body for m in res.messages] == [b"signed"]
    r = await call(addr, send_cmd("TopicA"))
    assert r.code == ResponseCode.NO_PERMISSION and r.remark == "No accessKey is configured"
    r = await call(addr, send_cmd("TopicA"), (USER[0], "wrong-secret"))
    assert r.code == ResponseCode.NO_PERMISSION and r.remark == f"Check signature failed for accessKey={USER[0]}"
    r = await call(addr, send_cmd("TopicA"), ("Nobody1", "12345678"))
    assert r.code == ResponseCode.NO_PERMISSION and r.remark == "No acl config for Nobody1"
    r = await call(addr, send_cmd("TopicB"), USER)
    assert r.code == ResponseCode.NO_PERMISSION and "No default permission for topic:TopicB" in r.remark
    replay = send_cmd("TopicA")
    sign(replay.ext, replay.body, *USER)
    replay.ext["b"] = "TopicB"  # a captured request with a changed field
    r = await call(addr, replay)
    assert r.code == ResponseCode.NO_PERMISSION and "Check signature failed" in r.remark
    replay = send_cmd("TopicA")
    sign(replay.ext, replay.body, *USER)
    replay.body = b"changed"
    assert (await call(addr, replay)).code == ResponseCode.NO_PERMISSION
    pull = RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "GroupDenied", "topic": "TopicA", "queueId": "0", "queueOffset": "0", "maxMsgNums": "8",
        "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0"})
    r = await call(addr, pull, USER)
    assert r.code == ResponseCode.NO_PERMISSION and "No default permission for group:GroupDenied" in r.remark
    with pytest.raises(SendError):  # our client says why too
        async with Producer("PG_ACL", ns, credentials=(USER[0], "bad-secret-x")) as p:
            await p.send(Message("TopicA", b"x"))
    assert (await call(addr, send_cmd("TopicA"), ADMIN)).code == 0  # an admin without perms lists may do all
    audit = [ln for ln in acl_rmqd.log_lines() if "acl: refused request code" in ln]
    assert any("accessKey=RocketMQ" in ln and "Check signature failed" in ln for ln in audit)
    assert not any(USER[1] in ln for ln in acl_rmqd.log_lines())  # never the secret


async def test_admin_codes_reload_and_white_lists(acl_rmqd: RmqdProcess, tmp_path: Path) -> None:
    addr = acl_rmqd.broker_addr
    assert (await create_topic(addr, "TopicC", ADMIN)).code == 0
    upd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {
        "accessKey": "newuser1", "secretKey": "newsecret1", "defaultTopicPerm": "DENY", "topicPerms": "TopicC=PUB"})
    r = await call(addr, upd, USER)
    assert r.code == ResponseCode.NO_PERMISSION  # ACL codes are admin codes here
    upd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {
        "accessKey": "newuser1", "secretKey": "newsecret1", "defaultTopicPerm": "DENY", "topicPerms": "TopicC=PUB"})
    assert (await call(addr, upd, ADMIN)).code == 0
    assert (await call(addr, send_cmd("TopicC"), ("newuser1", "newsecret1"))).code == 0
    text = (tmp_path / "plain_acl.yml").read_text()
    assert "newuser1" in text and "TopicC=PUB" in text
    bad = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, {
        "accessKey": "newuser2", "secretKey": "newsecret2", "topicPerms": "TopicC=WRITE"})
    r = await call(addr, bad, ADMIN)
    assert r.code == ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED and "WRITE" in r.remark
    info = await call(addr, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_ACL_INFO, {}), ADMIN)
    assert info.code == 0 and json.loads(info.ext["version"])["counter"] >= 1 and info.ext["brokerName"]
    dele = RemotingCommand.request(RequestCode.DELETE_ACL_CONFIG, {"accessKey": "newuser1"})
    assert (await call(addr, dele, ADMIN)).code == 0
    r = await call(addr, send_cmd("TopicC"), ("newuser1", "newsecret1"))
    assert r.code == ResponseCode.NO_PERMISSION and "No acl config" in r.remark
    # a global white list admits unsigned requests
    wl = RemotingCommand.request(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "127.0.0.*"})
    assert (await call(addr, wl, ADMIN)).code == 0
    assert (await call(addr, send_cmd("TopicC"))).code == 0
    # the file edited by hand: reloaded; a broken edit keeps the previous accounts
    f = tmp_path / "plain_acl.yml"
    f.write_text(ACCOUNTS.replace("TopicB=SUB", "TopicB=PUB"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = await call(addr, send_cmd("TopicC"))
        if r.code != 0:
            break
        await anyio.sleep(0.1)
    assert r.code == ResponseCode.NO_PERMISSION  # reloaded: the white list is gone
    assert (await call(addr, send_cmd("TopicB"), USER)).code == 0  # and TopicB is PUB now
    f.write_text("accounts: [ {accessKey: x} ")
    await anyio.sleep(0.5)
    assert (await call(addr, send_cmd("TopicB"), USER)).code == 0
    assert any("cannot be used, keeping the previous accounts" in ln for ln in acl_rmqd.log_lines())
    # an account's own white address: no signature needed from there
    f.write_text(ACCOUNTS.replace("    admin: false\n", "    admin: false\n    whiteRemoteAddress: 127.0.0.1\n", 1))
    deadline = time.monotonic() + 10
    unsigned = send_cmd("TopicA")
    unsigned.ext["AccessKey"] = USER[0]
    while (r := await call(addr, unsigned)).code != 0 and time.monotonic() < deadline:
        await anyio.sleep(0.1)
        unsigned = send_cmd("TopicA")
        unsigned.ext["AccessKey"] = USER[0]
    assert r.code == 0, r.remark


def test_malformed_accounts_file_refuses_start(rmqd_factory: Any, tmp_path: Path) -> None:
    f = tmp_path / "plain_acl.yml"
    f.write_text("accounts:\n  - accessKey: short\n    secretKey: 12345678\n")
    proc = RmqdProcess(tmp_path / "d", broker_conf={"aclEnable": True, "plainAclFile": str(f)})
    with pytest.raises(RuntimeError, match="did not start"):
        proc.start(timeout=20)
    assert any("accounts[0].accessKey: required, a string of at least 7 characters" in ln
               for ln in proc.log_lines())
    f.write_text("accounts:\n  - accessKey: longenough\n    secretKey: 12345678\n    whiteRemoteAddress: 10.x.1.1\n")
    proc2 = RmqdProcess(tmp_path / "e", broker_conf={"aclEnable": True, "plainAclFile": str(f)})
    with pytest.raises(RuntimeError, match="did not start"):
        proc2.start(timeout=20)
    assert any("whiteRemoteAddress" in ln for ln in proc2.log_lines())


async def test_admin_client_signs(acl_rmqd: RmqdProcess) -> None:
    async with Admin(acl_rmqd.namesrv_addr, credentials=ADMIN) as admin:
        await admin.create_topic("TopicD", 2)
    async with Admin(acl_rmqd.namesrv_addr, credentials=USER) as admin:
        with pytest.raises(BrokerError) as e:
            await admin.create_topic("TopicE", 2)
        assert e.value.code == ResponseCode.NO_PERMISSION


def test_rmq_bench_signs(acl_rmqd: RmqdProcess) -> None:
    import subprocess
    import sys

    base = [sys.executable, "-m", "rmq.client.bench", "producer", "-n", acl_rmqd.namesrv_addr, "-t", "TopicA",
            "-d", "1", "-q", "-c", "2", "--queues", "0"]
    ok = subprocess.run([*base, "--access-key", USER[0], "--secret-key", USER[1]], capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0, ok.stderr[-2000:]
    bad = subprocess.run([*base, "--access-key", USER[0], "--secret-key", "not-the-secret"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0 and "Check signature failed" in bad.stdout + bad.stderr
