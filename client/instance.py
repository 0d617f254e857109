"""One client's connection to the cluster: name servers, routes, heartbeats, broker calls.

Every Producer/consumer/Admin object owns one ``ClientInstance`` (its own client id
and TCP connections), so several consumers of one group can live in one process
and the broker sees each as a separate member, as with Java's per-instance names.
The typed calls mirror Java's ``MQClientAPIImpl``: one method per request code.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import random
import re
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import anyio

from rmq.client.errors import (
    BadResponseError,
    BrokerError,
    ClientError,
    NameServerError,
    NoRouteError,
    response_int,
)
from rmq.client.options import ClientOptions
from rmq.client.route import TopicRoute, json_int, json_object
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.kernel.model import MessageQueue
from rmq.kernel.net import local_ipv4
from rmq.protocol.acl import sign
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand, RemotingError
from rmq.protocol.dispatch import Router
from rmq.protocol.message import UniqIdGenerator
from rmq.protocol.names import printable
from rmq.protocol.tls import ClientTls

if TYPE_CHECKING:
    from rmq.kernel.hookspecs.remoting import Connection, RemotingClient
    from rmq.kernel.kernel import Kernel

log = logging.getLogger("rmq.client")

ServerRequestHandler = Callable[["Connection", RemotingCommand], Awaitable["RemotingCommand | None"]]
_instance_seq = itertools.count(1)


def local_ip() -> str:
    """The IPv4 address peers would reach us by (one probe per process, shared with the broker)."""
    return local_ipv4()


@functools.cache
def uniq_ids() -> UniqIdGenerator:
    """The process-wide UNIQ_KEY generator (one per process, as Java's static one): ``uniq_ids()()`` is an id."""
    return UniqIdGenerator(local_ipv4())


def client_kernel() -> Kernel:
    """A new client kernel (transport, allocation strategies, filters) for one ClientInstance.

    Not cached: one kernel per instance keeps state owned by its object (no module
    global a test must reset), and building one costs ~10 ms, once per client.
    """
    from rmq.kernel.kernel import Kernel

    return Kernel.for_client()


def parse_namesrv(addr: str | list[str] | None) -> list[str]:
    if addr is None:
        addr = os.environ.get("NAMESRV_ADDR") or os.environ.get("RMQ_NAMESRV_ADDR") or ""
    items = addr if isinstance(addr, list) else addr.replace(",", ";").split(";")
    out = [a.strip() for a in items if a and a.strip()]
    if not out:
        raise ValueError("namesrv_addr is required: 'host:port;host:port' (or set NAMESRV_ADDR)")
    return out


_MQ_KEY = re.compile(r'\{([^{}]*)\}\s*:\s*(-?\d+)')
_MQ_FIELD = re.compile(r'"(brokerName|queueId|topic)"\s*:\s*(?:"([^"]*)"|(-?\d+))')


def parse_offset_table(body: bytes | str) -> dict[MessageQueue, int]:
    """``{"offsetTable":{<MessageQueue object as a map key>:offset}}`` — fastjson's non-JSON form.

    Entries whose queue id or offset do not fit their Java type (int, long) are skipped.
    """
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else body
    out: dict[MessageQueue, int] = {}
    for m in _MQ_KEY.finditer(text):
        fields = {k: (num if num else sval) for k, sval, num in _MQ_FIELD.findall(m.group(1))}
        if len(fields) == 3:
            try:
                qid = json_int(fields["queueId"], "queueId")
                off = json_int(m.group(2), "offset", -(1 << 63), (1 << 63) - 1)
            except BadResponseError:
                continue
            out[MessageQueue(fields["topic"], fields["brokerName"], qid)] = off
    return out


def mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


def mq_from_json(d: Any) -> MessageQueue:
    """A MessageQueue from a peer's JSON object; malformed → BadResponseError."""
    if type(d) is not dict or type(d.get("topic")) is not str or type(d.get("brokerName")) is not str:
        raise BadResponseError(f"not a message queue: {d!r:.80}")
    return MessageQueue(d["topic"], d["brokerName"], json_int(d.get("queueId"), "queueId"))


def _str_list(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if type(value) is not list or not all(type(x) is str for x in value):
        raise BadResponseError(f"{what} is not a list of strings")
    return value


class SigningRemotingClient:
    """A remoting client that signs every request it sends (ACL: AccessKey + Signature extFields)."""

    def __init__(self, inner: RemotingClient, access_key: str, secret_key: str, token: str | None) -> None:
        self._inner = inner
        self._ak, self._sk, self._token = access_key, secret_key, token

    def _sign(self, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.ext is None:
            cmd.ext = {}
        sign(cmd.ext, cmd.body, self._ak, self._sk, self._token)
        return cmd

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:  # noqa: ASYNC109
        return await self._inner.invoke(addr, self._sign(cmd), timeout)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        await self._inner.invoke_oneway(addr, self._sign(cmd))

    def start_request(self, addr: str, cmd: RemotingCommand, timeout: float, on_done: Any) -> bool:
        """The inner client's callback request, signed (False, nothing sent: it has none, or no connection)."""
        start = getattr(self._inner, "start_request", None)
        return start is not None and bool(start(addr, self._sign(cmd), timeout, on_done))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class ClientInstance:
    """Name-server access, route cache, broker table, heartbeat and route timers, request routing."""

    def __init__(
        self,
        namesrv_addr: str | list[str] | None,
        options: ClientOptions,
        *,
        kernel: Kernel | None = None,
        name: str = "client",
    ) -> None:
        self.options = options
        self.namesrv_addrs = parse_namesrv(namesrv_addr)
        random.shuffle(self.namesrv_addrs)
        self._ns_index = 0
        self.client_ip = options.client_ip or local_ip()
        seq = next(_instance_seq)
        self.instance_name = options.instance_name or (str(os.getpid()) if seq == 1 else f"{os.getpid()}#{seq}")
        self.client_id = f"{self.client_ip}@{self.instance_name}"
        self.name = name
        self._kernel = kernel
        self.routes: dict[str, TopicRoute] = {}
        self.brokers: dict[str, dict[int, str]] = {}  # broker name -> {id: addr}
        self.pull_from: dict[MessageQueue, int] = {}  # the broker id each queue's last pull suggested
        self.topics: set[str] = set()  # routes refreshed periodically
        self.handlers: dict[int, ServerRequestHandler] = {}  # server-initiated requests, by code
        # reads ``handlers`` live (consumers register after start); unknown codes and failures get RocketMQ answers
        self._router = Router(self.handlers, on_error=self._handler_failed)
        self.route_listeners: list[Callable[[str, TopicRoute | None], None]] = []
        self.heartbeat_data: Callable[[], dict[str, Any]] = lambda: {}
        self._remoting: RemotingClient | None = None
        self._stack: AsyncExitStack | None = None
        self.tg: anyio.abc.TaskGroup | None = None
        self._hb_lock = anyio.Lock()

    # ------------------------------------------------------------------ lifecycle
    @property
    def kernel(self) -> Kernel:
        if self._kernel is None:
            self._kernel = client_kernel()
        return self._kernel

    async def __aenter__(self) -> ClientInstance:
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            o = self.options
            tls = ClientTls(verify=o.tls_verify, ca=o.tls_ca or "", cert=o.tls_cert or "",
                            key=o.tls_key or "") if o.tls else None  # the transport makes the context
            cfg = RemotingConfig(name=self.name, connect_timeout=o.request_timeout, tls_client=tls,
                                 local_host=o.local_host)
            remoting = self.kernel.hook.rmq_remoting_make_client(
                kernel=self.kernel, config=cfg, handler=self._router.dispatch
            )
            if remoting is None:
                raise ClientError("no rmq.remoting plugin built a client")
            if hasattr(remoting, "__aenter__"):
                await stack.enter_async_context(remoting)  # type: ignore[arg-type]
            else:
                stack.push_async_callback(remoting.aclose)
            if self.options.credentials:
                remoting = SigningRemotingClient(remoting, *self.options.credentials,
                                                 self.options.security_token)  # type: ignore[assignment]
            self._remoting = remoting
            self.tg = await stack.enter_async_context(anyio.create_task_group())
            self.tg.start_soon(self._route_loop)
            self.tg.start_soon(self._heartbeat_loop)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is None:
            return
        if self.tg is not None:
            self.tg.cancel_scope.cancel()
        await stack.aclose()
        self.tg = None

    @property
    def remoting(self) -> RemotingClient:
        if self._remoting is None:
            raise ClientError("client is not started")
        return self._remoting

    def _handler_failed(self, conn: Connection, cmd: RemotingCommand, exc: Exception) -> None:
        log.warning("%s: handling request code %d from %s:%s failed: %s", self.name, cmd.code,
                    *conn.remote_addr[:2], printable(f"{type(exc).__name__}: {exc}"))

    # ------------------------------------------------------------------ generic calls
    async def invoke(
        self,
        addr: str,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        timeout: float | None = None,
        ok: tuple[int, ...] = (ResponseCode.SUCCESS,),
        what: str = "",
    ) -> RemotingCommand:
        """Request/response; a response code outside ``ok`` raises BrokerError."""
        cmd = RemotingCommand.request(code, ext, body)
        resp = await self.remoting.invoke(addr, cmd, timeout or self.options.request_timeout)
        if resp.code not in ok:
            raise BrokerError(resp.code, resp.remark, what or RequestCode(code).name, addr)
        return resp

    async def oneway(self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> None:
        await self.remoting.invoke_oneway(addr, RemotingCommand.request(code, ext, body, oneway=True))

    async def invoke_namesrv(
        self, code: int, ext: dict[str, str] | None = None, body: bytes = b"", *, timeout: float | None = None
    ) -> RemotingCommand:
        """Ask the current name server; on a transport failure move on to the next one."""
        last: Exception | None = None
        n = len(self.namesrv_addrs)
        for k in range(n):
            addr = self.namesrv_addrs[(self._ns_index + k) % n]
            try:
                cmd = RemotingCommand.request(code, ext, body)
                resp = await self.remoting.invoke(addr, cmd, timeout or self.options.request_timeout)
            except (RemotingError, OSError) as exc:
                last = exc
                continue
            self._ns_index = (self._ns_index + k) % n
            return resp
        raise NameServerError(f"no name server answered ({', '.join(self.namesrv_addrs)}): {last}") from last

    # ------------------------------------------------------------------ routes and brokers
    async def fetch_route(self, topic: str) -> TopicRoute | None:
        """The name server's route for ``topic`` (None when it has none); caches it."""
        resp = await self.invoke_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError(resp.code, resp.remark, f"route of {topic!r}", "namesrv")
        route = TopicRoute.parse(resp.body)
        self._store_route(topic, route)
        return route

    def _store_route(self, topic: str, route: TopicRoute) -> None:
        old = self.routes.get(topic)
        self.routes[topic] = route
        new_broker = False
        for bd in route.broker_datas:
            if self.brokers.get(bd.broker_name) != bd.addrs:
                new_broker = True
            self.brokers[bd.broker_name] = dict(bd.addrs)
        if new_broker and self.tg is not None:  # let new brokers know us at once (checks, rebalance)
            self.tg.start_soon(self.send_heartbeat)
        if old != route:
            for cb in list(self.route_listeners):
                cb(topic, route)

    async def route(self, topic: str, *, refresh: bool = False) -> TopicRoute:
        """Cached route, fetched on first use; raises NoRouteError when the topic does not exist."""
        r = None if refresh else self.routes.get(topic)
        if r is None:
            r = await self.fetch_route(topic)
            if r is None:
                raise NoRouteError(topic)
        return r

    def master_addr(self, broker_name: str) -> str | None:
        addrs = self.brokers.get(broker_name)
        return addrs.get(0) if addrs else None

    def broker_addr(self, broker_name: str, prefer_master: bool = True) -> str | None:
        addrs = self.brokers.get(broker_name)
        if not addrs:
            return None
        if prefer_master and 0 in addrs:
            return addrs[0]
        return addrs[min(addrs)]

    def pull_addr(self, broker_name: str, suggested: int) -> str | None:
        """Where to pull from: the broker id the last pull suggested, else its first slave (a suggested
        slave id that left), else the master, else any broker of the name (the master is down)."""
        addrs = self.brokers.get(broker_name)
        if not addrs:
            return None
        for bid in (suggested, suggested + 1 if suggested else 0, 0):
            if bid in addrs:
                return addrs[bid]
        return addrs[min(addrs)]

    async def find_broker_addr(self, broker_name: str, topic: str | None = None) -> str:
        addr = self.master_addr(broker_name) or self.broker_addr(broker_name)
        if addr is None:
            for t in [topic] if topic else list(self.topics):
                if t:
                    try:
                        await self.fetch_route(t)
                    except (ClientError, RemotingError):
                        continue
            addr = self.master_addr(broker_name) or self.broker_addr(broker_name)
        if addr is None:
            raise ClientError(f"broker {broker_name!r} is not in any known route")
        return addr

    def all_broker_addrs(self, masters_only: bool = False) -> list[str]:
        out: list[str] = []
        for addrs in self.brokers.values():
            for bid, a in sorted(addrs.items()):
                if not masters_only or bid == 0:
                    out.append(a)
        return out

    async def _route_loop(self) -> None:
        while True:
            await anyio.sleep(self.options.route_interval)
            await self.refresh_routes()

    async def refresh_routes(self) -> None:
        for topic in list(self.topics):
            try:
                route = await self.fetch_route(topic)
            except (ClientError, RemotingError, OSError) as exc:
                log.debug("%s: route refresh of %s failed: %s", self.client_id, topic, exc)
                continue
            if route is None and topic in self.routes:
                del self.routes[topic]
                for cb in list(self.route_listeners):
                    cb(topic, None)

    # ------------------------------------------------------------------ heartbeat
    async def _heartbeat_loop(self) -> None:
        while True:
            await anyio.sleep(self.options.heartbeat_interval)
            await self.send_heartbeat()

    async def send_heartbeat(self) -> None:
        """HEART_BEAT to every known broker (masters and slaves, as Java does for consumers)."""
        data = self.heartbeat_data()
        if not data.get("producerDataSet") and not data.get("consumerDataSet"):
            return
        data = {"clientID": self.client_id, **data}
        body = json.dumps(data, separators=(",", ":")).encode()
        async with self._hb_lock:
            for addr in self.all_broker_addrs():
                try:
                    await self.invoke(addr, RequestCode.HEART_BEAT, None, body, what="heartbeat")
                except (ClientError, RemotingError, OSError) as exc:
                    log.info("%s: heartbeat to %s failed: %s", self.client_id, addr, exc)

    async def unregister(self, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        ext = {"clientID": self.client_id}
        if producer_group:
            ext["producerGroup"] = producer_group
        if consumer_group:
            ext["consumerGroup"] = consumer_group
        for addr in self.all_broker_addrs():
            try:
                await self.invoke(addr, RequestCode.UNREGISTER_CLIENT, ext, what="unregister")
            except (ClientError, RemotingError, OSError) as exc:
                log.debug("%s: unregister at %s failed: %s", self.client_id, addr, exc)

    # ------------------------------------------------------------------ offsets and queues
    async def _offset_call(self, code: int, mq: MessageQueue, ext: dict[str, str], key: str = "offset") -> int:
        addr = await self.find_broker_addr(mq.broker_name, mq.topic)
        ext = {"topic": mq.topic, "queueId": str(mq.queue_id), **ext}
        resp = await self.invoke(addr, code, ext)
        return int(response_int(resp, key, 0, what=f"request code {code}"))

    async def max_offset(self, mq: MessageQueue) -> int:
        return await self._offset_call(RequestCode.GET_MAX_OFFSET, mq, {})

    async def min_offset(self, mq: MessageQueue) -> int:
        return await self._offset_call(RequestCode.GET_MIN_OFFSET, mq, {})

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return await self._offset_call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, mq, {"timestamp": str(timestamp_ms)})

    async def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        return await self._offset_call(RequestCode.GET_EARLIEST_MSG_STORETIME, mq, {}, key="timestamp")

    async def query_consumer_offset(self, group: str, mq: MessageQueue) -> int | None:
        """Committed offset, or None when the broker has none (QUERY_NOT_FOUND)."""
        addr = await self.find_broker_addr(mq.broker_name, mq.topic)
        ext = {"consumerGroup": group, "topic": mq.topic, "queueId": str(mq.queue_id)}
        resp = await self.invoke(
            addr, RequestCode.QUERY_CONSUMER_OFFSET, ext, ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND)
        )
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return int(response_int(resp, "offset", 0, what="query consumer offset"))

    async def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int, oneway: bool = True) -> None:
        addr = await self.find_broker_addr(mq.broker_name, mq.topic)
        ext = {"consumerGroup": group, "topic": mq.topic, "queueId": str(mq.queue_id), "commitOffset": str(offset)}
        if oneway:
            await self.oneway(addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext)
        else:
            await self.invoke(addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext)

    async def consumer_ids(self, group: str, topic: str) -> list[str]:
        """Live members of ``group`` as one broker of ``topic`` sees them (sorted)."""
        route = await self.route(topic)
        addrs = [a for bd in route.broker_datas if (a := bd.any_addr())]
        random.shuffle(addrs)
        last: Exception | None = None
        for addr in addrs:
            try:
                resp = await self.invoke(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
            except (ClientError, RemotingError, OSError) as exc:
                last = exc
                continue
            if not resp.body:
                return []
            doc = json_object(resp.body, "consumer list")
            return sorted(_str_list(doc.get("consumerIdList"), "consumerIdList"))
        raise ClientError(f"no broker of {topic!r} listed the members of group {group!r}: {last}")

    async def lock_batch(self, group: str, mqs: list[MessageQueue], addr: str) -> set[MessageQueue]:
        body = json.dumps({"clientId": self.client_id, "consumerGroup": group, "mqSet": [mq_json(m) for m in mqs]})
        resp = await self.invoke(addr, RequestCode.LOCK_BATCH_MQ, None, body.encode())
        if not resp.body:
            return set()
        locked = json_object(resp.body, "lock response").get("lockOKMQSet") or []
        if type(locked) is not list:
            raise BadResponseError("lockOKMQSet is not a list")
        return {mq_from_json(d) for d in locked}

    async def unlock_batch(self, group: str, mqs: list[MessageQueue], addr: str, oneway: bool = False) -> None:
        body = json.dumps({"clientId": self.client_id, "consumerGroup": group, "mqSet": [mq_json(m) for m in mqs]})
        if oneway:
            await self.oneway(addr, RequestCode.UNLOCK_BATCH_MQ, None, body.encode())
        else:
            await self.invoke(addr, RequestCode.UNLOCK_BATCH_MQ, None, body.encode())
