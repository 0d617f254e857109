"""Primitives every layer needs: magic codes, flag bits, property names, the Java hash.

They live here (not in the store or the client) so that the broker, the store
and the client agree on one definition of each fact.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

MAGIC_MESSAGE = -626843481  # 0xDAA320A7 as a signed int32
MAGIC_BLANK = -875286124  # 0xCBD43194 as a signed int32
NAME_VALUE_SEP = "\x01"
PROPERTY_SEP = "\x02"
MAX_TOPIC_BYTES = 127
MAX_PROPERTIES_BYTES = 32767


class SysFlag:
    """Message sysFlag bits (record field 8)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TX_NOT = 0x0
    TX_PREPARED = 0x4
    TX_COMMIT = 0x8
    TX_ROLLBACK = 0xC
    TX_MASK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20


class Perm:
    """Topic / broker permission bits (``perm``, ``brokerPermission``)."""

    PRIORITY = 8
    READ = 4
    WRITE = 2
    INHERIT = 1
    READ_WRITE = READ | WRITE


class PullFlag:
    """PULL_MESSAGE ``sysFlag`` bits."""

    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2
    SUBSCRIPTION = 0x4
    CLASS_FILTER = 0x8


class Prop:
    """System property names, spelled as RocketMQ 4.9 spells them."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT = "WAIT"
    DELAY = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    TRAN_MSG = "TRAN_MSG"
    PGROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    UNIQ_KEY = "UNIQ_KEY"
    CONSUME_START_TIME = "CONSUME_START_TIME"
    TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    CLUSTER = "CLUSTER"
    MSG_REGION = "MSG_REGION"
    TRACE_ON = "TRACE_ON"
    SHARDING_KEY = "__SHARDINGKEY"


def java_hash(s: str) -> int:
    """Java ``String.hashCode``: 31*h + unit over UTF-16 code units, signed int32."""
    h = 0
    if s.isascii():
        for c in s.encode("ascii"):
            h = (31 * h + c) & 0xFFFFFFFF
    else:
        data = s.encode("utf-16-be")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


@lru_cache(maxsize=8192)
def tags_code(tags: str | None) -> int:
    """Consume-queue tags code of a TAGS value (0 when absent); cached, tags repeat."""
    return java_hash(tags) if tags else 0


def encode_properties(props: Mapping[str, str]) -> str:
    """``k\\x01v\\x02...`` without a trailing separator (4.9.3+ style); empty values dropped."""
    return PROPERTY_SEP.join(
        f"{k}{NAME_VALUE_SEP}{v}" for k, v in props.items() if k and v is not None and v != ""
    )


def decode_properties(raw: str | bytes | memoryview) -> dict[str, str]:
    """Parse both trailing styles; pairs with an empty name or value are dropped."""
    if not isinstance(raw, str):
        raw = bytes(raw).decode("utf-8", "replace")
    out: dict[str, str] = {}
    if not raw:
        return out
    for item in raw.split(PROPERTY_SEP):
        k, sep, v = item.partition(NAME_VALUE_SEP)
        if sep and k and v:
            out[k] = v
    return out


def prop_value(props: str, name: str) -> str | None:
    """One property of an encoded properties string, without decoding the rest (the put path's need)."""
    key = name + NAME_VALUE_SEP
    i = props.find(key)
    while i > 0 and props[i - 1] != PROPERTY_SEP:
        i = props.find(key, i + 1)
    if i < 0:
        return None
    start = i + len(key)
    end = props.find(PROPERTY_SEP, start)
    return props[start:] if end < 0 else props[start:end]


def waits_for_store(props: str) -> bool:
    """Java's ``Message.isWaitStoreMsgOK`` over an encoded properties string: True without WAIT or with
    WAIT "true" in any case (``Boolean.parseBoolean``). False: the put is answered once appended, with no
    sync-flush and no slave wait (4.9's handleDiskFlush / handleHA, 5.x's needHandleHA); RocketMQ's own
    internal puts (send-back, transaction ops, timers) say so to keep a missing slave from failing them."""
    if "WAIT\x01" not in props:
        return True
    v = prop_value(props, "WAIT")
    return v is None or v.lower() == "true"


def set_props(props: str, values: Mapping[str, str | None]) -> str:
    """Replace/add/remove (value None or "") properties in an encoded string, keeping the others' order."""
    out = []
    seen = set()
    for item in props.split(PROPERTY_SEP):
        if not item:
            continue
        k, sep, v = item.partition(NAME_VALUE_SEP)
        if not sep:
            continue
        if k in values:
            seen.add(k)
            nv = values[k]
            if nv is not None and nv != "":
                out.append(f"{k}{NAME_VALUE_SEP}{nv}")
        elif v:
            out.append(item)
    for k, nv in values.items():
        if k not in seen and nv is not None and nv != "":
            out.append(f"{k}{NAME_VALUE_SEP}{nv}")
    return PROPERTY_SEP.join(out)


def properties_problem(props: str) -> str | None:
    """None when ``props`` is a well-formed properties string (``k\\x01v\\x02…``), else what is wrong.

    Empty values are legal (Java clients write ``KEYS\\x01`` for an empty key) and so are empty
    items. Java drops malformed pairs silently; a broker refuses them, so that what is stored is
    exactly what every reader will parse. The common case costs a few C-level counts.
    """
    if not props:
        return None
    items = props.count(PROPERTY_SEP) + 1 - (props[-1] == PROPERTY_SEP)
    if (
        props.count(NAME_VALUE_SEP) == items
        and props[0] not in "\x01\x02"
        and "\x02\x02" not in props
        and "\x02\x01" not in props
    ):
        return None
    for item in props.split(PROPERTY_SEP):
        if not item:
            continue
        name, sep, value = item.partition(NAME_VALUE_SEP)
        if not sep or not name:
            return f"a property has no name/value separator or no name: {item[:60]!r}"
        if NAME_VALUE_SEP in value:
            return f"property {name[:60]!r} holds more than one name/value separator"
    return None


def real_destination(props: Mapping[str, str], parking: tuple[str, ...]) -> tuple[str, int] | None:
    """Where a parked message (a delay level, a timer) is re-put: its ``REAL_TOPIC`` and ``REAL_QID``.

    None when either is missing or not a queue id, or the topic is one of the ``parking`` topics
    (a message whose destination is a parking place would circle for ever)."""
    topic = props.get(Prop.REAL_TOPIC)
    try:
        qid = int(props.get(Prop.REAL_QID, ""))
    except ValueError:
        return None
    if not topic or qid < 0 or topic in parking:
        return None
    return topic, qid
