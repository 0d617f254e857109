"""Send-header normalisation (§3.1, §3.2): V2 letters, batch flag spellings."""

from __future__ import annotations

import json
import struct

from rmq.protocol.codes import RequestCode
from rmq.protocol.frame import decode
from rmq.protocol.headers import SEND_V2_KEYS, send_header_from_ext


def test_v2_letters_cover_a_to_n() -> None:
    assert list(SEND_V2_KEYS) == [chr(c) for c in range(ord("a"), ord("n") + 1)]
    assert SEND_V2_KEYS["b"] == "topic" and SEND_V2_KEYS["n"] == "bname"


def test_v2_client_a_native_types() -> None:
    header = {
        "code": 310, "flag": 0, "language": "JAVA", "opaque": 1, "version": 121,
        "extFields": {"a": "PG", "b": "T", "c": "TBW102", "d": 4, "e": 2, "f": 0, "g": 1700000000000,
                      "h": 0, "i": "TAGS\x01x", "j": 0, "k": False, "l": 16},
    }
    hdr = json.dumps(header).encode()
    cmd = decode(struct.pack(">iI", 4 + len(hdr), len(hdr)) + hdr)
    out = send_header_from_ext(cmd.code, cmd.ext)
    assert out == {
        "producerGroup": "PG", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": "2", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
        "properties": "TAGS\x01x", "reconsumeTimes": "0", "unitMode": "false", "maxReconsumeTimes": "16",
        "batch": "false",
    }


def test_batch_spellings() -> None:
    assert send_header_from_ext(RequestCode.SEND_BATCH_MESSAGE, {"b": "T"})["batch"] == "true"
    assert send_header_from_ext(RequestCode.SEND_MESSAGE_V2, {"m": "true"})["batch"] == "true"
    assert send_header_from_ext(RequestCode.SEND_MESSAGE_V2, {"m": "false"})["batch"] == "false"
    assert send_header_from_ext(RequestCode.SEND_MESSAGE, {"batch": "1"})["batch"] == "true"  # C++ 1.2.3
    assert send_header_from_ext(RequestCode.SEND_MESSAGE, {"batch": "TRUE"})["batch"] == "true"
    assert send_header_from_ext(RequestCode.SEND_MESSAGE, {"batch": "0"})["batch"] == "false"
    assert send_header_from_ext(RequestCode.SEND_MESSAGE, {})["batch"] == "false"


def test_code_10_keeps_long_names_and_extra_keys() -> None:
    ext = {"topic": "T", "a": "not-a-letter-field-for-code-10", "AccessKey": "", "Signature": ""}
    out = send_header_from_ext(RequestCode.SEND_MESSAGE, ext)
    assert out["topic"] == "T" and out["a"] == ext["a"] and out["AccessKey"] == ""
    assert ext == {"topic": "T", "a": "not-a-letter-field-for-code-10", "AccessKey": "", "Signature": ""}
