"""Topic routes from the name server, and the queue lists producers and consumers derive from them."""

from __future__ import annotations

import json
import re
from typing import Any

import attrs

from rmq.kernel.model import MessageQueue

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
MASTER_ID = 0

_UNQUOTED_KEY = re.compile(r'([{,])\s*(-?\d+)\s*:')


def loads_lenient(body: bytes | str) -> Any:
    """JSON as RocketMQ writes it: fastjson may leave numeric map keys unquoted (``{0:"addr"}``)."""
    text = body.decode("utf-8") if isinstance(body, (bytes, bytearray)) else body
    try:
        return json.loads(text)
    except ValueError:
        return json.loads(_UNQUOTED_KEY.sub(r'\1"\2":', text))


@attrs.frozen(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@attrs.frozen(slots=True)
class BrokerData:
    broker_name: str
    cluster: str
    addrs: dict[int, str]

    @property
    def master_addr(self) -> str | None:
        return self.addrs.get(MASTER_ID)

    def any_addr(self) -> str | None:
        """Master first, else the lowest-id slave (reads may go to slaves)."""
        if MASTER_ID in self.addrs:
            return self.addrs[MASTER_ID]
        return self.addrs[min(self.addrs)] if self.addrs else None


@attrs.frozen(slots=True)
class TopicRoute:
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    @classmethod
    def parse(cls, body: bytes | str) -> TopicRoute:
        d = loads_lenient(body)
        qds = tuple(
            sorted(
                (
                    QueueData(
                        broker_name=q["brokerName"],
                        read_queue_nums=int(q.get("readQueueNums", 0)),
                        write_queue_nums=int(q.get("writeQueueNums", 0)),
                        perm=int(q.get("perm", 6)),
                        topic_sys_flag=int(q.get("topicSysFlag", q.get("topicSynFlag", 0)) or 0),
                    )
                    for q in d.get("queueDatas") or ()
                ),
                key=lambda q: q.broker_name,
            )
        )
        bds = tuple(
            sorted(
                (
                    BrokerData(
                        broker_name=b["brokerName"],
                        cluster=b.get("cluster", ""),
                        addrs={int(k): v for k, v in (b.get("brokerAddrs") or {}).items()},
                    )
                    for b in d.get("brokerDatas") or ()
                ),
                key=lambda b: b.broker_name,
            )
        )
        return cls(qds, bds, d.get("orderTopicConf") or None)

    def broker(self, broker_name: str) -> BrokerData | None:
        for b in self.broker_datas:
            if b.broker_name == broker_name:
                return b
        return None

    def publish_queues(self, topic: str, max_queue_nums: int | None = None) -> list[MessageQueue]:
        """Writable queues of brokers with a master, by broker name then id (producer side)."""
        out: list[MessageQueue] = []
        if self.order_topic_conf:  # "brokerName:queueNum;..." fixes the order-topic layout
            for item in self.order_topic_conf.split(";"):
                name, _, n = item.partition(":")
                if name and n.isdigit():
                    out.extend(MessageQueue(topic, name, i) for i in range(int(n)))
            return out
        for qd in self.queue_datas:
            if not qd.perm & PERM_WRITE:
                continue
            bd = self.broker(qd.broker_name)
            if bd is None or bd.master_addr is None:
                continue
            n = qd.write_queue_nums if max_queue_nums is None else min(max_queue_nums, qd.read_queue_nums)
            out.extend(MessageQueue(topic, qd.broker_name, i) for i in range(n))
        return out

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """Readable queues (consumer side), sorted like RocketMQ sorts them for allocation."""
        out = [
            MessageQueue(topic, qd.broker_name, i)
            for qd in self.queue_datas
            if qd.perm & PERM_READ
            for i in range(qd.read_queue_nums)
        ]
        out.sort()
        return out
