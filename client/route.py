"""Topic routes from the name server, and the queue lists producers and consumers derive from them."""

from __future__ import annotations

from typing import Any

import attrs

from rmq.client.errors import BadResponseError
from rmq.kernel.model import MessageQueue
from rmq.protocol import jsonbody

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
MASTER_ID = 0
#: More queues than this in one route is not a topic but an attack on our memory (each is an object).
MAX_QUEUE_NUMS = 1 << 16


def loads_lenient(body: bytes | str, what: str = "response body") -> Any:
    """A peer's JSON as RocketMQ writes it (fastjson may leave numeric map keys unquoted: ``{0:"addr"}``).

    Strict otherwise (:mod:`rmq.protocol.jsonbody`: no NaN/Infinity, bounded nesting and
    numbers); anything else raises :class:`BadResponseError`.
    """
    try:
        return jsonbody.loads(body)
    except jsonbody.JsonError as exc:
        raise BadResponseError(f"{what} is not valid JSON: {exc}") from None


def json_object(body: bytes | str, what: str) -> dict[str, Any]:
    """``body`` as a JSON object (an empty body is ``{}``), or BadResponseError."""
    if not body:
        return {}
    doc = loads_lenient(body, what)
    if type(doc) is not dict:
        raise BadResponseError(f"{what} is a JSON {type(doc).__name__}, not an object")
    return doc


def json_int(value: Any, what: str, lo: int = -(1 << 31), hi: int = (1 << 31) - 1) -> int:
    """A number from a peer's JSON (fastjson writes ints; stringified ones are accepted), range-checked."""
    if type(value) is str:
        digits = value[1:] if value[:1] == "-" else value
        if digits.isdigit() and digits.isascii() and len(digits) <= 19:
            value = int(value)
    if type(value) is not int or not lo <= value <= hi:
        raise BadResponseError(f"{what} is not an integer in [{lo}, {hi}]: {value!r:.60}")
    return value


def _str(value: Any, what: str) -> str:
    if type(value) is not str:
        raise BadResponseError(f"{what} is not a string: {value!r:.60}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if type(value) is not list:
        raise BadResponseError(f"{what} is not a list")
    return value


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
        """A GET_ROUTEINFO_BY_TOPIC body (either key style); malformed → :class:`BadResponseError`."""
        d = json_object(body, "route")
        qds = []
        for q in _list(d.get("queueDatas"), "route queueDatas"):
            if type(q) is not dict:
                raise BadResponseError("route queueDatas holds a non-object")
            qds.append(
                QueueData(
                    broker_name=_str(q.get("brokerName"), "route brokerName"),
                    read_queue_nums=json_int(q.get("readQueueNums", 0), "route readQueueNums", 0, MAX_QUEUE_NUMS),
                    write_queue_nums=json_int(q.get("writeQueueNums", 0), "route writeQueueNums", 0, MAX_QUEUE_NUMS),
                    perm=json_int(q.get("perm", 6), "route perm"),
                    topic_sys_flag=json_int(q.get("topicSysFlag", q.get("topicSynFlag", 0)) or 0, "route topicSysFlag"),
                )
            )
        bds = []
        for b in _list(d.get("brokerDatas"), "route brokerDatas"):
            if type(b) is not dict:
                raise BadResponseError("route brokerDatas holds a non-object")
            addrs = b.get("brokerAddrs") or {}
            if type(addrs) is not dict:
                raise BadResponseError("route brokerAddrs is not an object")
            bds.append(
                BrokerData(
                    broker_name=_str(b.get("brokerName"), "route brokerName"),
                    cluster=_str(b.get("cluster", ""), "route cluster"),
                    addrs={
                        json_int(k, "route broker id", -(1 << 63), (1 << 63) - 1): _str(v, "route broker address")
                        for k, v in addrs.items()
                    },
                )
            )
        order = d.get("orderTopicConf") or None
        return cls(
            tuple(sorted(qds, key=lambda q: q.broker_name)),
            tuple(sorted(bds, key=lambda b: b.broker_name)),
            None if order is None else _str(order, "route orderTopicConf"),
        )

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
                if name and n.isdigit() and n.isascii() and len(n) <= 6 and int(n) <= MAX_QUEUE_NUMS:
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
