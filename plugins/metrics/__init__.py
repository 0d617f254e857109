"""The bundled ``metrics`` processors plugin: RocketMQ 5's Prometheus metrics for the broker.

Entry point ``rmq.processors: metrics``; selected for every broker, serving when ``[broker]
metricsExporterType = "PROM"`` on ``metricsPromExporterHost`` (default: the broker's listenHost)
and ``metricsPromExporterPort`` (5557), RocketMQ 5's keys. Every figure is read from the broker's
own state when Prometheus scrapes (a ``prometheus_client`` collector, served on the event loop), so
the message path pays nothing. Names and labels are RocketMQ 5's (``BrokerMetricsConstant``):
``rocketmq_messages_in_total`` per topic (queue max offsets: every message the topic has stored),
``rocketmq_messages_out_total`` and ``rocketmq_throughput_in_total`` for the broker,
``rocketmq_consumer_lag_messages`` per topic and group with a consumer online (as RocketMQ),
``rocketmq_storage_size``, ``rocketmq_topic_number``, ``rocketmq_consumer_group_number``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from rmq.kernel import NoOptions, hookimpl, structure_options

if TYPE_CHECKING:
    from rmq.kernel import BrokerContext, Kernel

__all__ = ["BrokerCollector", "MetricsPlugin"]

log = logging.getLogger("rmq.metrics")


class BrokerCollector:
    """A prometheus_client collector over a running broker (read on the loop, at scrape time)."""

    def __init__(self, broker: Any) -> None:
        self.b = broker

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        b = self.b
        cfg = b.config
        base = ["cluster", "node_type", "node_id"]
        ids = [cfg.brokerClusterName, "broker", cfg.brokerName]
        store = b.store
        stats = store.stats()
        topics = {t: tc for t, tc in b.topics.table.items() if t not in b.topics.system_topics}
        msgs_in = CounterMetricFamily("rocketmq_messages_in_total", "Messages stored per topic", labels=[*base, "topic"])
        for topic, tc in sorted(topics.items()):
            total = sum(max(0, store.get_max_offset(topic, q)) for q in range(tc.writeQueueNums))
            msgs_in.add_metric([*ids, topic], total)
        yield msgs_in
        out = CounterMetricFamily("rocketmq_messages_out_total", "Messages handed to consumers by reads", labels=base)
        out.add_metric(ids, stats.get("get_messages", 0))
        yield out
        tin = CounterMetricFamily("rocketmq_throughput_in_total", "Bytes written to the commitlog", labels=base)
        tin.add_metric(ids, stats.get("put_bytes", 0))
        yield tin
        lag = GaugeMetricFamily("rocketmq_consumer_lag_messages", "Messages not yet consumed, per topic and group "
                                "with a consumer online", labels=[*base, "topic", "consumer_group"])
        for group, info in sorted(b.consumers.groups.items()):
            if not info.channels:
                continue
            for topic in sorted(info.subscriptions):
                tc = b.topics.table.get(topic)
                if tc is None:
                    continue
                behind = 0
                for q in range(tc.readQueueNums):
                    committed = b.offsets.query(group, topic, q)
                    behind += max(0, store.get_max_offset(topic, q) - max(committed, 0))
                lag.add_metric([*ids, topic, group], behind)
        yield lag
        size = GaugeMetricFamily("rocketmq_storage_size", "Bytes held by the commitlog", labels=base)
        size.add_metric(ids, max(0, stats.get("max_phy_offset", 0) - stats.get("min_phy_offset", 0)))
        yield size
        tn = GaugeMetricFamily("rocketmq_topic_number", "Topics (system topics excluded)", labels=base)
        tn.add_metric(ids, len(topics))
        yield tn
        gn = GaugeMetricFamily("rocketmq_consumer_group_number", "Subscription groups", labels=base)
        gn.add_metric(ids, len(b.groups.table))
        yield gn


class MetricsPlugin:
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        structure_options(NoOptions, options, "plugin.processors.metrics")
        self.port = 0

    @hookimpl
    def rmq_broker_lifespan(self, kernel: Kernel, broker: BrokerContext) -> Any:
        if broker.config.metricsExporterType.upper() != "PROM":
            return None
        return self._serve(broker)

    @asynccontextmanager
    async def _serve(self, broker: BrokerContext) -> AsyncIterator[None]:
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.exposition import CONTENT_TYPE_LATEST

        registry = CollectorRegistry(auto_describe=False)
        registry.register(BrokerCollector(broker))  # type: ignore[arg-type]

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
                if path.split(b"?")[0] in (b"/metrics", b"/"):
                    body, status, ctype = generate_latest(registry), b"200 OK", CONTENT_TYPE_LATEST.encode()
                else:
                    body, status, ctype = b"not found\n", b"404 Not Found", b"text/plain"
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
                await writer.drain()
            except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                pass
            finally:
                writer.close()

        cfg = broker.config
        host = cfg.metricsPromExporterHost or cfg.listenHost or "0.0.0.0"
        server = await asyncio.start_server(handle, host, cfg.metricsPromExporterPort)
        self.port = server.sockets[0].getsockname()[1]
        log.info("Prometheus metrics on http://%s:%d/metrics", host, self.port)
        try:
            yield
        finally:
            server.close()
