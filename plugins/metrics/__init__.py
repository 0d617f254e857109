"""The bundled ``metrics`` processors plugin: RocketMQ 5's Prometheus metrics for the broker.

Entry point ``rmq.processors: metrics``; selected for every broker, serving when ``[broker]
metricsExporterType = "PROM"`` on ``metricsPromExporterHost`` (default: the broker's listenHost)
and ``metricsPromExporterPort`` (5557), RocketMQ 5's keys. Every figure is read from the broker's
own state when Prometheus scrapes (a ``prometheus_client`` collector, served on the event loop):
the message path pays only the broker's own per-topic and per-group counters, and each request two
clock reads for ``rocketmq_rpc_latency``. Names and labels are RocketMQ 5's (``BrokerMetricsConstant``):
``rocketmq_messages_in_total`` per topic (queue max offsets: every message the topic has stored),
``rocketmq_throughput_in_total`` per topic, ``rocketmq_messages_out_total`` and
``rocketmq_throughput_out_total`` per topic and consumer group, ``rocketmq_consumer_lag_messages``
per topic and group with a consumer online (as RocketMQ), ``rocketmq_producer_connections``,
``rocketmq_consumer_connections``, ``rocketmq_broker_permission``, ``rocketmq_storage_size``,
``rocketmq_storage_flush_behind_bytes``, ``rocketmq_storage_dispatch_behind_bytes``,
``rocketmq_topic_number``, ``rocketmq_consumer_group_number`` and the ``rocketmq_rpc_latency``
histogram (ms, per request and response code). A Grafana dashboard over them:
``examples/grafana-rmq.json``. The listener answers one GET or HEAD per connection; anything else is
refused (400/405/431) and it holds at most ``MAX_CONNECTIONS`` connections for ``REQUEST_TIMEOUT`` each.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from rmq.kernel import NoOptions, hookimpl, structure_options
from rmq.protocol.command import HeldAnswer
from rmq.protocol.ports import bind_error

if TYPE_CHECKING:
    from rmq.kernel import BrokerContext, Kernel, ProcessorRegistry

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
        yield from self._more(base, ids, stats)

    def _more(self, base: list[str], ids: list[str], stats: dict[str, Any]) -> Iterator[Any]:
        """Per topic and group traffic from the broker's counters, connections, store backlogs."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        b = self.b
        st = getattr(b, "stats", None)
        if st is not None:
            out = CounterMetricFamily("rocketmq_messages_out_total", "Messages handed to a consumer group",
                                      labels=[*base, "topic", "consumer_group"])
            tout = CounterMetricFamily("rocketmq_throughput_out_total", "Bytes handed to a consumer group",
                                       labels=[*base, "topic", "consumer_group"])
            for key, (n, size, _calls) in sorted(st.group_get.items()):
                topic, _, group = key.rpartition("@")
                out.add_metric([*ids, topic, group], n)
                tout.add_metric([*ids, topic, group], size)
            yield out
            yield tout
            tin = CounterMetricFamily("rocketmq_throughput_in_total", "Bytes of message bodies stored per topic",
                                      labels=[*base, "topic"])
            for topic, (_n, size, _calls) in sorted(st.topic_put.items()):
                tin.add_metric([*ids, topic], size)
            yield tin
        pc = GaugeMetricFamily("rocketmq_producer_connections", "Producer connections", labels=[*base, "language"])
        langs: dict[str, int] = {}
        for chans in b.producers.groups.values():
            for ch in chans.values():
                langs[ch.language] = langs.get(ch.language, 0) + 1
        for lang, n in sorted(langs.items()):
            pc.add_metric([*ids, lang], n)
        yield pc
        cc = GaugeMetricFamily("rocketmq_consumer_connections", "Consumer connections per group",
                               labels=[*base, "consumer_group", "consume_mode"])
        for group, info in sorted(b.consumers.groups.items()):
            kind = str(info.consume_type).upper()
            mode = "pop" if kind == "CONSUME_POP" else "push" if kind.endswith("PASSIVELY") else "pull"
            cc.add_metric([*ids, group, mode], len(info.channels))
        yield cc
        perm = GaugeMetricFamily("rocketmq_broker_permission", "The broker's permission (2 write, 4 read)",
                                 labels=base)
        perm.add_metric(ids, b.config.brokerPermission)
        yield perm
        flush = GaugeMetricFamily("rocketmq_storage_flush_behind_bytes", "Commitlog bytes not yet on disk",
                                  labels=base)
        flush.add_metric(ids, max(0, stats.get("max_phy_offset", 0) - stats.get("flushed_offset", 0)))
        yield flush
        disp = GaugeMetricFamily("rocketmq_storage_dispatch_behind_bytes", "Commitlog bytes not yet in consume "
                                 "queues", labels=base)
        disp.add_metric(ids, stats.get("dispatch_lag_bytes", 0))
        yield disp
        rpc = getattr(self, "rpc", None)
        if rpc is not None:
            yield rpc.family(base, ids)


#: the listener's limits: open connections (beyond: 503 and closed), seconds for a request's head and again
#: for its answer to leave, bytes of a request's head (beyond: 431)
MAX_CONNECTIONS = 32
REQUEST_TIMEOUT = 5.0
MAX_HEAD = 8192
_TOKEN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~")


def _reply(status: bytes, body: bytes, ctype: bytes = b"text/plain; charset=utf-8", extra: bytes = b"",
           head_only: bool = False) -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: " + str(len(body)).encode()
            + b"\r\n" + extra + b"Connection: close\r\n\r\n" + (b"" if head_only else body))


def _answer(head: bytes, scrape: Callable[[], bytes], ctype: bytes) -> bytes:
    """The whole answer to one request head: a scrape for GET/HEAD of /metrics (or /), 400 for anything
    that is not an HTTP/1.x request line, 405 for other methods (no scrape's work for them)."""
    parts = head.split(b"\r\n", 1)[0].split(b" ")
    if (len(parts) != 3 or not parts[0] or not set(parts[0]) <= _TOKEN or not parts[1].startswith(b"/")
            or parts[2] not in (b"HTTP/1.0", b"HTTP/1.1")):
        return _reply(b"400 Bad Request", b"not an HTTP/1.x request\n")
    method, target = parts[0], parts[1]
    if method not in (b"GET", b"HEAD"):
        return _reply(b"405 Method Not Allowed", b"GET or HEAD only\n", extra=b"Allow: GET, HEAD\r\n")
    if target.split(b"?")[0] not in (b"/metrics", b"/"):
        return _reply(b"404 Not Found", b"not found\n", head_only=method == b"HEAD")
    return _reply(b"200 OK", scrape(), ctype, head_only=method == b"HEAD")


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, scrape: Callable[[], bytes],
                     ctype: bytes) -> None:
    """One request, one answer, then the connection closes; every wait bounded."""
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT):
            head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        answer = _reply(b"431 Request Header Fields Too Large", b"request head too large\n")
    except (TimeoutError, OSError, asyncio.IncompleteReadError):
        return
    else:
        answer = _answer(head, scrape, ctype)
    try:
        writer.write(answer)
        async with asyncio.timeout(REQUEST_TIMEOUT):  # a client that never reads its answer
            await writer.drain()
    except (TimeoutError, OSError):
        writer.transport.abort()


#: rocketmq_rpc_latency buckets in milliseconds (RocketMQ 5's remoting metrics use the same scale)
RPC_BUCKETS_MS = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)


class _Timed:
    """Waits beside a ``HeldAnswer`` (future-like, see ``Watermark.add_waiter``): records the request
    when the answer leaves, with the code it leaves with."""

    __slots__ = ("latency", "code", "held", "t0", "fired")

    def __init__(self, latency: RpcLatency, code: int, held: HeldAnswer, t0: float) -> None:
        self.latency, self.code, self.held, self.t0, self.fired = latency, code, held, t0, False

    def done(self) -> bool:
        return self.fired

    def set_result(self, _: object) -> None:
        if not self.fired:
            self.fired = True
            held = self.held
            self.latency.record(self.code, held.code if held.mark.value >= held.at else held.late_code, self.t0)


class RpcLatency:
    """A request interceptor timing every request of the broker: a clock read before and after and
    two additions, collected into ``rocketmq_rpc_latency`` at scrape time."""

    def __init__(self) -> None:
        self.pending: dict[int, float] = {}
        self.table: dict[tuple[int, int], list[float]] = {}  # (code, response code) -> bucket counts + sum

    def before(self, conn: Any, cmd: Any) -> None:
        if len(self.pending) > 100_000:  # requests an exception ended before after(): never kept for long
            self.pending.clear()
        self.pending[id(cmd)] = time.perf_counter()

    def after(self, conn: Any, cmd: Any, response: Any) -> None:
        t0 = self.pending.pop(id(cmd), None)
        if t0 is None:
            return
        if type(response) is HeldAnswer:  # a SYNC_FLUSH send: timed when its answer is released
            response.mark.add_waiter(response.at, _Timed(self, cmd.code, response, t0), response.timeout,
                                     asyncio.get_running_loop())
            return
        self.record(cmd.code, response.code if response is not None else -1, t0)

    def record(self, code: int, response_code: int, t0: float) -> None:
        ms = (time.perf_counter() - t0) * 1000
        key = (code, response_code)
        row = self.table.get(key)
        if row is None:
            row = self.table[key] = [0.0] * (len(RPC_BUCKETS_MS) + 2)
        row[bisect.bisect_left(RPC_BUCKETS_MS, ms)] += 1
        row[-1] += ms

    def family(self, base: list[str], ids: list[str]) -> Any:
        from prometheus_client.core import HistogramMetricFamily

        fam = HistogramMetricFamily("rocketmq_rpc_latency", "Request handling time in ms, per request and "
                                    "response code (remoting)", labels=[*base, "protocol_type", "request_code",
                                                                         "response_code"])
        for (code, rcode), row in sorted(self.table.items()):
            running, buckets = 0.0, []
            for edge, n in zip((*RPC_BUCKETS_MS, float("inf")), row[:-1], strict=True):
                running += n
                buckets.append((str(edge) if edge != float("inf") else "+Inf", running))
            fam.add_metric([*ids, "remoting", str(code), str(rcode)], buckets, row[-1])
        return fam


class MetricsPlugin:
    def __init__(self, options: dict[str, Any] | None = None) -> None:
        structure_options(NoOptions, options, "plugin.processors.metrics")
        self.port = 0
        self.rpc: RpcLatency | None = None

    @hookimpl
    def rmq_processors_register(self, kernel: Kernel, registry: ProcessorRegistry) -> None:
        cfg = kernel.config.broker
        if registry.role == "broker" and cfg is not None and cfg.metricsExporterType.upper() == "PROM":
            self.rpc = RpcLatency()
            registry.add_interceptor(self.rpc)

    @hookimpl
    def rmq_broker_lifespan(self, kernel: Kernel, broker: BrokerContext) -> Any:
        if broker.config.metricsExporterType.upper() != "PROM":
            return None
        return self._serve(kernel, broker)

    @asynccontextmanager
    async def _serve(self, kernel: Kernel, broker: BrokerContext) -> AsyncIterator[None]:
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.exposition import CONTENT_TYPE_LATEST

        registry = CollectorRegistry(auto_describe=False)
        collector = BrokerCollector(broker)
        collector.rpc = self.rpc  # type: ignore[attr-defined]
        registry.register(collector)  # type: ignore[arg-type]

        def scrape() -> bytes:
            return generate_latest(registry)  # type: ignore[no-any-return]

        open_now: set[asyncio.StreamWriter] = set()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if len(open_now) >= MAX_CONNECTIONS:  # the broker's descriptors are not a crowd's to hold
                writer.write(_reply(b"503 Service Unavailable", b"too many connections\n"))
                writer.close()
                return
            open_now.add(writer)
            try:
                await _serve_one(reader, writer, scrape, CONTENT_TYPE_LATEST.encode())
            finally:
                open_now.discard(writer)
                writer.close()

        cfg = broker.config
        host = cfg.metricsPromExporterHost or cfg.listenHost or "0.0.0.0"
        try:
            server = await asyncio.start_server(handle, host, cfg.metricsPromExporterPort, limit=MAX_HEAD)
        except OSError as e:
            bind_error(e, "broker.metricsPromExporterPort", host, cfg.metricsPromExporterPort)
        self.port = kernel.ports["metrics"] = server.sockets[0].getsockname()[1]
        log.info("Prometheus metrics on http://%s:%d/metrics", host, self.port)
        try:
            yield
        finally:
            server.close()
