"""Issue #26's ACL side doors, each probed with the account denied the topic (NO_PERMISSION, no data,
no store change) and with the admin (works): view-by-id, consume-queue query, max offset,
end-transaction, send-back, reply; reply queue ids beyond the topic's queues; the broker config."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.message import offset_msg_id
from rmq.testing.acl import (
    ADMIN,
    BODY,
    DENIED,
    OWN_GROUP,
    SECRET,
    Caller,
    create_group,
    create_topic,
    max_offset,
    put,
    queue_dirs,
    send_ext,
    start_acl_rmqd,
    wait_max_offset,
)
from rmq.testing.daemon import RmqdProcess

pytestmark = pytest.mark.anyio
NO_PERMISSION = ResponseCode.NO_PERMISSION


@pytest.fixture
def acl_rmqd(rmqd_factory: Any, tmp_path: Path) -> RmqdProcess:
    return start_acl_rmqd(rmqd_factory, tmp_path)


def refused(r: Any) -> bool:
    return bool(r.code == NO_PERMISSION and BODY not in (r.body or b""))


async def test_reads_of_a_denied_topic_are_refused(acl_rmqd: RmqdProcess) -> None:
    addr = acl_rmqd.broker_addr
    async with Caller(addr, ADMIN) as admin, Caller(addr, DENIED) as denied:
        await create_topic(admin, SECRET)
        phys, _ = await put(admin, SECRET)
        # VIEW_MESSAGE_BY_ID (33): the topic is known once the message is read; no byte of it leaves
        r = await denied(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phys)})
        assert refused(r) and f"topic:{SECRET}" in (r.remark or "")
        r = await admin(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(phys)})
        assert r.code == 0 and BODY in r.body
        # QUERY_CONSUME_QUEUE (321) and the offset lookups (30, 31, 32, 29)
        cq = {"topic": SECRET, "queueId": "0", "index": "0", "count": "10"}
        assert refused(await denied(RequestCode.QUERY_CONSUME_QUEUE, cq))
        assert (await admin(RequestCode.QUERY_CONSUME_QUEUE, cq)).code == 0
        q = {"topic": SECRET, "queueId": "0"}
        for code in (RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET, RequestCode.GET_EARLIEST_MSG_STORETIME):
            r = await denied(code, q)
            assert r.code == NO_PERMISSION and "offset" not in r.ext and "timestamp" not in r.ext, code
        r = await denied(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**q, "timestamp": "0"})
        assert r.code == NO_PERMISSION and "offset" not in r.ext
        assert await max_offset(admin, SECRET) == 1


async def test_end_transaction_needs_pub_on_the_real_topic(acl_rmqd: RmqdProcess) -> None:
    addr = acl_rmqd.broker_addr
    async with Caller(addr, ADMIN) as admin, Caller(addr, DENIED) as denied:
        await create_topic(admin, SECRET)
        phys, qoff = await put(admin, SECRET, props={"TRAN_MSG": "true", "PGROUP": "TXG"}, sys_flag=4, group="TXG")
        end = {"producerGroup": "TXG", "tranStateTableOffset": str(qoff), "commitLogOffset": str(phys),
               "commitOrRollback": "8", "fromTransactionCheck": "false", "msgId": offset_msg_id(b"\x7f\0\0\1\0\0\0\1", phys)}
        r = await denied(RequestCode.END_TRANSACTION, end)
        assert r.code == NO_PERMISSION and f"topic:{SECRET}" in (r.remark or "")
        assert await max_offset(admin, SECRET) == 0  # nothing committed
        assert (await admin(RequestCode.END_TRANSACTION, end)).code == 0
        await wait_max_offset(admin, SECRET, 1)  # the commit reaches the consume queue


async def test_send_back_only_of_messages_the_account_may_read(acl_rmqd: RmqdProcess) -> None:
    addr = acl_rmqd.broker_addr
    async with Caller(addr, ADMIN) as admin, Caller(addr, DENIED) as denied:
        await create_topic(admin, SECRET)
        await create_group(admin, OWN_GROUP)
        phys, _ = await put(admin, SECRET)
        back = {"group": OWN_GROUP, "offset": str(phys), "delayLevel": "-1", "originTopic": SECRET,
                "unitMode": "false", "maxReconsumeTimes": "16"}
        r = await denied(RequestCode.CONSUMER_SEND_MSG_BACK, back)
        assert r.code == NO_PERMISSION and f"topic:{SECRET}" in (r.remark or "")
        for made in (f"%RETRY%{OWN_GROUP}", f"%DLQ%{OWN_GROUP}"):  # nothing created, nothing copied
            assert (await admin(RequestCode.GET_TOPIC_CONFIG, {"topic": made})).code == ResponseCode.TOPIC_NOT_EXIST
        assert (await admin(RequestCode.CONSUMER_SEND_MSG_BACK, back)).code == 0
        await wait_max_offset(admin, f"%DLQ%{OWN_GROUP}", 1)


async def test_reply_needs_pub_and_a_queue_the_topic_has(acl_rmqd: RmqdProcess) -> None:
    addr = acl_rmqd.broker_addr
    reply_to = {"REPLY_TO_CLIENT": "nobody@1", "CORRELATION_ID": "c1"}
    async with Caller(addr, ADMIN) as admin, Caller(addr, DENIED) as denied:
        await create_topic(admin, SECRET)
        for code, ext in ((RequestCode.SEND_REPLY_MESSAGE_V2, send_ext(SECRET, 0, reply_to)),
                          (RequestCode.SEND_REPLY_MESSAGE, {"producerGroup": "PG", "topic": SECRET, "queueId": "0",
                                                            "sysFlag": "0", "bornTimestamp": "0", "flag": "0",
                                                            "properties": "REPLY_TO_CLIENT\x01nobody@1\x02"})):
            r = await denied(code, ext, BODY)
            assert r.code == NO_PERMISSION, (code, r.remark)
        r = await admin(RequestCode.SEND_REPLY_MESSAGE_V2, send_ext(SECRET, 7, reply_to), BODY)
        assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[7] is illegal" in (r.remark or "")
        await put(admin, SECRET)  # a later message dispatched: every earlier put is in the consume queues
        await wait_max_offset(admin, SECRET, 1)
        assert queue_dirs(acl_rmqd, SECRET) == {"0"}


async def test_replies_to_random_queues_make_no_queue(rmqd: RmqdProcess) -> None:
    """Without ACL anyone may reply; still no reply creates a consume queue the topic does not have."""
    addr = rmqd.broker_addr
    rng = random.Random(26)
    async with Caller(addr, None) as anon:
        await create_topic(anon, "ReplyT", queues=2)  # loopback: admin writes allowed without ACL
        answers = set()
        for _ in range(1000):
            ext = send_ext("ReplyT", rng.randrange(2, 1 << 31), {"REPLY_TO_CLIENT": "nobody@1"})
            r = await anon(RequestCode.SEND_REPLY_MESSAGE_V2, ext, b"r")
            answers.add((r.code, "is illegal, topic[ReplyT] has 2 queues" in (r.remark or "")))
        assert answers == {(ResponseCode.SYSTEM_ERROR, True)}
        r = await anon(RequestCode.SEND_REPLY_MESSAGE_V2, send_ext("ReplyT", 1, {"REPLY_TO_CLIENT": "nobody@1"}), b"r")
        assert r.code == ResponseCode.SYSTEM_ERROR and "channel of <nobody@1> not found" in (r.remark or "")
        await wait_max_offset(anon, "ReplyT", 1, 1)
        assert queue_dirs(rmqd, "ReplyT") <= {"0", "1"}


async def test_broker_config_without_paths_and_secrets_for_non_admins(acl_rmqd: RmqdProcess) -> None:
    addr = acl_rmqd.broker_addr
    store = str(acl_rmqd.workdir / "store")
    async with Caller(addr, ADMIN) as admin, Caller(addr, DENIED) as denied:
        r = await denied(RequestCode.GET_BROKER_CONFIG)
        text = r.body.decode()
        assert r.code == 0 and "brokerName=" in text and "listenPort=" in text
        keys = {line.partition("=")[0] for line in text.splitlines()}
        assert not {k for k in keys if any(w in k.lower() for w in ("path", "dir", "file", "password", "secret"))}
        assert store not in text and "plain_acl" not in text
        r = await admin(RequestCode.GET_BROKER_CONFIG)
        assert r.code == 0, r.remark
        full = r.body.decode()
        assert f"storePathRootDir={store}" in full and "plainAclFile=" in full and "plain_acl.yml" in full
