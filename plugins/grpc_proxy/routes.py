"""Topic routes for the gRPC endpoint from the name servers, as the 5.x proxy's local mode builds them:
every broker holding the topic, each with the endpoint ``<broker host>:<grpcServerPort>`` (RocketMQ's
rule: every broker runs its proxy on the same port), cached briefly so a route costs one namesrv
request every few seconds at most."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("rmq.grpc")

TTL = 3.0  # seconds a route is reused (RocketMQ's proxy caches routes too)


class RouteView:
    def __init__(self, namesrv_addrs: Callable[[], list[str]]) -> None:
        self._addrs = namesrv_addrs
        self._admin: Any = None
        self._cache: dict[str, tuple[float, Any]] = {}
        self._types: dict[str, tuple[float, list[int]]] = {}

    async def route(self, topic: str) -> Any:
        """The namesrv's TopicRoute (rmq.client's), None when it has none or cannot be asked."""
        hit = self._cache.get(topic)
        now = time.monotonic()
        if hit is not None and now - hit[0] < TTL:
            return hit[1]
        route = None
        try:
            if self._admin is None:
                addrs = self._addrs()
                if not addrs:
                    return None
                from rmq.client import Admin

                self._admin = Admin(addrs, request_timeout=3.0)
                await self._admin.start()
            route = await self._admin.instance.fetch_route(topic)
        except Exception as e:  # noqa: BLE001 - no namesrv answer: the local broker's queues still serve
            log.debug("route of %s from the name servers: %r", topic, e)
        if len(self._cache) > 10_000:
            self._cache.clear()
            self._types.clear()
        self._cache[topic] = (now, route)
        return route

    async def message_types(self, topic: str, route: Any) -> list[int]:
        """The topic's 5.x message types as a master holding it stores them (GET_TOPIC_CONFIG), cached."""
        from rmq.plugins.grpc_proxy.service import TYPES

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
            attrs = tc.get("attributes") or {} if isinstance(tc, dict) else {}
            kinds = list(TYPES.get(str(attrs.get("message.type", "NORMAL")).upper(), TYPES["NORMAL"]))
            break
        self._types[topic] = (now, kinds)
        return kinds

    async def aclose(self) -> None:
        if self._admin is not None:
            await self._admin.shutdown()
