"""Send-request header normalisation: codes 10, 310, 320 → one dict of long field names (§3.1, §3.2).

The broker's send processor reads one spelling whatever the client used: Java
V2 letters, C++ long names with "0"/"1" booleans, client A letters with native
JSON types (already stringified by the frame decoder).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from rmq.protocol.codes import RequestCode

__all__ = ["SEND_V2_KEYS", "send_header_from_ext"]

SEND_V2_KEYS: Final[Mapping[str, str]] = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "bname",
}

_V2_CODES: Final = frozenset((RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
                              RequestCode.SEND_REPLY_MESSAGE_V2))
_TRUE: Final = frozenset(("true", "1"))


def send_header_from_ext(code: int, ext: Mapping[str, str]) -> dict[str, str]:
    """Long-name header of a send request; unknown keys (ACL keys, extras) pass through.

    ``batch`` is rewritten to ``"true"``/``"false"``: true for code 320 or a
    ``batch`` of ``true``/``1`` (C++ 1.2.3 batches via code 10 + ``batch:"1"``).
    """
    if code in _V2_CODES:
        out = {SEND_V2_KEYS.get(k, k): v for k, v in ext.items()}
    else:
        out = dict(ext)
    batch = code == RequestCode.SEND_BATCH_MESSAGE or out.get("batch", "").lower() in _TRUE
    out["batch"] = "true" if batch else "false"
    return out
