"""The route activity of the gRPC endpoint (the proxy's RouteActivity: QueryRoute, QueryAssignment)
and the routes it answers from, as the 5.x proxy's local mode builds them
(``LocalTopicRouteService.getTopicRouteForProxy``): every broker of the topic under its own id (0 =
master, a slave under its id), each with the endpoint of that broker's proxy, from the name servers
(cached briefly, so a route costs one namesrv request every few seconds at most); this broker from
its own tables, under the id it holds now. Assignments name masters only: POP goes to masters.

The endpoint of another broker's proxy is RocketMQ's rule, ``<broker host>:<grpcServerPort>`` (every
broker runs its proxy on the same port), unless that broker says otherwise: an rmq broker names its
gRPC port in its runtime info (``grpcServerPort``), so brokers sharing a host on different ports
(a master and its slave on one machine) still send each client to the right one. A slave's endpoint
is in the route with its id, as the proxy lists it; clients send to and receive from masters only.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
import attrs

from rmq.plugins.grpc_proxy.common import TYPES, Activity, C, accepted, status
from rmq.plugins.grpc_proxy.v2 import definition_pb2 as d
from rmq.plugins.grpc_proxy.v2 import service_pb2 as s
from rmq.protocol.names import validate_topic

log = logging.getLogger("rmq.grpc")

TTL = 3.0  # seconds a route is reused (RocketMQ's proxy caches routes too)
PORT_TTL = 60.0  # seconds a broker's learned gRPC port is trusted before it is asked again
PORT_RETRY = 5.0  # seconds before a broker that did not say its port is asked again
PORT_ASK_S = 1.5  # a broker that does not answer in this long keeps RocketMQ's rule for now


def said_port(value: object) -> int | None:
    """The port a peer broker's runtime info names (``grpcServerPort``): 1..65535, else None. Peer
    data: never raises, whatever the value. Text is ASCII digits only (``str.isdigit`` also takes
    "²", which ``int`` refuses, and "٣"); leading zeros are dropped before the length check, so no
    peer string reaches ``int`` longer than five digits."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 < value < 65536 else None
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        return None
    digits = value.lstrip("0")
    if not digits or len(digits) > 5:
        return None
    port = int(digits)
    return port if port < 65536 else None


@attrs.frozen
class Member:
    """One broker of a topic's route: its name and id (0 = master), its proxy's endpoint, the
    topic's queue numbers and permission there."""

    name: str
    bid: int
    host: str
    port: int
    read: int
    write: int
    perm: int


class RouteView:
    def __init__(self, namesrv_addrs: Callable[[], list[str]]) -> None:
        self._addrs = namesrv_addrs
        self._admin: Any = None
        self._cache: dict[str, tuple[float, Any]] = {}
        self._types: dict[str, tuple[float, list[int]]] = {}
        self._ports: dict[str, tuple[float, int | None]] = {}  # broker address -> (asked at, its gRPC port)

    async def _client(self) -> Any:
        if self._admin is None:
            addrs = self._addrs()
            if not addrs:
                return None
            from rmq.client import Admin

            self._admin = Admin(addrs, request_timeout=3.0)
            await self._admin.start()
        return self._admin

    async def route(self, topic: str) -> Any:
        """The namesrv's TopicRoute (rmq.client's), None when it has none or cannot be asked."""
        hit = self._cache.get(topic)
        now = time.monotonic()
        if hit is not None and now - hit[0] < TTL:
            return hit[1]
        route = None
        try:
            admin = await self._client()
            if admin is None:
                return None
            route = await admin.instance.fetch_route(topic)
        except Exception as e:  # noqa: BLE001 - no namesrv answer: the local broker's queues still serve
            log.debug("route of %s from the name servers: %r", topic, e)
        if len(self._cache) > 10_000:
            self._cache.clear()
            self._types.clear()
        self._cache[topic] = (now, route)
        return route

    async def grpc_port(self, addr: str, default: int) -> int:
        """The gRPC port of the broker at ``addr`` as it says (runtime info), else ``default``."""
        hit = self._ports.get(addr)
        now = time.monotonic()
        if hit is not None and now - hit[0] < (PORT_TTL if hit[1] is not None else PORT_RETRY):
            return hit[1] if hit[1] is not None else default
        port = hit[1] if hit is not None else None  # a broker away keeps the port it said before
        try:
            admin = await self._client()
            table: dict[str, Any] = {}  # peer data: any JSON value
            if admin is not None:
                with anyio.move_on_after(PORT_ASK_S):
                    table = await admin.broker_runtime_info(addr)
            said = said_port(table.get("grpcServerPort"))
            if said is not None:
                port = said
        except Exception as e:  # noqa: BLE001 - a broker away or without the key: RocketMQ's rule
            log.debug("gRPC port of %s: %r", addr, e)
        if len(self._ports) > 10_000:
            self._ports.clear()
        self._ports[addr] = (now, port)
        return port if port is not None else default

    async def members(self, route: Any, mine: Member, my_addr: str, default_port: int) -> list[Member]:
        """Every broker of ``route``: this one (at ``my_addr``) as ``mine`` with the route's queue numbers,
        the others with their endpoints; an entry holding this broker's name and id at another address
        is left out (a failover moved the ids and the name server has not heard yet)."""
        qds = {q.broker_name: q for q in route.queue_datas}
        out = []
        for bd in route.broker_datas:
            q = qds.get(bd.broker_name)
            if q is None:
                continue
            for bid, addr in sorted(bd.addrs.items()):
                if addr == my_addr:
                    out.append(attrs.evolve(mine, read=q.read_queue_nums, write=q.write_queue_nums, perm=q.perm))
                elif not (bd.broker_name == mine.name and bid == mine.bid):
                    host = addr.rpartition(":")[0] or addr
                    port = await self.grpc_port(addr, default_port)
                    out.append(Member(bd.broker_name, bid, host, port, q.read_queue_nums, q.write_queue_nums, q.perm))
        return out

    async def message_types(self, topic: str, route: Any) -> list[int]:
        """The topic's 5.x message types as a master holding it stores them (GET_TOPIC_CONFIG), cached."""
        hit = self._types.get(topic)
        now = time.monotonic()
        if hit is not None and now - hit[0] < TTL * 10:
            return hit[1]
        kinds: list[int] = []
        for bd in route.broker_datas:
            addr = bd.master_addr
            if addr is None or self._admin is None:
                continue
            try:
                tc = await self._admin.topic_config(addr, topic)
            except Exception as e:  # noqa: BLE001 - an old broker without the code: NORMAL, as RocketMQ
                log.debug("topic config of %s from %s: %r", topic, addr, e)
                continue
            attrs_ = tc.get("attributes") or {} if isinstance(tc, dict) else {}
            kinds = list(TYPES.get(str(attrs_.get("message.type", "NORMAL")).upper(), TYPES["NORMAL"]))
            break
        self._types[topic] = (now, kinds)
        return kinds

    async def aclose(self) -> None:
        if self._admin is not None:
            await self._admin.shutdown()


_PERMS = {6: d.READ_WRITE, 4: d.READ, 2: d.WRITE, 0: d.NONE}  # RocketMQ's perm bits -> the proxy's Permission


def broker_of(m: Member) -> d.Broker:
    try:
        ipaddress.ip_address(m.host)
        scheme = d.IPv6 if ":" in m.host else d.IPv4
    except ValueError:
        scheme = d.DOMAIN_NAME
    return d.Broker(name=m.name, id=m.bid, endpoints=d.Endpoints(scheme=scheme, addresses=[
        d.Address(host=m.host, port=m.port)]))


class RouteActivity(Activity):
    async def members(self, topic: str) -> tuple[list[Member], list[int]]:
        """The topic's brokers: from the name servers, this one under the id it holds now, with its own
        tables' queue numbers when it has the topic (fresher; a slave may not have it yet); and the
        topic's message types as a broker has them."""
        b, view = self.broker, self.svc.routes
        tc = self.topic(topic)
        mine = Member(b.config.brokerName, int(getattr(b, "broker_id", 0)), self.svc.host, self.svc.port, 0, 0, 0)
        route = await view.route(topic) if view is not None else None
        out = await view.members(route, mine, b.broker_addr, self.svc.port) if route is not None else []
        if tc is None:
            return out, (await view.message_types(topic, route) if out else [])
        others = [m for m in out if (m.name, m.bid, m.host, m.port) != (mine.name, mine.bid, mine.host, mine.port)]
        return [attrs.evolve(mine, read=tc.readQueueNums, write=tc.writeQueueNums, perm=tc.perm), *others], accepted(tc)

    async def query_route(self, request: s.QueryRouteRequest, context: object) -> s.QueryRouteResponse:
        """Every broker of the topic, masters and slaves under their ids, each with its endpoint (the
        proxy's ``queryRoute``: clients keep the masters' queues)."""
        topic = request.topic.name
        if validate_topic(topic) is not None:
            return s.QueryRouteResponse(status=status(C.ILLEGAL_TOPIC, validate_topic(topic) or ""))
        members, kinds = await self.members(topic)
        if not members:
            return s.QueryRouteResponse(status=status(C.TOPIC_NOT_FOUND, f"topic {topic} not found"))
        queues = []
        for m in members:
            broker = broker_of(m)
            for i in range(max(m.read, m.write)):
                rd, wr = i < m.read and m.perm & 4, i < m.write and m.perm & 2
                perm = d.READ_WRITE if rd and wr else d.READ if rd else d.WRITE if wr else d.NONE
                queues.append(d.MessageQueue(topic=d.Resource(name=topic), id=i, permission=perm, broker=broker,
                                             accept_message_types=kinds or [d.NORMAL]))
        return s.QueryRouteResponse(status=status(C.OK), message_queues=queues)

    async def query_assignment(self, request: s.QueryAssignmentRequest, context: object) -> s.QueryAssignmentResponse:
        """Each master's readable queues (the proxy's ``queryAssignment``: a slave is never assigned, POP
        goes to masters): one queue -1 per broker, or every queue for a FIFO group."""
        topic = request.topic.name
        members, kinds = await self.members(topic)
        if not members:
            return s.QueryAssignmentResponse(status=status(C.TOPIC_NOT_FOUND, f"topic {topic} not found"))
        fifo = self.orderly(request.group.name)
        mqs = [d.MessageQueue(topic=d.Resource(name=topic), id=i, permission=_PERMS[m.perm & 6], broker=broker_of(m),
                              accept_message_types=kinds or [d.NORMAL])
               for m in members if m.bid == 0 and m.perm & 4 and m.read > 0 for i in (range(m.read) if fifo else [-1])]
        if not mqs:
            return s.QueryAssignmentResponse(status=status(C.FORBIDDEN, "no readable queue"))
        return s.QueryAssignmentResponse(status=status(C.OK), assignments=[d.Assignment(message_queue=q) for q in mqs])
