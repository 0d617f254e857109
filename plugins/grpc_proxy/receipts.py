"""Receipt handles of the gRPC endpoint: the broker's POP receipt (``startOffset popTime invisibleTime
reviveQid topicType brokerName queueId queueOffset``) with a MAC of this broker's bound to the group
and topic, so only handles it issued are acted on (the 5.x proxy hands out the broker's receipt
as is; a peer here cannot make one up for another group or topic)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

_INT = re.compile(r"-?[0-9]{1,19}")


class Receipts:
    """Seals and opens receipt handles with one key (a new one per start: handles from before a
    restart are refused)."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def _mac(self, group: str, topic: str, handle: str) -> str:
        data = f"{group}\n{topic}\n{handle}".encode()
        return hmac.new(self._key, data, hashlib.sha256).hexdigest()[:32]

    def seal(self, group: str, topic: str, handle: str) -> str:
        """A receipt handle bound to its group and topic: the POP receipt and its MAC."""
        return f"{handle} {self._mac(group, topic, handle)}"

    def unseal(self, group: str, topic: str, sealed: str) -> list[str] | None:
        """The POP receipt's fields of a handle this broker issued for this group and topic, else None
        (forged, altered, another group's or topic's, or from before a restart)."""
        handle, _, mac = sealed.rpartition(" ")
        # bytes: compare_digest raises TypeError on str with non-ASCII characters (a peer chooses them)
        given = mac.encode("utf-8", "surrogatepass")
        if not handle or len(mac) != 32 or not hmac.compare_digest(self._mac(group, topic, handle).encode(), given):
            return None
        parts = handle.split(" ")
        return parts if len(parts) == 8 and all(_INT.fullmatch(parts[i]) for i in (0, 1, 2, 3, 6, 7)) else None
