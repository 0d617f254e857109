"""The ACL check on every broker request (RocketMQ's PlainAccessValidator), as a RequestInterceptor.

Order (reference §4.1): global white list → accept; no AccessKey / unknown key → deny; the
account's white address → accept; bad signature → deny; a PUB on the trace topic → accept;
an admin code from a non-admin → deny; then each resource the request names against the
account's explicit or default permission. Denials are NO_PERMISSION (16, RocketMQ 5's code)
naming what was refused, never the secret, and one rate-limited audit line.

Admin codes here are RocketMQ's (17, 25, 215, 200, 207) plus every state-changing admin code
(``ADMIN_WRITE_CODES``, the ACL codes 50-53 among them): RocketMQ 4.9 lets any signed account
rewrite ACLs, which we do not.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from rmq.kernel import RateLimitedLog
from rmq.plugins.acl.accounts import PUB, RETRY, SUB, AclFile, allowed
from rmq.protocol.acl import ACCESS_KEY, verify
from rmq.protocol.codes import ADMIN_WRITE_CODES, RequestCode, ResponseCode
from rmq.protocol.names import TRACE_TOPIC
from rmq.protocol.names import printable as _printable

if TYPE_CHECKING:
    from rmq.kernel import Connection
    from rmq.protocol.command import RemotingCommand

log = logging.getLogger("rmq.acl")

ADMIN_CODES = frozenset(ADMIN_WRITE_CODES | {17, 25, 215, 200, 207})
Resources = list[tuple[str, int, bool]]  # (name, needed perm, is a group)


def _send(topic_key: str, group_key: str) -> Callable[[RemotingCommand], Resources]:
    def res(cmd: RemotingCommand) -> Resources:
        ext = cmd.ext
        topic = ext.get(topic_key) or ""
        if topic.startswith(RETRY):
            group = ext.get(group_key)
            return [(RETRY + group, SUB, True)] if group else []
        return [(topic, PUB, False)]
    return res


def _group(key: str, topic: bool = False) -> Callable[[RemotingCommand], Resources]:
    def res(cmd: RemotingCommand) -> Resources:
        ext = cmd.ext
        out: Resources = [(RETRY + ext.get(key, ""), SUB, True)]
        if topic:
            out.append((ext.get("topic", ""), SUB, False))
        return out
    return res


def _heartbeat(cmd: RemotingCommand) -> Resources:
    try:
        doc = json.loads(cmd.body or b"{}")
    except ValueError as e:
        raise ValueError(f"heartbeat body is not JSON: {e}") from None
    out: Resources = []
    for cd in (doc.get("consumerDataSet") or []) if isinstance(doc, dict) else []:
        if not isinstance(cd, dict):
            continue
        out.append((RETRY + str(cd.get("groupName", "")), SUB, True))
        for sd in cd.get("subscriptionDataSet") or []:
            topic = str(sd.get("topic", "")) if isinstance(sd, dict) else ""
            if topic and not topic.startswith(RETRY):
                out.append((topic, SUB, False))
    return out


RESOURCES: dict[int, Callable[[RemotingCommand], Resources]] = {
    RequestCode.SEND_MESSAGE: _send("topic", "producerGroup"),
    RequestCode.SEND_MESSAGE_V2: _send("b", "a"),
    RequestCode.SEND_BATCH_MESSAGE: _send("b", "a"),
    RequestCode.CONSUMER_SEND_MSG_BACK: _group("group"),
    RequestCode.PULL_MESSAGE: _group("consumerGroup", topic=True),
    361: _group("consumerGroup", topic=True),  # LITE_PULL_MESSAGE (RocketMQ 5's lite pull consumer)
    200050: _group("consumerGroup", topic=True),  # POP_MESSAGE
    200051: _group("consumerGroup", topic=True),  # ACK_MESSAGE
    200053: _group("consumerGroup", topic=True),  # CHANGE_MESSAGE_INVISIBLETIME
    RequestCode.QUERY_MESSAGE: lambda cmd: [(cmd.ext.get("topic", ""), SUB, False)],
    RequestCode.HEART_BEAT: _heartbeat,
    RequestCode.UNREGISTER_CLIENT: _group("consumerGroup"),
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _group("consumerGroup"),
    RequestCode.UPDATE_CONSUMER_OFFSET: _group("consumerGroup", topic=True),
    RequestCode.QUERY_CONSUMER_OFFSET: _group("consumerGroup", topic=True),
    RequestCode.RECALL_MESSAGE: lambda cmd: [(cmd.ext.get("topic", ""), PUB, False)],
}


class PlainAccessValidator:
    def __init__(self, acl: AclFile) -> None:
        self.acl = acl
        self.audit = RateLimitedLog(log)
        self.denied = 0

    def _deny(self, conn: Connection, cmd: RemotingCommand, ak: str, why: str) -> RemotingCommand:
        self.denied += 1
        host = conn.remote_addr[0]
        self.audit.warning(f"deny:{host}:{ak}:{why[:20]}", "acl: refused request code %d from %s (accessKey=%s): %s",
                           cmd.code, host, _printable(ak, 64) or "-", why)
        return cmd.response(ResponseCode.NO_PERMISSION, why)

    def before(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        acl = self.acl
        ip = conn.remote_addr[0]
        for white in acl.global_white:
            if white(ip):
                return None
        ext = cmd.ext or {}
        ak = ext.get(ACCESS_KEY)
        if not ak:
            return self._deny(conn, cmd, "", "No accessKey is configured")
        acct = acl.accounts.get(ak)
        if acct is None:
            return self._deny(conn, cmd, ak, f"No acl config for {_printable(ak, 64)}")
        if acct.white(ip):
            return None
        if not verify(ext, cmd.body, acct.secret_key):
            return self._deny(conn, cmd, ak, f"Check signature failed for accessKey={ak}")
        try:
            res = RESOURCES[cmd.code](cmd) if cmd.code in RESOURCES else []
        except (ValueError, AttributeError, TypeError) as e:
            return self._deny(conn, cmd, ak, f"cannot tell what request code {cmd.code} accesses: {e}")
        if (TRACE_TOPIC, PUB, False) in res:
            return None
        if cmd.code in ADMIN_CODES and not acct.admin:
            return self._deny(conn, cmd, ak, f"Need admin permission for request code={cmd.code}, "
                                             f"but accessKey={ak} is not")
        if not res or (acct.admin and not acct.topic_perms and not acct.group_perms):
            return None
        for name, needed, group in res:
            perms = acct.group_perms if group else acct.topic_perms
            owned = perms.get(name)
            if owned is None:
                owned = acct.default_group_perm if group else acct.default_topic_perm
            if not allowed(needed, owned):
                kind = "group" if group else "topic"
                shown = name[len(RETRY):] if group else name
                return self._deny(conn, cmd, ak, f"No default permission for {kind}:{_printable(shown, 128)}"
                                                 f" (needs {'PUB' if needed == PUB else 'SUB'})")
        return None

    def after(self, conn: Connection, cmd: RemotingCommand, response: RemotingCommand | None) -> None:
        return None
