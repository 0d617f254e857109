"""The ACL matrix, generated from the permission table: every broker request code x {no signature, wrong
signature, the account denied every topic and group it names, admin}. Unsigned and wrongly signed:
NO_PERMISSION always. The denied account: NO_PERMISSION for every code whose declaration needs a topic
or group permission or admin, never for the others. Admin: never NO_PERMISSION (other errors are fine).
A code added with a body-borne or post-read declaration fails here until it has a sample request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmq.protocol.access import Access
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.message import offset_msg_id
from rmq.testing.acl import (
    ADMIN,
    DENIED,
    SECRET,
    WRONG,
    Caller,
    create_topic,
    put,
    role_registries,
    send_ext,
    start_acl_rmqd,
)
from rmq.testing.daemon import RmqdProcess

pytestmark = pytest.mark.anyio
NO_PERMISSION = ResponseCode.NO_PERMISSION
GROUP = "DeniedGroup"  # a group the denied account holds no permission on
#: how the ACL's refusals begin (a processor may answer NO_PERMISSION for its own reasons: recall disabled...)
ACL_REMARKS = ("No accessKey", "No acl config", "Check signature failed", "Need admin permission",
               "No default permission", "cannot tell what", "request code")


def by_acl(r: Any) -> bool:
    return bool(r.code == NO_PERMISSION and (r.remark or "").startswith(ACL_REMARKS))


def samples(phys: int, half: tuple[int, int]) -> dict[int, tuple[dict[str, str], bytes]]:
    """Requests whose resources sit in the body, or are known only after a read, need a real shape."""
    mq = [{"topic": SECRET, "brokerName": "b", "queueId": 0}]
    return {
        RequestCode.SEND_MESSAGE: ({"producerGroup": "PG", "topic": SECRET, "defaultTopic": "TBW102",
                                    "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0",
                                    "bornTimestamp": "0", "flag": "0"}, b"x"),
        RequestCode.SEND_MESSAGE_V2: (send_ext(SECRET), b"x"),
        RequestCode.SEND_BATCH_MESSAGE: (send_ext(SECRET), b""),
        RequestCode.HEART_BEAT: ({}, json.dumps({"clientID": "c1", "producerDataSet": [], "consumerDataSet": [
            {"groupName": GROUP, "subscriptionDataSet": [{"topic": SECRET, "subString": "*"}]}]}).encode()),
        RequestCode.LOCK_BATCH_MQ: ({}, json.dumps({"consumerGroup": GROUP, "clientId": "c1", "mqSet": mq}).encode()),
        RequestCode.UNLOCK_BATCH_MQ: ({}, json.dumps({"consumerGroup": GROUP, "clientId": "c1", "mqSet": mq}).encode()),
        RequestCode.QUERY_ASSIGNMENT: ({}, json.dumps({"topic": SECRET, "consumerGroup": GROUP,
                                                       "clientId": "c1"}).encode()),
        200151: ({}, json.dumps({"acks": [{"c": GROUP, "t": SECRET, "q": 0, "so": 0, "b": "AQ==",
                                           "pt": 0}]}).encode()),  # BATCH_ACK_MESSAGE
        RequestCode.VIEW_MESSAGE_BY_ID: ({"offset": str(phys)}, b""),
        RequestCode.END_TRANSACTION: ({"producerGroup": "TXG", "tranStateTableOffset": str(half[1]),
                                       "commitLogOffset": str(half[0]), "commitOrRollback": "12",
                                       "fromTransactionCheck": "false",
                                       "msgId": offset_msg_id(b"\x7f\0\0\1\0\0\0\1", half[0])}, b""),
        RequestCode.CONSUMER_SEND_MSG_BACK: ({"offset": str(phys), "delayLevel": "0"}, b""),
        RequestCode.CONSUME_MESSAGE_DIRECTLY: ({"clientId": "c1", "msgId": offset_msg_id(b"\x7f\0\0\1\0\0\0\1", phys)},
                                               b""),
    }


def request_for(code: int, access: Access, sample: dict[int, tuple[dict[str, str], bytes]]) -> tuple[dict[str, str], bytes]:
    """The declared header fields name the denied topic and group; samples fill in the rest."""
    ext, body = dict(sample.get(code, ({}, b""))[0]), sample.get(code, ({}, b""))[1]
    for spec, _ in access.topics:
        ext[spec.rstrip("?")] = SECRET
    for spec, _ in access.groups:
        ext[spec.rstrip("?")] = GROUP
    return ext, body


async def test_every_broker_code_under_every_identity(rmqd_factory: Any, tmp_path: Path) -> None:
    table = role_registries(tmp_path / "table", ("broker",))["broker"].access
    proc: RmqdProcess = start_acl_rmqd(rmqd_factory, tmp_path)
    addr = proc.broker_addr
    async with Caller(addr, ADMIN) as admin, Caller(addr, DENIED) as denied, Caller(addr, None) as anon, \
            Caller(addr, WRONG) as wrong:
        await create_topic(admin, SECRET)
        phys, _ = await put(admin, SECRET)
        half = await put(admin, SECRET, props={"TRAN_MSG": "true", "PGROUP": "TXG"}, sys_flag=4, group="TXG")
        sample = samples(phys, half)
        shaped = {c for c, a in table.items() if a.resolve is not None or a.after_read}
        assert not shaped - set(sample), f"codes declared by body or post-read without a sample: {shaped - set(sample)}"
        failures: list[str] = []
        answers: dict[str, dict[int, Any]] = {}
        for who, caller in (("unsigned", anon), ("wrong", wrong), ("denied", denied), ("admin", admin)):
            answers[who] = {}
            for code in sorted(table):
                ext, body = request_for(code, table[code], sample)
                answers[who][code] = await caller(code, ext, body)
        for code, access in sorted(table.items()):
            for who in ("unsigned", "wrong"):
                if not by_acl(answers[who][code]):
                    failures.append(f"{who} {code}: {answers[who][code].code} {answers[who][code].remark}")
            r = answers["denied"][code]
            if access.restricted != by_acl(r):
                failures.append(f"denied {code} (restricted={access.restricted}): {r.code} {r.remark}")
            r = answers["admin"][code]
            if by_acl(r):
                failures.append(f"admin {code}: {r.remark}")
        assert not failures, "\n".join(failures)
        assert len(table) > 60
