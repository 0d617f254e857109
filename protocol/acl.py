"""RocketMQ ACL 1.0 request signatures, shared by the broker's check and our clients.

A signed request carries ``AccessKey`` (and optionally ``SecurityToken``) in its extFields and
``Signature`` = Base64(HMAC-SHA1(secretKey, values of every other extField sorted by key,
concatenated as UTF-8, then the body bytes as sent)). That is what Java clients 4.9.4+ and the
C++ client (whose extra ``OnsChannel`` field is just another extField) compute.
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Mapping

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


def signature(ext: Mapping[str, str], body: bytes | None, secret_key: str, *, skip: frozenset[str] = frozenset()) -> str:
    """The Signature of a request's extFields and body under ``secret_key``."""
    text = "".join([str(ext[k]) for k in sorted(ext) if k != SIGNATURE and k not in skip and ext[k] is not None])
    data = text.encode("utf-8")
    if body:
        data += body
    return base64.b64encode(hmac.digest(secret_key.encode("utf-8"), data, "sha1")).decode("ascii")


def sign(ext: dict[str, str], body: bytes | None, access_key: str, secret_key: str,
         security_token: str | None = None) -> None:
    """Add AccessKey (SecurityToken) and Signature to ``ext`` in place, as AclClientRPCHook does."""
    ext.pop(SIGNATURE, None)
    ext[ACCESS_KEY] = access_key
    if security_token:
        ext[SECURITY_TOKEN] = security_token
    ext[SIGNATURE] = signature(ext, body, secret_key)


def verify(ext: Mapping[str, str], body: bytes | None, secret_key: str) -> bool:
    """Constant-time check of a request's Signature. A ``_UNIQUE_KEY_QUERY`` field may be outside
    the signature (Java clients up to 4.9.3 left it out) or inside it (4.9.4+): both are accepted."""
    given = ext.get(SIGNATURE)
    if not given:
        return False
    if hmac.compare_digest(signature(ext, body, secret_key).encode(), given.encode()):
        return True
    if UNIQUE_KEY_QUERY in ext:
        alt = signature(ext, body, secret_key, skip=frozenset((UNIQUE_KEY_QUERY,)))
        return hmac.compare_digest(alt.encode(), given.encode())
    return False
