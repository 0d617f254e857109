"""rmq.client — a pure-Python, asyncio-native (anyio) RocketMQ 4.x client.

    from rmq.client import Message, Producer

    async with Producer("my-group", namesrv_addr="127.0.0.1:9876") as p:
        result = await p.send(Message("TopicTest", b"hello", tags="TagA", keys="k1"))

Async classes here; the same names with blocking methods live in ``rmq.client.blocking``.
"""

from rmq.client.admin import Admin, ClusterInfo, QueueProgress, TopicQueueStats
from rmq.client.errors import (
    BrokerError,
    ClientError,
    ClientStateError,
    MessageTooLargeError,
    NameServerError,
    NoRouteError,
    RequestTimeoutError,
    SendError,
)
from rmq.client.message import (
    ConsumeResult,
    LocalTransactionState,
    Message,
    MessageExt,
    MessageQueue,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
    create_reply_message,
)
from rmq.client.producer import Producer
from rmq.client.pull import LitePullConsumer, PullConsumer
from rmq.client.push import PushConsumer
from rmq.client.selector import HashSelector, RandomSelector, RoundRobinSelector
from rmq.client.simple import SimpleConsumer, delivery_attempt
from rmq.client.transaction import TransactionProducer, TransactionSendResult

__all__ = [
    "Admin",
    "BrokerError",
    "ClientError",
    "ClientStateError",
    "ClusterInfo",
    "ConsumeResult",
    "HashSelector",
    "LitePullConsumer",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageQueue",
    "MessageTooLargeError",
    "NameServerError",
    "NoRouteError",
    "Producer",
    "PullConsumer",
    "SimpleConsumer",
    "PullResult",
    "PullStatus",
    "delivery_attempt",
    "PushConsumer",
    "QueueProgress",
    "RandomSelector",
    "RoundRobinSelector",
    "RequestTimeoutError",
    "SendError",
    "create_reply_message",
    "SendResult",
    "SendStatus",
    "TopicQueueStats",
    "TransactionProducer",
    "TransactionSendResult",
]
