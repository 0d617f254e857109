"""The commitlog record layout (RocketMQ 4.9 MessageExt, reference §1.1): one declaration for every reader.

The store writes records with it, the broker's schedule service and the Spark decoder read
fields out of stored bytes with it, and the client decodes pulled records with it. A record:

    TOTALSIZE i, MAGIC i, BODYCRC i, QUEUEID i, FLAG i, QUEUEOFFSET q, PHYSICALOFFSET q,
    SYSFLAG i, BORNTIMESTAMP q, BORNHOST 8s|20s, STORETIMESTAMP q, STOREHOST 8s|20s,
    RECONSUMETIMES i, PREPAREDTRANSACTIONOFFSET q, BODYLENGTH i, BODY,
    TOPICLENGTH B, TOPIC, PROPERTIESLENGTH h, PROPERTIES

Hosts are 8 bytes (IPv4 + port) or 20 (IPv6 + port) by SYSFLAG bits 0x10 (born) and 0x20
(store). The structs are precompiled once here; the hot paths keep using ``pack_into`` /
``unpack_from`` with them, the change is only where they are declared.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from rmq.protocol.common import SysFlag

__all__ = [
    "BORN_HOST",
    "BORN_TIMESTAMP",
    "HEAD",
    "HEAD2",
    "HEADERS",
    "MIN_RECORD",
    "PHYSICAL_OFFSET",
    "QUEUE_OFFSET",
    "SYS_FLAG",
    "TAIL",
    "born_host_width",
    "physical_offset_at",
    "queue_offset_at",
    "reconsume_times_pos",
    "store_host_width",
    "store_timestamp_at",
]

# named offsets of the fixed part (the same for every host width)
TOTAL_SIZE: Final = 0
MAGIC: Final = 4
BODY_CRC: Final = 8
QUEUE_ID: Final = 12
FLAG: Final = 16
QUEUE_OFFSET: Final = 20
PHYSICAL_OFFSET: Final = 28
SYS_FLAG: Final = 36
BORN_TIMESTAMP: Final = 40
BORN_HOST: Final = 48

#: TOTALSIZE through BODYLENGTH, one struct per (born host width, store host width)
HEADERS: Final = {(b, s): struct.Struct(f">iiiiiqqiq{b}sq{s}siqi") for b in (8, 20) for s in (8, 20)}
#: TOTALSIZE through BORNTIMESTAMP (the part before the first host)
HEAD: Final = struct.Struct(">iiiiiqqiq")
#: TOTALSIZE, MAGIC (also the end-of-segment blank record)
HEAD2: Final = struct.Struct(">ii")
#: RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLENGTH (after the store host)
TAIL: Final = struct.Struct(">iqi")
#: fixed bytes of a record with two IPv4 hosts (empty body, topic and properties): RocketMQ's 91
MIN_RECORD: Final = HEADERS[(8, 8)].size + 1 + 2

_Q = struct.Struct(">q")
_I = struct.Struct(">i")


def born_host_width(sys_flag: int) -> int:
    return 20 if sys_flag & SysFlag.BORNHOST_V6 else 8


def store_host_width(sys_flag: int) -> int:
    return 20 if sys_flag & SysFlag.STOREHOST_V6 else 8


def store_timestamp_at(buf: Any, pos: int) -> int:
    """STORETIMESTAMP of the record at ``pos`` (its place depends on the born host's width)."""
    (sys_flag,) = _I.unpack_from(buf, pos + SYS_FLAG)
    return _Q.unpack_from(buf, pos + BORN_HOST + born_host_width(sys_flag))[0]  # type: ignore[no-any-return]


def reconsume_times_pos(buf: Any, pos: int) -> int:
    """Where RECONSUMETIMES of the record at ``pos`` is (after both hosts, whose widths vary)."""
    (sys_flag,) = _I.unpack_from(buf, pos + SYS_FLAG)
    return pos + BORN_HOST + born_host_width(sys_flag) + 8 + store_host_width(sys_flag)


def queue_offset_at(buf: Any, pos: int) -> int:
    return _Q.unpack_from(buf, pos + QUEUE_OFFSET)[0]  # type: ignore[no-any-return]


def physical_offset_at(buf: Any, pos: int) -> int:
    return _Q.unpack_from(buf, pos + PHYSICAL_OFFSET)[0]  # type: ignore[no-any-return]
