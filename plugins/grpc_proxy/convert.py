"""A stored message as the gRPC ``Message`` a 5.x client reads (the proxy's GrpcConverter): system
properties from the remoting properties, the rest as user properties."""

from __future__ import annotations

import hashlib

from google.protobuf import duration_pb2

from rmq.plugins.grpc_proxy.common import ts
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.protocol.message import MessageExt

SYSTEM_KEYS = frozenset((
    "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
    "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
    "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET",
    "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID", "CORRELATION_ID",
    "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET",
    "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
    "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL", "__BORNHOST", "BORN_TIMESTAMP",
    "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "__CRC32#", "__SHARDINGKEY", "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "TRANSACTION_CHECK_TIMES", "RECALL_HANDLE",
))


def to_message(m: MessageExt, handle: str = "", invisible: int = 0) -> d.Message:
    """``m`` for a client; with ``handle`` (a sealed receipt) and its invisible time when received by POP."""
    props = m.properties
    sp = d.SystemProperties(
        message_id=props.get("UNIQ_KEY") or m.msg_id or "",
        body_digest=d.Digest(type=d.MD5, checksum=hashlib.md5(m.body).hexdigest().upper()),  # noqa: S324 - as the proxy
        body_encoding=d.IDENTITY,
        born_timestamp=ts(m.born_timestamp), born_host=m.born_host.rpartition(":")[0] or m.born_host,
        store_timestamp=ts(m.store_timestamp), store_host=m.store_host,
        queue_id=m.queue_id, queue_offset=m.queue_offset, delivery_attempt=m.reconsume_times + 1)
    if props.get("TAGS"):
        sp.tag = props["TAGS"]
    if props.get("KEYS"):
        sp.keys.extend(k for k in props["KEYS"].split(" ") if k)
    if props.get("__SHARDINGKEY"):
        sp.message_group = props["__SHARDINGKEY"]
        sp.message_type = d.FIFO
    elif props.get("TIMER_DELIVER_MS") or props.get("TIMER_OUT_MS"):
        sp.message_type = d.DELAY
        sp.delivery_timestamp.CopyFrom(ts(int(props.get("TIMER_DELIVER_MS") or props["TIMER_OUT_MS"])))
    elif props.get("TRAN_MSG") == "true":
        sp.message_type = d.TRANSACTION
    else:
        sp.message_type = d.NORMAL
    if handle:
        sp.receipt_handle = handle
        sp.invisible_duration.CopyFrom(duration_pb2.Duration(seconds=invisible // 1000))
    user = {k: v for k, v in props.items() if k not in SYSTEM_KEYS}
    return d.Message(topic=d.Resource(name=props.get("REAL_TOPIC") or m.topic), user_properties=user,
                     system_properties=sp, body=m.body)
