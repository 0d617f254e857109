"""The ACL check on every broker request (RocketMQ's PlainAccessValidator), as a RequestInterceptor.

Order (reference §4.1): global white list → accept; no AccessKey / unknown key → deny; the
account's white address → accept; bad signature → deny; a code registered without a permission
declaration → deny (fail closed); a PUB on the trace topic → accept; an admin code from a
non-admin → deny; then each resource the declaration names against the account's explicit or
default permission. Denials are NO_PERMISSION (16, RocketMQ 5's code) naming what was refused,
never the secret, and one rate-limited audit line.

What each code touches is not known here: every processor declares it beside its registration
(``rmq.protocol.access.Access``, read from ``registry.access``). Admin codes are those declared
``admin``: RocketMQ's (17, 25, 215, 200, 207) plus every state-changing admin code (the ACL codes
50-53 among them; RocketMQ 4.9 lets any signed account rewrite ACLs, which we do not). Requests
whose resource is known only after a read (a message's topic) are checked by their processor
through :meth:`PlainAccessValidator.authorize` (``registry.services["authorizer"]``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rmq.kernel import RateLimitedLog
from rmq.plugins.acl.accounts import PUB, RETRY, Account, AclFile
from rmq.protocol.access import allowed
from rmq.protocol.acl import ACCESS_KEY, verify
from rmq.protocol.codes import ResponseCode
from rmq.protocol.names import TRACE_TOPIC
from rmq.protocol.names import printable as _printable

if TYPE_CHECKING:
    from rmq.kernel import Connection
    from rmq.protocol.access import Access, Resource
    from rmq.protocol.command import RemotingCommand

log = logging.getLogger("rmq.acl")


class PlainAccessValidator:
    """The one ACL interceptor of the broker role; ``table`` is the registry's permission table
    (request code -> ``Access``), ``known`` the codes the role serves (others are the router's)."""

    def __init__(self, acl: AclFile, table: Mapping[int, Access | None] | None = None,
                 known: Mapping[int, Any] | None = None) -> None:
        self.acl = acl
        self.table: Mapping[int, Access | None] = table if table is not None else {}
        self.known: Mapping[int, Any] = known if known is not None else self.table
        self.audit = RateLimitedLog(log)
        self.denied = 0

    def _audit(self, peer: str, code: int, ak: str, why: str) -> None:
        self.denied += 1
        self.audit.warning(f"deny:{peer}:{ak}:{why[:20]}", "acl: refused request code %d from %s (accessKey=%s): %s",
                           code, peer, _printable(ak, 64) or "-", why)

    def _deny(self, conn: Connection, cmd: RemotingCommand, ak: str, why: str) -> RemotingCommand:
        self._audit(conn.remote_addr[0], cmd.code, ak, why)
        return cmd.response(ResponseCode.NO_PERMISSION, why)

    def _trusted(self, ip: str, acct: Account | None) -> bool:
        """A globally white-listed peer, or the account's own white address: accepted for everything."""
        return any(white(ip) for white in self.acl.global_white) or (acct is not None and acct.white(ip))

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
        if cmd.code not in self.known:
            return None  # no processor: the router answers REQUEST_CODE_NOT_SUPPORTED, nothing runs
        access = self.table.get(cmd.code)
        if access is None:
            return self._deny(conn, cmd, ak, f"request code {cmd.code} declares no access: refused")
        try:
            res = access.resources(cmd)
        except (ValueError, AttributeError, TypeError) as e:
            return self._deny(conn, cmd, ak, f"cannot tell what request code {cmd.code} accesses: {e}")
        if ("topic", TRACE_TOPIC, PUB) in res:
            return None
        if access.admin and not acct.admin:
            return self._deny(conn, cmd, ak, f"Need admin permission for request code={cmd.code}, "
                                             f"but accessKey={ak} is not")
        why = self._check(acct, res)
        return None if why is None else self._deny(conn, cmd, ak, why)

    @staticmethod
    def _check(acct: Account, res: list[Resource]) -> str | None:
        """None when ``acct`` holds every permission ``res`` needs, else what it lacks."""
        if not res or (acct.admin and not acct.topic_perms and not acct.group_perms):
            return None
        for kind, name, needed in res:
            group = kind == "group"
            owned = (acct.group_perms.get(RETRY + name) if group else acct.topic_perms.get(name))
            if owned is None:
                owned = acct.default_group_perm if group else acct.default_topic_perm
            if not allowed(needed, owned):
                return (f"No default permission for {kind}:{_printable(name, 128)}"
                        f" (needs {'PUB' if needed == PUB else 'SUB'})")
        return None

    # ------------------------------------------------------------------ rmq.protocol.access.Authorizer

    def authorize(self, peer: str, cmd: RemotingCommand, resources: list[Resource]) -> str | None:
        """The post-read check (a processor that learnt the resource by reading): None or why not.
        ``before`` already verified the signature of ``cmd``."""
        ak = (cmd.ext or {}).get(ACCESS_KEY) or ""
        acct = self.acl.accounts.get(ak)
        if self._trusted(peer, acct):
            return None
        why = f"No acl config for {_printable(ak, 64)}" if acct is None else self._check(acct, resources)
        if why is not None:
            self._audit(peer, cmd.code, ak, why)
        return why

    def is_admin(self, peer: str, cmd: RemotingCommand) -> bool:
        acct = self.acl.accounts.get((cmd.ext or {}).get(ACCESS_KEY) or "")
        return self._trusted(peer, acct) or (acct is not None and acct.admin)

    def after(self, conn: Connection, cmd: RemotingCommand, response: RemotingCommand | None) -> None:
        return None
