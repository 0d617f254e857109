"""What a request touches: the permission table's entries, declared beside each processor.

Every ``ProcessorRegistry.register`` call passes an :class:`Access` saying which topics and groups the
request names (by header field or body) and with which permission, or that it is admin-only, or that
it touches no topic or group at all (any signed account). The ACL interceptor reads these entries from
``registry.access``; nothing else knows what a code accesses. Models: RocketMQ 5.3's ACL 2.0
(``@RocketMQAction``/``@RocketMQResource`` per request header) and Kafka's API key -> (resource, op).

Some requests name their resource only through what they point at (a message's commit-log offset):
their entry says so in ``after_read`` and the processor asks :func:`check_after_read` once it has read
the message, before it answers or stores anything.

Pure data and pure functions: no I/O.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs

if TYPE_CHECKING:
    from rmq.protocol.command import RemotingCommand

__all__ = [
    "ADMIN",
    "ANY",
    "AUTHORIZER",
    "DENY",
    "PUB",
    "SIGNED",
    "SUB",
    "Access",
    "Authorizer",
    "Resource",
    "allowed",
    "check_after_read",
    "is_admin",
    "is_loopback",
    "read_of",
]

#: permission bits, the values of RocketMQ's plain_acl.yml
DENY, ANY, PUB, SUB = 1, 2, 4, 8
#: ``registry.services`` key of the role's :class:`Authorizer` (absent: no ACL, everything allowed)
AUTHORIZER = "authorizer"

#: one resource a request needs: ("topic" | "group", name, permission)
Resource = tuple[str, str, int]
Resolver = Callable[["RemotingCommand"], list[Resource]]


def allowed(needed: int, owned: int) -> bool:
    """Whether an account holding ``owned`` on a resource may do what ``needed`` asks (ANY: PUB or SUB)."""
    if owned & DENY:
        return False
    if needed == ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def _field(cmd: RemotingCommand, spec: str) -> str | None:
    """A header field's value; a spec ending in ``?`` is optional (None when absent or empty)."""
    if spec.endswith("?"):
        return cmd.ext.get(spec[:-1]) or None
    return cmd.ext.get(spec) or ""


@attrs.frozen
class Access:
    """What one request code touches, and with which permission.

    ``topics``/``groups``: (header field, permission) pairs; a field ending in ``?`` may be absent.
    ``resolve``: resources the body (or a rule over several fields) names. ``admin``: admin accounts only.
    ``after_read``: the check the processor itself makes once it knows the resource (empty: none).
    An entry with none of these touches no topic or group: any signed account may send it.
    """

    topics: tuple[tuple[str, int], ...] = ()
    groups: tuple[tuple[str, int], ...] = ()
    resolve: Resolver | None = attrs.field(default=None, eq=False)
    admin: bool = False
    after_read: str = ""
    note: str = ""

    @property
    def restricted(self) -> bool:
        """True when an account without the right permissions (or not an admin) is refused."""
        return bool(self.admin or self.topics or self.groups or self.resolve or self.after_read)

    def resources(self, cmd: RemotingCommand) -> list[Resource]:
        """The resources ``cmd`` names (ValueError when its body cannot be read)."""
        out: list[Resource] = []
        for spec, perm in self.topics:
            name = _field(cmd, spec)
            if name is not None:
                out.append(("topic", name, perm))
        for spec, perm in self.groups:
            name = _field(cmd, spec)
            if name is not None:
                out.append(("group", name, perm))
        if self.resolve is not None:
            out.extend(self.resolve(cmd))
        return out


#: any signed account; the request touches no topic or group
SIGNED = Access()
#: admin accounts only (every state-changing admin code, among others)
ADMIN = Access(admin=True)


def topic(field: str = "topic", perm: int = SUB, group: str = "", **kw: Any) -> Access:
    """``perm`` on the topic named by ``field`` (and SUB on the group named by ``group``)."""
    return Access(topics=((field, perm),), groups=((group, SUB),) if group else (), **kw)


def group(field: str = "consumerGroup", **kw: Any) -> Access:
    """SUB on the group named by ``field``."""
    return Access(groups=((field, SUB),), **kw)


def send(topic_key: str, group_key: str) -> Access:
    """A send: PUB on the topic, or SUB on the group when it is the group's ``%RETRY%`` topic."""

    def resolve(cmd: RemotingCommand) -> list[Resource]:
        name = cmd.ext.get(topic_key) or ""
        if name.startswith("%RETRY%"):
            return [("group", cmd.ext.get(group_key) or name[7:], SUB)]
        return [("topic", name, PUB)]

    return Access(resolve=resolve)


def _json(cmd: RemotingCommand) -> Any:
    try:
        return json.loads(cmd.body or b"{}")
    except ValueError as e:
        raise ValueError(f"the body is not JSON: {e}") from None


def heartbeat(cmd: RemotingCommand) -> list[Resource]:
    """HEART_BEAT: SUB on every consumer group and on each topic it subscribes (retry topics are the group's)."""
    doc = _json(cmd)
    out: list[Resource] = []
    for cd in (doc.get("consumerDataSet") or []) if isinstance(doc, dict) else []:
        if not isinstance(cd, dict):
            continue
        out.append(("group", str(cd.get("groupName", "")), SUB))
        for sd in cd.get("subscriptionDataSet") or []:
            name = str(sd.get("topic", "")) if isinstance(sd, dict) else ""
            if name and not name.startswith("%RETRY%"):
                out.append(("topic", name, SUB))
    return out


def body_queues(cmd: RemotingCommand) -> list[Resource]:
    """LOCK/UNLOCK_BATCH_MQ: SUB on the body's consumer group and on each queue's topic."""
    doc = _json(cmd)
    if not isinstance(doc, dict):
        raise ValueError("the body is not a JSON object")
    out: list[Resource] = [("group", str(doc.get("consumerGroup") or ""), SUB)]
    mqs = doc.get("mqSet") or []
    for mq in mqs if isinstance(mqs, list) else []:
        out.append(("topic", str(mq.get("topic", "")) if isinstance(mq, dict) else "", SUB))
    return out


def body_topic_group(cmd: RemotingCommand) -> list[Resource]:
    """A body naming ``topic`` and ``consumerGroup`` (QUERY_ASSIGNMENT): SUB on both."""
    doc = _json(cmd)
    if not isinstance(doc, dict):
        raise ValueError("the body is not a JSON object")
    return [("topic", str(doc.get("topic") or ""), SUB), ("group", str(doc.get("consumerGroup") or ""), SUB)]


def batch_ack(cmd: RemotingCommand) -> list[Resource]:
    """BATCH_ACK_MESSAGE: SUB on every entry's topic and group (short or long keys)."""
    doc = _json(cmd)
    acks = doc.get("acks") if isinstance(doc, dict) else None
    out: list[Resource] = []
    for a in acks[:1024] if isinstance(acks, list) else []:
        a = a if isinstance(a, dict) else {}
        out.append(("topic", str(a.get("t", a.get("topic", ""))), SUB))
        out.append(("group", str(a.get("c", a.get("consumerGroup", ""))), SUB))
    return out


def read_of(topic_name: str) -> Resource:
    """What reading a stored message of ``topic_name`` needs: SUB on it, or on the group of a retry topic."""
    if topic_name.startswith("%RETRY%"):
        return ("group", topic_name[7:], SUB)
    return ("topic", topic_name, SUB)


class Authorizer(Protocol):
    """The role's ACL, as processors see it (``registry.services[AUTHORIZER]``)."""

    def authorize(self, peer: str, cmd: RemotingCommand, resources: list[Resource]) -> str | None:
        """None when the signer of ``cmd`` (already authenticated) may access ``resources``, else why not."""
        ...

    def is_admin(self, peer: str, cmd: RemotingCommand) -> bool:
        """True when the signer of ``cmd`` may do what admins may (an admin account or a white-listed peer)."""
        ...


def check_after_read(services: Mapping[str, Any], peer: str, cmd: RemotingCommand,
                     resources: list[Resource]) -> str | None:
    """The post-read check: None when allowed (or no ACL), else the refusal's remark (NO_PERMISSION)."""
    authorizer: Authorizer | None = services.get(AUTHORIZER)
    return None if authorizer is None else authorizer.authorize(peer, cmd, resources)


def is_admin(services: Mapping[str, Any], peer: str, cmd: RemotingCommand) -> bool:
    """True without ACL; with ACL, whether the request's signer is an admin."""
    authorizer: Authorizer | None = services.get(AUTHORIZER)
    return True if authorizer is None else authorizer.is_admin(peer, cmd)


def is_loopback(host: str) -> bool:
    """A loopback peer (IPv4, IPv6 or IPv4-mapped, bracketed or not, or "localhost" in a configured
    address): the admin guard's trusted peers without ACL."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))
