"""What a broker serves of its store, read over the wire the same way from rmqd and from the Java broker.

Moving a broker between rmqd and Apache RocketMQ (stop one, start the other on its files) or mixing them
in one HA group is right when both serve the same thing; this reader asks a broker for it with the
requests RocketMQ's own tools send (PULL_MESSAGE from every queue's min to max offset, QUERY_MESSAGE by
key, VIEW_MESSAGE_BY_ID by physical offset, and the GET_ALL_* tables a slave syncs), so one snapshot of
each server can be compared field by field. Used by tests/compat/java (store files, replication).
"""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Any

import anyio

from rmq.protocol import jsonbody
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import PullFlag
from rmq.protocol.message import decode_messages

#: a consumer group the reader pulls as; create it (``reader_group_body``) while the store is written,
#: so that the pulls of the snapshot do not add a group to the tables they compare
READER_GROUP = "store_snapshot_reader"
#: the fields of a topic / subscription group RocketMQ 4.9.8 persists (rmqd may add its own)
TOPIC_FIELDS = ("topicName", "readQueueNums", "writeQueueNums", "perm", "topicFilterType", "topicSysFlag",
                "order")
GROUP_FIELDS = ("groupName", "consumeEnable", "consumeFromMinEnable", "consumeBroadcastEnable",
                "retryQueueNums", "retryMaxTimes", "brokerId", "whichBrokerWhenConsumeSlowly",
                "notifyConsumerIdsChangedEnable")
#: queues RocketMQ 4.9.8 writes without a topic config (no pull serves them there; RocketMQ 5 and rmqd give
#: them one): the transaction op queue, read the same way from both servers
UNLISTED_QUEUES = (("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0),)
_PULL_OK, _NOT_FOUND, _RETRY, _MOVED = 0, 19, 20, 21
_LONG_MAX = (1 << 63) - 1


def reader_group_body() -> bytes:
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP's body for :data:`READER_GROUP`."""
    return json.dumps({"groupName": READER_GROUP, "consumeEnable": True, "consumeFromMinEnable": True,
                           "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16,
                       "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
                           "notifyConsumerIdsChangedEnable": True}).encode()


def records(body: bytes) -> list[bytes]:
    """A pull/query body cut into its stored records (each starts with its 4-byte size)."""
    out, pos = [], 0
    while pos + 4 <= len(body):
        (size,) = struct.unpack_from(">i", body, pos)
        out.append(body[pos:pos + size])
        pos += size
    return out


def message_row(raw: bytes) -> dict[str, Any]:
    """One stored record as the fields a client sees, plus a digest of its bytes."""
    m = decode_messages(raw, decompress=False)[0]
    return {"topic": m.topic, "queueId": m.queue_id, "queueOffset": m.queue_offset,
            "commitLogOffset": m.commit_log_offset, "offsetMsgId": m.offset_msg_id, "msgId": m.msg_id,
            "keys": m.keys, "tags": m.tags, "sysFlag": m.sys_flag, "storeSize": m.store_size,
            "bodyCRC": m.body_crc, "storeTimestamp": m.store_timestamp, "bornTimestamp": m.born_timestamp,
            "storeHost": m.store_host, "bornHost": m.born_host, "reconsumeTimes": m.reconsume_times,
            "preparedTransactionOffset": m.prepared_transaction_offset, "properties": dict(m.properties),
            "sha1": hashlib.sha1(raw).hexdigest()}


class StoreReader:
    """One connection to one broker; every method is one kind of question a tool asks."""

    def __init__(self, addr: str, timeout: float = 15.0) -> None:
        self.addr = addr
        self.timeout = timeout
        self.client: Any = None

    async def __aenter__(self) -> StoreReader:
        from rmq.kernel.hookspecs.remoting import RemotingConfig
        from rmq.plugins.remoting_tcp import TcpRemotingClient

        self.client = TcpRemotingClient(RemotingConfig(name="store-snapshot"))
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.__aexit__(*exc)

    async def ask(self, code: int, ext: dict[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
        cmd = RemotingCommand.request(code, {k: str(v) for k, v in (ext or {}).items()}, body)
        return await self.client.invoke(self.addr, cmd, self.timeout)  # type: ignore[no-any-return]

    async def table(self, code: int, key: str) -> dict[str, Any]:
        r = await self.ask(code)
        assert r.code == 0, f"{self.addr} request {code}: {r.code} {r.remark}"
        return jsonbody.loads(r.body)[key]  # type: ignore[no-any-return]

    async def topics(self) -> dict[str, dict[str, Any]]:
        t = await self.table(RequestCode.GET_ALL_TOPIC_CONFIG, "topicConfigTable")
        return {name: {f: c.get(f) for f in TOPIC_FIELDS} for name, c in t.items()}

    async def groups(self) -> dict[str, dict[str, Any]]:
        t = await self.table(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "subscriptionGroupTable")
        return {name: {f: c.get(f) for f in GROUP_FIELDS} for name, c in t.items()}

    async def consumer_offsets(self) -> dict[str, dict[int, int]]:
        t = await self.table(RequestCode.GET_ALL_CONSUMER_OFFSET, "offsetTable")
        return {k: {int(q): int(o) for q, o in v.items()} for k, v in t.items()}

    async def delay_offsets(self) -> dict[int, int]:
        r = await self.ask(RequestCode.GET_ALL_DELAY_OFFSET)
        assert r.code == 0, f"{self.addr} GET_ALL_DELAY_OFFSET: {r.code} {r.remark}"
        return {int(k): int(v) for k, v in jsonbody.loads(r.body)["offsetTable"].items()}

    async def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        r = await self.ask(RequestCode.QUERY_CONSUMER_OFFSET,
                           {"consumerGroup": group, "topic": topic, "queueId": queue_id})
        return int(r.ext["offset"]) if r.code == 0 else None

    async def offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        lo = await self.ask(RequestCode.GET_MIN_OFFSET, {"topic": topic, "queueId": queue_id})
        hi = await self.ask(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": queue_id})
        assert lo.code == 0 and hi.code == 0, f"{self.addr} {topic}/{queue_id}: {lo.remark} {hi.remark}"
        return int(lo.ext["offset"]), int(hi.ext["offset"])

    async def pull_all(self, topic: str, queue_id: int, begin: int, end: int) -> list[bytes]:
        """Every record of the queue from ``begin`` up to ``end`` (exclusive)."""
        out: list[bytes] = []
        offset = begin
        while offset < end:
            r = await self.ask(RequestCode.PULL_MESSAGE, {
                "consumerGroup": READER_GROUP, "topic": topic, "queueId": queue_id, "queueOffset": offset,
                "maxMsgNums": 32, "sysFlag": PullFlag.SUBSCRIPTION, "commitOffset": 0,
                "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0, "expressionType": "TAG"})
            assert r.code in (_PULL_OK, _NOT_FOUND, _RETRY, _MOVED), \
                f"{self.addr} pull {topic}/{queue_id}: {r.code} {r.remark}"
            got = records(r.body) if r.code == _PULL_OK else []
            out.extend(got)
            nxt = int(r.ext.get("nextBeginOffset", offset))
            if nxt <= offset:
                raise AssertionError(f"{self.addr} pull {topic}/{queue_id}@{offset}: no progress ({r.code} {r.remark})")
            offset = nxt
        return out

    async def query_key(self, topic: str, key: str, unique: bool = False) -> list[str]:
        """Offset msgIds QUERY_MESSAGE answers for ``key`` (sorted): the index lookup a tool makes."""
        ext: dict[str, Any] = {"topic": topic, "key": key, "maxNum": 64, "beginTimestamp": 0,
                               "endTimestamp": _LONG_MAX}
        if unique:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        r = await self.ask(RequestCode.QUERY_MESSAGE, ext)
        if r.code != 0:
            return []
        return sorted(message_row(raw)["offsetMsgId"] for raw in records(r.body))

    async def cq_records(self, topic: str, queue_id: int, begin: int, end: int) -> list[bytes]:
        """Records of a queue no topic config lists (RocketMQ's transaction op queue), as ``queryCq``
        and ``viewMessage`` read them: the consume queue's units, then each record by its offset."""
        out: list[bytes] = []
        index = begin
        while index < end:
            r = await self.ask(RequestCode.QUERY_CONSUME_QUEUE, {"topic": topic, "queueId": queue_id,
                                                                  "index": index, "count": min(32, end - index)})
            assert r.code == 0, f"{self.addr} queryCq {topic}/{queue_id}@{index}: {r.code} {r.remark}"
            units = jsonbody.loads(r.body).get("queueData") or []
            assert units, f"{self.addr} queryCq {topic}/{queue_id}@{index}: no units below {end}"
            for u in units:
                out.append(await self.view(int(u["physicOffset"])))
            index += len(units)
        return out

    async def view(self, phy: int) -> bytes:
        r = await self.ask(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phy})
        assert r.code == 0, f"{self.addr} viewMessage {phy}: {r.code} {r.remark}"
        return bytes(r.body)

    async def snapshot(self, topics: list[str] | None = None, views: bool = True) -> dict[str, Any]:
        """Topics, groups, offsets and every message of ``topics`` (default: all the broker has), plus the
        queues of :data:`UNLISTED_QUEUES` (no topic config holds them; RocketMQ writes them all the same)."""
        snap: dict[str, Any] = {"topics": await self.topics(), "groups": await self.groups(),
                                "consumerOffsets": await self.consumer_offsets(),
                                "delayOffsets": await self.delay_offsets()}
        names = sorted(snap["topics"]) if topics is None else topics
        queues: dict[str, list[tuple[int, int]]] = {}
        messages: list[dict[str, Any]] = []
        unlisted = {t for t, _ in UNLISTED_QUEUES}
        for topic in names:
            conf = snap["topics"].get(topic)
            if conf is None or topic in unlisted:
                continue
            qs = []
            for q in range(conf["readQueueNums"]):
                lo, hi = await self.offsets(topic, q)
                qs.append((lo, hi))
                for raw in await self.pull_all(topic, q, lo, hi):
                    row = message_row(raw)
                    if views:
                        assert await self.view(row["commitLogOffset"]) == raw, \
                            f"{self.addr}: viewMessage {row['commitLogOffset']} is not the pulled record"
                    messages.append(row)
            queues[topic] = qs
        for topic, q in UNLISTED_QUEUES:
            if topics is not None and topic not in topics:
                continue
            lo, hi = await self.offsets(topic, q)
            queues[f"{topic}/{q}"] = [(lo, hi)]
            messages.extend(message_row(raw) for raw in await self.cq_records(topic, q, lo, hi))
        snap["queues"] = queues
        snap["messages"] = messages
        keys: dict[str, list[str]] = {}
        for m in messages:
            for key in (m["keys"] or "").split():
                keys.setdefault(f"{m['topic']}#{key}", await self.query_key(m["topic"], key))
            uniq = m["properties"].get("UNIQ_KEY")
            if uniq:
                keys.setdefault(f"{m['topic']}#{uniq}", await self.query_key(m["topic"], uniq, unique=True))
        snap["keys"] = keys
        offsets = {}
        for key, table in snap["consumerOffsets"].items():
            topic, group = key.split("@", 1)
            for q in sorted(table):
                offsets[f"{key}/{q}"] = await self.query_consumer_offset(group, topic, q)
        snap["queriedOffsets"] = offsets
        return snap


def snapshot(addr: str, topics: list[str] | None = None, views: bool = True) -> dict[str, Any]:
    """:meth:`StoreReader.snapshot` from synchronous test code."""
    async def run() -> dict[str, Any]:
        async with StoreReader(addr) as r:
            return await r.snapshot(topics, views)

    return anyio.run(run)  # type: ignore[no-any-return]


def differences(a: dict[str, Any], b: dict[str, Any], names: tuple[str, str] = ("java", "rmqd")) -> list[str]:
    """Every difference between two snapshots, one line each (empty: the same)."""
    out: list[str] = []

    def cmp(path: str, x: Any, y: Any) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y), key=str):
                if k not in y:
                    out.append(f"{path}/{k}: only on {names[0]}: {x[k]!r}"[:400])
                elif k not in x:
                    out.append(f"{path}/{k}: only on {names[1]}: {y[k]!r}"[:400])
                else:
                    cmp(f"{path}/{k}", x[k], y[k])
        elif x != y:
            out.append(f"{path}: {names[0]} {x!r} != {names[1]} {y!r}"[:400])

    for section in sorted(set(a) | set(b)):
        x, y = a.get(section), b.get(section)
        if section == "messages":
            x = {(m["topic"], m["queueId"], m["queueOffset"]): m for m in x or []}
            y = {(m["topic"], m["queueId"], m["queueOffset"]): m for m in y or []}
        cmp(section, x, y)
    return out


# --------------------------------------------------------------------------- writing a store to compare

#: the topics :func:`populate` writes (name, queues); the tables it adds beside them are in its docstring
TOPICS = {"StoreNormal": 4, "StoreOrder": 4, "StoreBatch": 2, "StoreDelay": 2, "StoreTx": 2}
GROUPS = {"store_group_a": {"retryMaxTimes": 3}, "store_group_b": {"consumeBroadcastEnable": False}}
#: delay level whose messages are delivered before the snapshot, and one that stays pending (2 h)
DUE_LEVEL, PENDING_LEVEL = 2, 18
COMMITTED = ROLLED_BACK = 4


def _body(i: int) -> bytes:
    import random

    return random.Random(i).randbytes(10 + (i * 977) % 9000)  # incompressible: sizes spread over segments


async def populate(namesrv_addr: str, broker_addr: str, normal: int = 300) -> dict[str, int]:
    """Write a store through RocketMQ's wire protocol (rmq's Python client): normal keyed messages of
    many sizes, ordered ones (sharding key), batches, delayed ones (:data:`DUE_LEVEL` and
    :data:`PENDING_LEVEL`), committed and rolled-back transactional ones, two subscription groups plus
    :data:`READER_GROUP`, and consumer offsets of both groups. Returns the counts a caller waits for
    (see :func:`settled`)."""
    from rmq.client import (
        Admin,
        LocalTransactionState,
        Message,
        MessageQueue,
        Producer,
        PullConsumer,
        TransactionProducer,
    )

    async with Admin(namesrv_addr) as admin:
        for topic, n in TOPICS.items():
            await admin.create_topic(topic, n, broker_addr=broker_addr, order=topic == "StoreOrder", wait=30)
    async with StoreReader(broker_addr) as r:
        for group, extra in {READER_GROUP: {}, **GROUPS}.items():
            body = json.loads(reader_group_body())
            body.update(groupName=group, **extra)
            resp = await r.ask(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(body).encode())
            assert resp.code == 0, f"create group {group}: {resp.remark}"
    async with Producer("store_producer", namesrv_addr, retry_times=0) as p:
        for i in range(normal):
            await p.send(Message("StoreNormal", _body(i), tags=f"T{i % 3}", keys=[f"k{i}", f"shared{i % 7}"]))
        for i in range(40):
            await p.send(Message("StoreOrder", f"order-{i % 4}-{i}", tags="O", keys=f"order{i % 4}"),
                         sharding_key=i % 4)
        for b in range(3):
            await p.send_batch([Message("StoreBatch", f"batch-{b}-{j}", keys=f"b{b}x{j}") for j in range(10)])
        for i in range(3):
            await p.send(Message("StoreDelay", f"due-{i}", keys=f"due{i}", delay_level=DUE_LEVEL))
            await p.send(Message("StoreDelay", f"pending-{i}", keys=f"pending{i}", delay_level=PENDING_LEVEL))
    async with TransactionProducer("store_tx_producer", namesrv_addr, retry_times=0) as tp:
        for i in range(COMMITTED + ROLLED_BACK):
            state = LocalTransactionState.COMMIT_MESSAGE if i % 2 == 0 else LocalTransactionState.ROLLBACK_MESSAGE
            await tp.send_in_transaction(Message("StoreTx", f"tx-{i}", keys=f"tx{i}"), lambda m, a, s=state: s)
    commits = {"store_group_a": {("StoreNormal", q): 5 + 7 * q for q in range(4)},
               "store_group_b": {("StoreOrder", 1): 3, ("StoreBatch", 0): 10}}
    for group, table in commits.items():
        async with PullConsumer(group, namesrv_addr) as c:
            for (topic, q), offset in table.items():
                await c.update_consume_offset(MessageQueue(topic, "broker-a", q), offset)
    return {"due": 3, "txOps": COMMITTED + ROLLED_BACK, "txCommitted": COMMITTED}


def settled(addr: str, counts: dict[str, int]) -> bool:
    """True once the broker has finished what :func:`populate` set in motion: the due delayed messages
    delivered (and their delay offset moved), every transaction's op message stored, and the transaction check past them all (the writer runs
    it every second: RocketMQ 4.9.8 gives the half topic its topic config only then)."""
    async def run() -> bool:
        async with StoreReader(addr) as r:
            delivered = sum(hi - lo for lo, hi in [await r.offsets("StoreDelay", q) for q in range(2)])
            ops = (await r.offsets("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0))[1]
            committed = sum(hi for _, hi in [await r.offsets("StoreTx", q) for q in range(2)])
            delay = await r.delay_offsets()
            checked = await r.consumer_offsets()
            return (delivered == counts["due"] and ops == counts["txOps"] and committed == counts["txCommitted"]
                    and delay.get(DUE_LEVEL) == counts["due"]
                    and all(checked.get(f"{t}@CID_RMQ_SYS_TRANS") == {0: counts["txOps"]}
                            for t in ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC")))

    return anyio.run(run)  # type: ignore[no-any-return]
