"""The ACL accounts file in RocketMQ's ``plain_acl.yml`` format, loaded, validated and written back.

Schema (reference §4.1): ``globalWhiteRemoteAddresses`` (patterns), ``accounts`` (``accessKey``
and ``secretKey`` of 7+ characters, ``whiteRemoteAddress``, ``admin``, ``defaultTopicPerm``,
``defaultGroupPerm``, ``topicPerms`` / ``groupPerms`` as ``name=PERM``), ``dataVersion``.
Permissions: DENY 1, ANY 2, PUB 4, SUB 8; a missing or unknown default is DENY. Group
permissions are kept under ``%RETRY%<group>``, the resource the checks name.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import attrs

from rmq.plugins.acl.addresses import AddressPatternError, Matcher, compile_pattern
from rmq.protocol.access import ANY, DENY, PUB, SUB
from rmq.protocol.names import RETRY_PREFIX

log = logging.getLogger("rmq.acl")

PERMS = {"DENY": DENY, "ANY": ANY, "PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}
RETRY = RETRY_PREFIX


class AclFileError(ValueError):
    """The accounts file is unusable: the message names the file and the entry."""


def parse_perm(text: Any, *, strict: bool = False) -> int:
    perm = PERMS.get(str(text).strip().upper()) if text is not None else None
    if perm is None:
        if strict:
            raise ValueError(f"permission {text!r} is not DENY, PUB, SUB or PUB|SUB")
        return DENY
    return perm


def perm_text(perm: int) -> str:
    return {DENY: "DENY", ANY: "ANY", PUB: "PUB", SUB: "SUB", PUB | SUB: "PUB|SUB"}.get(perm, "DENY")


@attrs.define
class Account:
    access_key: str
    secret_key: str
    white_text: str = ""
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    topic_perms: dict[str, int] = attrs.field(factory=dict)
    group_perms: dict[str, int] = attrs.field(factory=dict)  # keyed %RETRY%<group>
    white: Matcher = attrs.field(default=None, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.white is None:
            self.white = compile_pattern(self.white_text)

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"accessKey": self.access_key, "secretKey": self.secret_key}
        if self.white_text:
            doc["whiteRemoteAddress"] = self.white_text
        doc["admin"] = self.admin
        doc["defaultTopicPerm"] = perm_text(self.default_topic_perm)
        doc["defaultGroupPerm"] = perm_text(self.default_group_perm)
        doc["topicPerms"] = [f"{k}={perm_text(v)}" for k, v in self.topic_perms.items()]
        doc["groupPerms"] = [f"{k[len(RETRY):]}={perm_text(v)}" for k, v in self.group_perms.items()]
        return doc


def _perm_list(items: Any, where: str, group: bool, strict: bool) -> dict[str, int]:
    if items is None:
        return {}
    if isinstance(items, str):
        items = [x for x in items.split(",") if x.strip()]
    if not isinstance(items, list):
        raise AclFileError(f"{where}: expected a list of name=PERM")
    out: dict[str, int] = {}
    for item in items:
        name, sep, perm = str(item).partition("=")
        if not sep or not name.strip():
            raise AclFileError(f"{where}: {item!r} is not name=PERM")
        try:
            value = parse_perm(perm, strict=strict)
        except ValueError as e:
            raise AclFileError(f"{where}: {e}") from None
        if not strict and perm.strip().upper() not in PERMS:
            log.warning("%s: unknown permission %r loads as DENY", where, perm)
        key = name.strip()
        out[RETRY + key if group else key] = value
    return out


def account_from(doc: Any, where: str, *, strict: bool = False) -> Account:
    if not isinstance(doc, dict):
        raise AclFileError(f"{where}: expected a mapping")
    ak, sk = doc.get("accessKey"), doc.get("secretKey")
    # YAML reads an unquoted 12345678 as a number; RocketMQ takes it as the string it was written as
    ak = str(ak) if isinstance(ak, int) and not isinstance(ak, bool) else ak
    sk = str(sk) if isinstance(sk, int) and not isinstance(sk, bool) else sk
    for name, value in (("accessKey", ak), ("secretKey", sk)):
        if not isinstance(value, str) or len(value) <= 6:
            raise AclFileError(f"{where}.{name}: required, a string of at least 7 characters")
    white = doc.get("whiteRemoteAddress") or ""
    try:
        matcher = compile_pattern(str(white))
    except AddressPatternError as e:
        raise AclFileError(f"{where}.whiteRemoteAddress: {e}") from None
    try:
        dt = parse_perm(doc.get("defaultTopicPerm"), strict=strict and doc.get("defaultTopicPerm") is not None)
        dg = parse_perm(doc.get("defaultGroupPerm"), strict=strict and doc.get("defaultGroupPerm") is not None)
    except ValueError as e:
        raise AclFileError(f"{where}: {e}") from None
    admin = doc.get("admin", False)
    if not isinstance(admin, bool):
        admin = str(admin).strip().lower() == "true"
    return Account(ak, sk, str(white), admin, dt, dg,  # type: ignore[arg-type]
                   _perm_list(doc.get("topicPerms"), f"{where}.topicPerms", False, strict),
                   _perm_list(doc.get("groupPerms"), f"{where}.groupPerms", True, strict), matcher)


class AclFile:
    """One ``plain_acl.yml``: its accounts, global white list and data version."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.accounts: dict[str, Account] = {}
        self.global_white_text: list[str] = []
        self.global_white: list[Matcher] = []
        self.counter = 0
        self.timestamp = 0
        self.mtime = -1.0

    def stat(self) -> float:
        try:
            return self.path.stat().st_mtime
        except FileNotFoundError:
            return -1.0

    def load(self) -> None:
        """Replace the contents with the file's (a missing file = no accounts); AclFileError when bad."""
        mtime = self.stat()
        if mtime < 0:
            self.accounts, self.global_white, self.global_white_text, self.mtime = {}, [], [], mtime
            return
        import yaml  # here, not at import: the plugin is selected for every broker, ACL is rarely on

        try:
            doc = yaml.safe_load(self.path.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeError) as e:
            raise AclFileError(f"{self.path}: cannot read: {e}") from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f" line {mark.line + 1}" if mark is not None else ""
            raise AclFileError(f"{self.path}:{at} invalid YAML: {getattr(e, 'problem', None) or e}") from None
        if not isinstance(doc, dict):
            raise AclFileError(f"{self.path}: expected a mapping with 'accounts'")
        unknown = set(doc) - {"accounts", "globalWhiteRemoteAddresses", "dataVersion"}
        if unknown:
            raise AclFileError(f"{self.path}: unknown key {sorted(unknown)[0]!r} "
                               "(expected accounts, globalWhiteRemoteAddresses, dataVersion)")
        whites = doc.get("globalWhiteRemoteAddresses") or []
        if not isinstance(whites, list):
            raise AclFileError(f"{self.path}: globalWhiteRemoteAddresses: expected a list of patterns")
        matchers = []
        for i, w in enumerate(whites):
            try:
                matchers.append(compile_pattern(str(w)))
            except AddressPatternError as e:
                raise AclFileError(f"{self.path}: globalWhiteRemoteAddresses[{i}]: {e}") from None
        accounts: dict[str, Account] = {}
        items = doc.get("accounts") or []
        if not isinstance(items, list):
            raise AclFileError(f"{self.path}: accounts: expected a list")
        for i, item in enumerate(items):
            acct = account_from(item, f"{self.path}: accounts[{i}]")
            if acct.access_key in accounts:
                raise AclFileError(f"{self.path}: accounts[{i}].accessKey {acct.access_key!r} appears twice")
            accounts[acct.access_key] = acct
        dv = doc.get("dataVersion")
        counter = timestamp = 0
        if isinstance(dv, list) and dv and isinstance(dv[0], dict):
            counter, timestamp = int(dv[0].get("counter") or 0), int(dv[0].get("timestamp") or 0)
        self.accounts, self.global_white, self.global_white_text = accounts, matchers, [str(w) for w in whites]
        self.counter, self.timestamp, self.mtime = counter, timestamp, mtime

    def data_version(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    def save(self) -> None:
        """Write the file atomically (temp file, fsync, rename), bumping its data version."""
        self.counter += 1
        self.timestamp = time.time_ns() // 1_000_000
        doc = {
            "globalWhiteRemoteAddresses": list(self.global_white_text),
            "accounts": [a.to_doc() for a in self.accounts.values()],
            "dataVersion": [self.data_version()],
        }
        import yaml

        text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, text.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        self.mtime = self.stat()
