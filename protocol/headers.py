"""Send-request header normalisation: codes 10, 310, 320 → one dict of long field names (§3.1, §3.2).

The broker's send processor reads one spelling whatever the client used: Java
V2 letters, C++ long names with "0"/"1" booleans, client A letters with native
JSON types (already stringified by the frame decoder).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple

from rmq.protocol.codes import RequestCode

__all__ = ["SEND_LONG", "SEND_V2", "SEND_V2_CODES", "SEND_V2_KEYS", "SendKeys", "send_header_from_ext"]


class SendKeys(NamedTuple):
    """The header keys of a send request, by field: one table for the broker and the client.

    ``SEND_LONG`` is SendMessageRequestHeader's spelling (code 10, C++ 1.2.3), ``SEND_V2`` the
    single letters of SendMessageRequestHeaderV2 (codes 310, 320, 325). A reader picks the
    table by request code and reads ``ext[keys.topic]``.
    """

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: str
    queue_id: str
    sys_flag: str
    born_timestamp: str
    flag: str
    properties: str
    reconsume_times: str
    unit_mode: str
    max_reconsume_times: str
    batch: str
    broker_name: str


SEND_LONG: Final = SendKeys(
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
    "flag", "properties", "reconsumeTimes", "unitMode", "maxReconsumeTimes", "batch", "bname",
)
SEND_V2: Final = SendKeys(*"abcdefghijklmn")
SEND_V2_KEYS: Final[Mapping[str, str]] = dict(zip(SEND_V2, SEND_LONG, strict=True))

SEND_V2_CODES: Final = frozenset((RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
                                  RequestCode.SEND_REPLY_MESSAGE_V2))
_TRUE: Final = frozenset(("true", "1"))


def send_header_from_ext(code: int, ext: Mapping[str, str]) -> dict[str, str]:
    """Long-name header of a send request; unknown keys (ACL keys, extras) pass through.

    ``batch`` is rewritten to ``"true"``/``"false"``: true for code 320 or a
    ``batch`` of ``true``/``1`` (C++ 1.2.3 batches via code 10 + ``batch:"1"``).
    """
    if code in SEND_V2_CODES:
        out = {SEND_V2_KEYS.get(k, k): v for k, v in ext.items()}
    else:
        out = dict(ext)
    batch = code == RequestCode.SEND_BATCH_MESSAGE or out.get("batch", "").lower() in _TRUE
    out["batch"] = "true" if batch else "false"
    return out

#: ms: how recent a majority's answer must be for a controller leader to answer a poll; a master's lease
#: (``controllerHeartBeatTimeoutMills`` less this) and the controller's wait before replacing a master it
#: has not heard are both built on it, so the two must agree (rmq's controller and broker share it)
CONTROLLER_LEASE_READ_MS = 500
