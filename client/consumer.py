"""What every consumer shares: pulling one batch, start offsets, rebalancing, offset timers."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

import anyio

from rmq.client.base import ClientBase
from rmq.client.errors import BrokerError, ClientError, decode_records, response_int
from rmq.client.instance import ClientInstance, parse_offset_table
from rmq.client.message import PullResult, PullStatus
from rmq.client.offsets import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore
from rmq.client.options import ConsumerOptions, build
from rmq.client.process_queue import ProcessQueue
from rmq.client.subscription import Subscription, retry_topic
from rmq.kernel.hookspecs.allocation import AllocateStrategy, StrategyRegistry
from rmq.kernel.model import MessageQueue
from rmq.kernel.ratelimit import RateLimitedLog
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand, RemotingConnectError, RemotingError
from rmq.protocol.common import Prop
from rmq.protocol.message import MessageExt

log = logging.getLogger("rmq.client.consumer")

# PullSysFlag bits
PULL_COMMIT_OFFSET = 0x1
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4

CLUSTERING = "CLUSTERING"
BROADCASTING = "BROADCASTING"
FROM_WHERE = {
    "LAST_OFFSET": "CONSUME_FROM_LAST_OFFSET",
    "FIRST_OFFSET": "CONSUME_FROM_FIRST_OFFSET",
    "TIMESTAMP": "CONSUME_FROM_TIMESTAMP",
}

_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}
_PULL = int(RequestCode.PULL_MESSAGE)


def pull_ext(
    group: str,
    mq: MessageQueue,
    offset: int,
    max_nums: int,
    sub: Subscription | None,
    *,
    suspend_ms: int = 0,
    commit_offset: int = 0,
    sys_flag: int = 0,
) -> dict[str, str]:
    flag = sys_flag
    if suspend_ms:
        flag |= PULL_SUSPEND
    if commit_offset > 0:
        flag |= PULL_COMMIT_OFFSET
    ext = {
        "consumerGroup": group,
        "topic": mq.topic,
        "queueId": str(mq.queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": str(max_nums),
        "sysFlag": "0",
        "commitOffset": str(max(commit_offset, 0)),
        "suspendTimeoutMillis": str(suspend_ms),
        "subVersion": "0",
        "bname": mq.broker_name,
    }
    if sub is not None:
        flag |= PULL_SUBSCRIPTION
        ext["subscription"] = sub.expression
        ext["expressionType"] = sub.expression_type
        ext["subVersion"] = str(sub.version)
    ext["sysFlag"] = str(flag)
    return ext


def pull_result(resp: RemotingCommand, refilter: frozenset[str] | None, what: str = "pull") -> PullResult:
    """Map a PULL_MESSAGE response; FOUND bodies are decoded and re-filtered by exact tag.

    A malformed body or header field raises BadResponseError (a ClientError): the pull fails
    and is retried like any other failed pull.
    """
    status = _PULL_STATUS.get(resp.code)  # type: ignore[call-overload]
    if status is None:
        raise BrokerError(resp.code, resp.remark, what)
    msgs: list[MessageExt] = []
    if status is PullStatus.FOUND and resp.body:
        msgs = decode_records(resp.body, what)
        if refilter is not None:
            msgs = [m for m in msgs if m.properties.get(Prop.TAGS) in refilter]
    return PullResult(
        status,
        response_int(resp, "nextBeginOffset", 0, what=what),
        response_int(resp, "minOffset", 0, what=what),
        response_int(resp, "maxOffset", 0, what=what),
        msgs,
        response_int(resp, "suggestWhichBrokerId", 0, what=what),
    )


async def pull_once(
    inst: ClientInstance,
    group: str,
    mq: MessageQueue,
    offset: int,
    max_nums: int,
    sub: Subscription | None,
    *,
    timeout: float = 10.0,
    **flags: int,
) -> PullResult:
    """One PULL_MESSAGE to the broker the last answer suggested; ``flags`` are pull_ext's (suspend_ms,
    commit_offset, sys_flag)."""
    addr = inst.pull_addr(mq.broker_name, inst.pull_from.get(mq, 0))
    if addr is None:
        addr = await inst.find_broker_addr(mq.broker_name, mq.topic)
    ext = pull_ext(group, mq, offset, max_nums, sub, **flags)
    try:
        resp = await inst.remoting.invoke(addr, RemotingCommand.request(_PULL, ext), timeout)
    except RemotingConnectError:  # the broker is gone (a master down): the next pull uses a fresh route
        with contextlib.suppress(ClientError, RemotingError):
            await inst.fetch_route(mq.topic)
        raise
    result = pull_result(resp, sub.refilter if sub is not None else None, f"pull {mq}")
    inst.pull_from[mq] = result.suggest_broker_id  # RocketMQ's pullFromWhichNodeTable
    return result


def make_strategy(allocation: str | AllocateStrategy, inst_kernel: Any, options: dict[str, Any]) -> AllocateStrategy:
    if not isinstance(allocation, str):
        return allocation
    reg = StrategyRegistry()
    inst_kernel.hook.rmq_allocation_register_strategies(registry=reg)
    return reg.create(allocation, **options)


class ConsumerBase(ClientBase):
    """Subscriptions, offset store, rebalance, heartbeat data and the timers around them.

    Subclasses implement ``_queue_added`` / ``_queue_removed`` (start or stop pulling).
    """

    _options: ConsumerOptions
    consume_type = "CONSUME_PASSIVELY"

    def __init__(
        self,
        group: str,
        namesrv_addr: str | list[str] | None = None,
        *,
        message_model: str = CLUSTERING,
        consume_from_where: str = "LAST_OFFSET",
        allocation: str | AllocateStrategy = "averagely",
        kernel: Any = None,
        **options: Any,
    ) -> None:
        """The arguments every consumer takes; ``options`` are ``ConsumerOptions`` fields (an unknown
        one is a TypeError naming the consumer class)."""
        opts = build(ConsumerOptions, options, type(self).__name__)
        super().__init__(namesrv_addr, opts, kernel)
        # per consumer: a broker failing every pull (or serving bad data) costs a few lines, not one a pull
        self.rlog = RateLimitedLog(log)
        if not group:
            raise ValueError("a consumer needs a group")
        self.group = group
        self.options = opts
        self._started_ms = 0  # when it last started (running info's PROP_CONSUMER_START_TIMESTAMP)
        mm = message_model.upper()
        if mm not in (CLUSTERING, BROADCASTING):
            raise ValueError(f"message_model must be CLUSTERING or BROADCASTING, got {message_model!r}")
        self.message_model = mm
        cfw = consume_from_where.upper().removeprefix("CONSUME_FROM_")
        if cfw not in FROM_WHERE:
            raise ValueError(f"consume_from_where must be one of {', '.join(FROM_WHERE)}, got {consume_from_where!r}")
        self.consume_from_where = cfw
        self._allocation = allocation
        self.strategy: AllocateStrategy | None = None
        self.subscriptions: dict[str, Subscription] = {}
        self._retry_sub: Subscription | None = None  # made once: its version stays, so does the heartbeat's body
        self.process_queues: dict[MessageQueue, ProcessQueue] = {}
        self.offset_store: OffsetStore | None = None
        self._rebalance_now = anyio.Event()
        self._rebalance_lock = anyio.Lock()
        self.rebalance_count = 0

    # ------------------------------------------------------------------ subscriptions
    def subscribe(self, topic: str, expression: str = "*", expression_type: str = "TAG") -> None:
        """Subscribe ``topic`` with a TAG (``"*"``, ``"a || b"``) or SQL92 expression (before or after start)."""
        sub = Subscription.parse(topic, expression, expression_type)
        self.subscriptions[topic] = sub
        if self._state == "running":
            self.instance.topics.add(topic)
            assert self._tg is not None
            self._tg.start_soon(self._after_subscription_change)

    def unsubscribe(self, topic: str) -> None:
        self.subscriptions.pop(topic, None)
        if self._state == "running":
            self.trigger_rebalance()

    async def _after_subscription_change(self) -> None:
        await self.instance.send_heartbeat()
        self.trigger_rebalance()

    def _all_subscriptions(self) -> list[Subscription]:
        subs = list(self.subscriptions.values())
        if self.message_model == CLUSTERING and self.consume_type == "CONSUME_PASSIVELY":
            rt = retry_topic(self.group)
            if rt not in self.subscriptions:
                if self._retry_sub is None:  # as Java's copySubscription at start: one version from then on
                    self._retry_sub = Subscription.parse(rt, "*")
                subs.append(self._retry_sub)
        return subs

    def _heartbeat_data(self) -> dict[str, Any]:
        return {
            "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
            "consumerDataSet": [
                {
                    "groupName": self.group,
                    "consumeType": self.consume_type,
                    "messageModel": self.message_model,
                    "consumeFromWhere": FROM_WHERE[self.consume_from_where],
                    "subscriptionDataSet": [s.to_json() for s in self._all_subscriptions()],
                    "unitMode": False,
                }
            ],
        }

    # ------------------------------------------------------------------ lifecycle
    async def _start_consumer(self, rebalance: bool = True) -> None:
        inst = self.instance
        self._started_ms = int(time.time() * 1000)
        self.strategy = make_strategy(self._allocation, inst.kernel, self.options.allocation_options)
        if self.message_model == CLUSTERING:
            self.offset_store = RemoteOffsetStore(inst, self.group)
        else:
            key = f"{inst.client_ip}@{self.options.instance_name or 'DEFAULT'}"
            self.offset_store = LocalFileOffsetStore(self.options.offset_store_dir, key, self.group)
        await self.offset_store.load()
        inst.heartbeat_data = self._heartbeat_data
        inst.handlers[RequestCode.NOTIFY_CONSUMER_IDS_CHANGED] = self._on_ids_changed
        inst.handlers[RequestCode.RESET_CONSUMER_CLIENT_OFFSET] = self._on_reset_offset
        inst.handlers[RequestCode.GET_CONSUMER_RUNNING_INFO] = self._on_running_info
        inst.handlers[RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT] = self._on_consumer_status
        for sub in self._all_subscriptions():
            inst.topics.add(sub.topic)
            try:
                await inst.fetch_route(sub.topic)
            except (ClientError, RemotingError, OSError) as exc:
                log.warning("%s: route of %s: %s", self.group, sub.topic, exc)
        await inst.send_heartbeat()
        assert self._tg is not None
        if rebalance:
            self._tg.start_soon(self._rebalance_loop)
        self._tg.start_soon(self._persist_loop)

    async def _on_ids_changed(self, conn: Any, cmd: RemotingCommand) -> None:
        log.debug("%s: broker says the members of %s changed", self.client_id, cmd.ext.get("consumerGroup"))
        self.trigger_rebalance()
        return None

    async def _on_reset_offset(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        """Broker-driven reset (admin resetOffsetByTime): adopt the offsets, drop what was pulled."""
        topic = cmd.ext.get("topic", "")
        table = {mq: off for mq, off in parse_offset_table(cmd.body).items() if mq.topic == topic}
        await self._reset_offsets(table)
        return None if cmd.is_oneway else cmd.response()

    async def _reset_offsets(self, table: dict[MessageQueue, int]) -> None:
        store = self.offset_store
        assert store is not None
        for mq, off in table.items():
            pq = self.process_queues.get(mq)
            store.update(mq, off)
            if pq is not None:
                await self._queue_removed(mq, pq, persist=False)
                self.process_queues.pop(mq, None)
        await store.persist(table.keys(), sync=True)
        self.trigger_rebalance()

    async def _on_consumer_status(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_STATUS_FROM_CLIENT: this member's offsets on a topic (GetConsumerStatusBody)."""
        import json

        topic = cmd.ext.get("topic", "")
        table = self.offset_store.table if self.offset_store is not None else {}
        parts = ["{" + f'"brokerName":{json.dumps(mq.broker_name)},"queueId":{mq.queue_id},'
                 f'"topic":{json.dumps(mq.topic)}' + "}:" + str(off)
                 for mq, off in sorted(table.items(), key=lambda kv: (kv[0].broker_name, kv[0].queue_id))
                 if mq.topic == topic]
        return cmd.response(body=('{"messageQueueTable":{' + ",".join(parts) + "}}").encode())

    async def _on_running_info(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        import json

        # the PROP_* keys are what a Java consumer reports and mqadmin's consumerStatus / monitor read
        # (without PROP_CONSUME_TYPE its analysis fails on a null)
        props = {"consumeType": self.consume_type, "messageModel": self.message_model,
                 "clientId": self.instance.client_id, "language": "PYTHON",
                 "PROP_CONSUME_TYPE": self.consume_type,
                 "PROP_CONSUMEORDERLY": str(bool(getattr(self, "orderly", False))).lower(),
                 "PROP_THREADPOOL_CORE_SIZE": str(getattr(self.options, "consume_concurrency", 1)),
                 "PROP_CONSUMER_START_TIMESTAMP": str(self._started_ms),
                 "PROP_NAMESERVER_ADDR": ";".join(self.instance.namesrv_addrs),
                 "PROP_CLIENT_VERSION": "V4_9_8"}  # the version it announces (DEFAULT_VERSION)
        info = {
            "properties": props,
            "subscriptionSet": [s.to_json() for s in self._all_subscriptions()],
            "mqTable": {},
            "statusTable": {},
        }
        return cmd.response(body=json.dumps(info).encode())

    def trigger_rebalance(self) -> None:
        self._rebalance_now.set()

    async def _rebalance_loop(self) -> None:
        while True:
            try:
                await self.rebalance()
            except Exception:
                log.exception("%s: rebalance failed", self.group)
            with anyio.move_on_after(self.options.rebalance_interval):
                await self._rebalance_now.wait()
            self._rebalance_now = anyio.Event()

    async def _persist_loop(self) -> None:
        while True:
            await anyio.sleep(self.options.persist_interval)
            await self.persist_offsets()

    async def persist_offsets(self, sync: bool = False) -> None:
        if self.offset_store is not None:
            await self.offset_store.persist(list(self.process_queues), sync=sync)

    # ------------------------------------------------------------------ rebalance
    async def allocated_queues(self, topic: str) -> list[MessageQueue] | None:
        """This member's share of ``topic`` now (None: could not tell, keep what we have)."""
        inst = self.instance
        try:
            route = await inst.route(topic)
        except (ClientError, RemotingError, OSError) as exc:
            log.info("%s: no route for %s yet: %s", self.group, topic, exc)
            return None
        mq_all = route.subscribe_queues(topic)
        if self.message_model == BROADCASTING:
            return mq_all
        try:
            cids = await inst.consumer_ids(self.group, topic)
        except (ClientError, RemotingError, OSError) as exc:
            log.info("%s: member list for %s unavailable: %s", self.group, topic, exc)
            return None
        if inst.client_id not in cids:
            return []
        assert self.strategy is not None
        return sorted(self.strategy.allocate(self.group, inst.client_id, mq_all, cids))

    async def rebalance(self) -> None:
        async with self._rebalance_lock:
            if self._state != "running":
                return
            self.rebalance_count += 1
            wanted: dict[str, set[MessageQueue] | None] = {}
            for sub in self._all_subscriptions():
                got = await self.allocated_queues(sub.topic)
                wanted[sub.topic] = None if got is None else set(got)
            for mq, pq in list(self.process_queues.items()):
                target = wanted.get(mq.topic, set())
                if target is None:  # unknown this round: keep
                    continue
                if mq not in target:
                    await self._queue_removed(mq, pq)
                    self.process_queues.pop(mq, None)
            added = []
            for target in wanted.values():
                if not target:
                    continue
                for mq in sorted(target):
                    if mq not in self.process_queues and self._state == "running":
                        if await self._queue_added(mq):
                            added.append(mq)
            if added:
                log.debug("%s: %s took %s", self.group, self.instance.client_id, added)

    async def start_offset(self, mq: MessageQueue) -> int | None:
        """Where a newly assigned queue starts: the committed offset, else per consume_from_where."""
        store = self.offset_store
        assert store is not None
        inst = self.instance
        try:
            stored = await store.read_stored(mq)
            if stored is not None and stored >= 0:
                return stored
            is_retry = mq.topic.startswith("%RETRY%")
            cfw = self.consume_from_where
            if cfw == "LAST_OFFSET":
                return 0 if is_retry else await inst.max_offset(mq)
            if cfw == "FIRST_OFFSET":
                return await inst.min_offset(mq)
            if is_retry:
                return await inst.max_offset(mq)
            ts = self.options.consume_timestamp
            if ts is None:
                ts = int(time.time() * 1000) - 30 * 60 * 1000
            return await inst.search_offset(mq, int(ts))
        except (ClientError, RemotingError, OSError) as exc:
            log.info("%s: start offset of %s unknown this round: %s", self.group, mq, exc)
            return None

    async def _queue_added(self, mq: MessageQueue) -> bool:
        raise NotImplementedError

    async def _queue_removed(self, mq: MessageQueue, pq: ProcessQueue, persist: bool = True) -> None:
        raise NotImplementedError

    async def _shutdown_consumer(self) -> None:
        for pq in list(self.process_queues.values()):
            pq.dropped = True
        await self.persist_offsets(sync=True)
        await self.instance.unregister(consumer_group=self.group)

    # ------------------------------------------------------------------ queries useful to users
    def assignment(self) -> list[MessageQueue]:
        """Queues this member is consuming now."""
        return sorted(self.process_queues)

    async def fetch_subscribe_queues(self, topic: str) -> list[MessageQueue]:
        self._check_running()
        route = await self.instance.route(topic, refresh=True)
        return route.subscribe_queues(topic)

    async def fetch_consumer_ids(self, topic: str) -> Sequence[str]:
        return await self.instance.consumer_ids(self.group, topic)
