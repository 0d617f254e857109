"""Value types that cross plugin boundaries (store, broker, client, allocators).

Plain attrs slots classes: cheap to build on the hot path, typed, comparable.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

import attrs

from rmq.protocol.common import encode_properties, set_props
from rmq.protocol.message import MessageExt, host_bytes


@attrs.frozen(order=True, slots=True)
class MessageQueue:
    """One queue of a topic on one broker; sorts by topic, broker, queue id (as RocketMQ)."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:  # the key string RocketMQ's consistent hashing uses
        return f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, queueId={self.queue_id}]"


@attrs.define(slots=True)
class MessageRecord:
    """A message as handed to the store: everything the commitlog record needs but offsets.

    ``properties`` is the already-encoded ``k\\x01v\\x02`` string (the broker receives it that
    way and never needs the dict); ``born_host``/``store_host`` are the 8-byte IPv4 forms
    (4 address bytes + big-endian int32 port) or 20-byte IPv6 forms.
    """

    topic: str
    queue_id: int
    body: bytes
    flag: int = 0
    properties: str = ""
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    reconsume_times: int = 0
    prepared_tx_offset: int = 0
    store_timestamp: int = 0  # 0 = the store stamps it; a transaction commit copies the half's
    # False: answered once appended whatever its WAIT says (no sync flush, no slave wait), as RocketMQ's
    # setWaitStoreMsgOK(false) after the properties were encoded: a renewed half keeps its stored WAIT
    waits: bool = True


class PutStatus(enum.IntEnum):
    PUT_OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3
    SERVICE_NOT_AVAILABLE = 4
    CREATE_MAPPED_FILE_FAILED = 5
    MESSAGE_ILLEGAL = 6
    PROPERTIES_SIZE_EXCEEDED = 7
    OS_PAGECACHE_BUSY = 8
    UNKNOWN_ERROR = 9
    # RocketMQ 5 timer messages (the timer plugin's refusals)
    WHEEL_TIMER_FLOW_CONTROL = 10
    WHEEL_TIMER_MSG_ILLEGAL = 11
    WHEEL_TIMER_NOT_ENABLE = 12


@attrs.define(slots=True)
class PutResult:
    """Outcome of a put. For a batch, ``physical_offsets`` lists every record's offset."""

    status: PutStatus
    wrote_offset: int = -1
    wrote_bytes: int = 0
    queue_offset: int = -1
    msg_count: int = 0
    store_timestamp: int = 0
    physical_offsets: Sequence[int] = ()
    remark: str = ""
    durable_at: int = 0  # put_message_nowait: the answer waits until ``store.durable`` reaches this

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK


class GetStatus(enum.IntEnum):
    FOUND = 0
    NO_MATCHED_MESSAGE = 1
    MESSAGE_WAS_REMOVING = 2
    OFFSET_FOUND_NULL = 3
    OFFSET_OVERFLOW_BADLY = 4
    OFFSET_OVERFLOW_ONE = 5
    OFFSET_TOO_SMALL = 6
    NO_MATCHED_LOGIC_QUEUE = 7
    NO_MESSAGE_IN_QUEUE = 8


@attrs.define(slots=True)
class GetResult:
    """A slice of one queue. ``messages`` are whole stored records (bytes-like, caller may keep)."""

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[bytes] = attrs.field(factory=list)
    queue_offsets: list[int] = attrs.field(factory=list)
    total_size: int = 0


@attrs.define(slots=True)
class DispatchRequest:
    """One stored record as dispatchers see it (built by the reput loop, never by plugins)."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    sys_flag: int = 0
    prepared_tx_offset: int = 0
    keys: str | None = None
    uniq_key: str | None = None
    properties: dict[str, str] = attrs.field(factory=dict)


def record_of(
    msg: MessageExt,
    topic: str,
    queue_id: int,
    changes: Mapping[str, str | None],
    *,
    sys_flag: int | None = None,
    reconsume_times: int | None = None,
    prepared_tx_offset: int | None = None,
) -> MessageRecord:
    """A stored message put again elsewhere (retry, DLQ, a due delayed message).

    Body, flag, born time and host and the prepared offset carry over; ``changes`` edits
    the properties (None removes one, see ``set_props``), the others keep their order.
    """
    ip, _, port = msg.born_host.rpartition(":")
    return MessageRecord(
        topic=topic,
        queue_id=queue_id,
        body=msg.body,
        flag=msg.flag,
        properties=set_props(encode_properties(msg.properties), changes),
        sys_flag=msg.sys_flag if sys_flag is None else sys_flag,
        born_timestamp=msg.born_timestamp,
        born_host=host_bytes(ip.strip("[]"), int(port)),
        reconsume_times=msg.reconsume_times if reconsume_times is None else reconsume_times,
        prepared_tx_offset=msg.prepared_transaction_offset if prepared_tx_offset is None else prepared_tx_offset,
    )
