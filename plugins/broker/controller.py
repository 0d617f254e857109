"""The Broker role (RocketMQ's BrokerController): state, start-up and shutdown order.

Start: load metadata (topics, offsets, groups) → build and enter the store
(recovery, dispatch caught up) → listen → set the store host to the reachable
address → register with every name server → background loops.
Stop: stop loops → unregister → stop listening → persist metadata → close the
store (flush, checkpoint, abort marker removed).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from rmq.kernel import (
    MASTER,
    SLAVE,
    MessageFilter,
    MessageRecord,
    PluginError,
    ProcessorRegistry,
    PutResult,
    PutStatus,
    RemotingConfig,
    local_ipv4,
    make_handler,
)
from rmq.plugins.broker.admin import AdminProcessor
from rmq.plugins.broker.admin_ops import AdminOpsProcessor
from rmq.plugins.broker.clients import ConsumerManager, ProducerManager
from rmq.plugins.broker.consumer import ConsumerProcessor
from rmq.plugins.broker.groups import SubscriptionGroupManager
from rmq.plugins.broker.locks import RebalanceLockManager
from rmq.plugins.broker.longpoll import ArrivalNotifier, PullHoldService
from rmq.plugins.broker.offsets import ConsumerOffsetManager
from rmq.plugins.broker.pipeline import PutPipeline
from rmq.plugins.broker.pop import PopProcessor
from rmq.plugins.broker.pull import PullProcessor
from rmq.plugins.broker.registrar import NamesrvRegistrar, register_body, split_namesrv_addrs
from rmq.plugins.broker.reply import ReplyProcessor
from rmq.plugins.broker.send import SendProcessor
from rmq.plugins.broker.stats import BrokerStats
from rmq.plugins.broker.topics import TopicConfig, TopicConfigManager
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import waits_for_store
from rmq.protocol.message import host_bytes
from rmq.protocol.names import RETRY_PREFIX

if TYPE_CHECKING:
    from rmq.kernel import Connection, Kernel, MessageStore, RemotingServer, ReplicationService
    from rmq.plugins.broker.replicas import ReplicasManager
    from rmq.plugins.broker.slavesync import SlaveSynchronizer
    from rmq.roles import BrokerConfig

log = logging.getLogger("rmq.broker")

_WATCHED = "broker.client"
_BORN = "broker.born"
CLIENT_SCAN_INTERVAL = 10.0
HOLD_CHECK_INTERVAL_LONG = 5.0
FILTER_CACHE_MAX = 10_000


class BrokerController:
    def __init__(self, kernel: Kernel, config: BrokerConfig) -> None:
        self.kernel = kernel
        self.config = config
        src = kernel.config.source
        self.config_file = src if src and not src.startswith("<") and Path(src).is_file() else ""
        self.config_dir = config.store_root() / "config"
        self.topics = TopicConfigManager(config, self.config_dir)
        self.offsets = ConsumerOffsetManager(self.config_dir)
        self.groups = SubscriptionGroupManager(config, self.config_dir)
        self.consumers = ConsumerManager()
        self.producers = ProducerManager()
        self.locks = RebalanceLockManager()
        self.hold = PullHoldService()
        self.notifier = ArrivalNotifier(self.hold)
        self.store: MessageStore = None  # type: ignore[assignment]  # set in run()
        self.replication: ReplicationService | None = None  # None: standalone (no slaves)
        self.sync_master = config.brokerRole.upper() == "SYNC_MASTER"
        self.is_slave = config.brokerRole.upper() == "SLAVE"
        self.accepts_writes = bool(config.brokerPermission & 2) and not self.is_slave
        self.master_addr = ""  # a slave's master (remoting address), from registration: metadata sync
        self.broker_id = config.brokerId  # the id registered with name servers (controller mode: 0 = master)
        self.replicas: ReplicasManager | None = None
        if config.enableControllerMode:  # its modules (and the slave's below) load only when used: every start
            from rmq.plugins.broker.replicas import ReplicasManager  # of a plain master paid their import

            self.replicas = ReplicasManager(kernel, self)
        self.server: RemotingServer | None = None
        self.vip_server: RemotingServer | None = None  # listenPort - 2, RocketMQ's fastRemotingServer
        self.registrar: NamesrvRegistrar | None = None
        self.slave_sync: SlaveSynchronizer | None = None
        self.slave_sync_periods = (10.0, 0.2)  # full sync, topic probe: the broker plugin's options
        self.ip = config.brokerIP1 or local_ipv4()
        self.port = config.listenPort
        self.broker_addr = f"{self.ip}:{self.port}"
        self.store_host = host_bytes(self.ip, self.port)
        self.msg_id_prefix = self.store_host.hex().upper()
        self.trace_on = "true" if config.traceOn else "false"
        self.delay_levels = config.delay_levels_ms()
        self.boot_ms = time.time_ns() // 1_000_000
        self._filters: dict[tuple[str, str, str, str], MessageFilter | None] = {}
        self.pipeline = PutPipeline(())  # the stages arrive from plugins at start (rmq_broker_put_stages)
        self.send_processor = SendProcessor(self)
        self.pull_processor = PullProcessor(self)
        self.consumer_processor = ConsumerProcessor(self)
        self.admin_processor = AdminProcessor(self)
        self.admin_ops = AdminOpsProcessor(self)
        self.pop_processor = PopProcessor(self)
        self.reply_processor = ReplyProcessor(self)
        self.stats: BrokerStats | None = None  # made once the store is open

    # ------------------------------------------------------------------ processors

    def register(self, registry: ProcessorRegistry, owner: str) -> None:
        for proc in (self.send_processor, self.pull_processor, self.consumer_processor, self.admin_processor,
                     self.admin_ops, self.pop_processor, self.reply_processor):
            proc.register(registry, owner)
        if self.replicas is not None:
            self.replicas.register(registry, owner)
        registry.services["broker"] = self
        registry.services["store"] = self.store

    # ------------------------------------------------------------------ helpers used by processors

    def born_host(self, conn: Connection) -> bytes:
        """The 8-byte (or 20-byte IPv6) born host of a connection, computed once per connection."""
        born = conn.attributes.get(_BORN)
        if born is None:
            ip, port = conn.remote_addr[:2]
            if ip.startswith("::ffff:") and "." in ip:
                ip = ip[7:]
            try:
                born = host_bytes(ip, int(port))
            except ValueError:
                born = host_bytes("127.0.0.1", 0)
            conn.attributes[_BORN] = born
        return born

    async def put(self, rec: MessageRecord) -> PutResult:
        """The put pipeline for one message: stages, the store, then the SYNC_MASTER wait (none for WAIT=false,
        as RocketMQ's internal puts ask)."""
        if self.pipeline.may_defer(rec.properties):
            refused = self.pipeline.route(rec)
            if refused is not None:
                return refused
        result = await self.store.put_message(rec)
        if (self.sync_master and self.replication is not None and result.status is PutStatus.PUT_OK
                and rec.waits and waits_for_store(rec.properties)):
            await self.wait_slave(result)
        return result

    async def wait_slave(self, result: PutResult) -> None:
        """SYNC_MASTER: a put counts once a slave has it (SLAVE_NOT_AVAILABLE / FLUSH_SLAVE_TIMEOUT); in
        controller mode with allAckInSyncStateSet, once every SyncStateSet member has it."""
        repl = self.replication
        assert repl is not None
        if self.replicas is not None:
            others = self.replicas.sss - {self.replicas.broker_id}
            if others and not await repl.wait_acked_by(others, result.wrote_offset + result.wrote_bytes):
                result.status = PutStatus.FLUSH_SLAVE_TIMEOUT
            return
        if not repl.slave_available:
            result.status = PutStatus.SLAVE_NOT_AVAILABLE
        elif not await repl.wait_replicated(result.wrote_offset + result.wrote_bytes):
            result.status = PutStatus.FLUSH_SLAVE_TIMEOUT

    def producer_channels(self, group: str) -> list[Connection]:
        return [ch.conn for ch in self.producers.groups.get(group, {}).values() if not ch.conn.closed]

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self.offsets.query(group, topic, queue_id)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.offsets.commit(group, topic, queue_id, offset)

    @property
    def role_services(self) -> list[str]:
        return list(self.kernel.role_services)

    @property
    def ports(self) -> dict[str, int]:
        return dict(self.kernel.ports)

    def has_topic(self, topic: str) -> bool:
        return topic in self.topics.table

    def ensure_topic(self, topic: str, queues: int, perm: int = 6) -> None:
        if topic not in self.topics.table:
            self.topics.update(TopicConfig(topic, queues, queues, perm))

    def adopt_due_topic(self, topic: str, queue_id: int, by: str) -> bool:
        if topic in self.topics.table:
            return False
        # a retry topic is made with one queue (the send-back's); others as a send would auto-create them
        queues = queue_id + 1 if topic.startswith(RETRY_PREFIX) else max(queue_id + 1,
                                                                         self.config.defaultTopicQueueNums)
        self.ensure_topic(topic, queues)
        log.info("%s: topic %s had no config here (not synced before a promotion): created with %d queues",
                 by, topic, queues)
        return True

    def get_filter(self, group: str, topic: str, etype: str, expr: str) -> MessageFilter | None:
        """The compiled subscription, cached per (group, topic, type, expression); None = match all."""
        key = (group, topic, etype, expr)
        try:
            return self._filters[key]
        except KeyError:
            pass
        if expr in ("", "*") and etype.upper() == "TAG":  # exactly as the tag filter defines subscribe-all
            f: MessageFilter | None = None
        else:
            if etype.upper() != "TAG" and not self.config.enablePropertyFilter:
                raise LookupError(f"The broker does not support consumer to filter message by {etype}")
            f = self.kernel.hook.rmq_filter_make_filter(expression_type=etype, expression=expr)
            if f is None:
                raise LookupError(f"no rmq.filters plugin compiles expression type {etype}")
        if len(self._filters) >= FILTER_CACHE_MAX:
            self._filters.clear()
        self._filters[key] = f
        return f

    def watch_client(self, conn: Connection) -> None:
        if not conn.attributes.get(_WATCHED):
            conn.attributes[_WATCHED] = True
            conn.on_close(self._client_closed)

    def _client_closed(self, conn: Connection) -> None:
        self.producers.remove_connection(conn)
        for group in self.consumers.remove_connection(conn):
            sg = self.groups.table.get(group)
            if group in self.consumers.groups and (sg is None or sg.notifyConsumerIdsChangedEnable):
                self.notify_consumer_ids_changed(group)

    def notify_consumer_ids_changed(self, group: str) -> None:
        """Push NOTIFY_CONSUMER_IDS_CHANGED (oneway) to every member so they rebalance now."""
        info = self.consumers.get(group)
        if info is None:
            return
        try:
            tg = self.kernel.task_group
        except RuntimeError:
            return
        for conn in list(info.channels):
            tg.start_soon(self._notify_one, conn, group)

    async def _notify_one(self, conn: Connection, group: str) -> None:
        if conn.closed:
            return
        try:
            with anyio.move_on_after(3):
                await conn.send_oneway(
                    RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group})
                )
        except Exception as e:
            log.debug("notify consumer ids changed to %s failed: %s", conn.remote_addr, e)

    async def register_now(self) -> None:
        if self.registrar is not None:
            with anyio.move_on_after(self.config.registerBrokerTimeoutMills / 1000):
                await self.registrar.register_all()

    def _identity(self) -> dict[str, str]:
        cfg = self.config
        ha_ip = cfg.brokerIP2 or self.ip
        repl = self.replication
        ha_port = repl.port if repl is not None and repl.port else self.port + 1
        return {
            "brokerAddr": self.broker_addr,
            "brokerId": str(self.broker_id),
            "brokerName": cfg.brokerName,
            "clusterName": cfg.brokerClusterName,
            "haServerAddr": f"{ha_ip}:{ha_port}",
        }

    @property
    def accepts_writes(self) -> bool:
        """Whether sends are taken. A controller-mode master also needs its lease (a controller leader's
        answer within ``controllerHeartBeatTimeoutMills``), checked here at each write rather than only
        by the fence loop: a master resumed after a long pause reads its queued requests before that
        loop wakes, and must not take one of them in an epoch that may be over."""
        replicas = getattr(self, "replicas", None)
        return self._accepts_writes and (replicas is None or replicas.lease_held())

    @accepts_writes.setter
    def accepts_writes(self, value: bool) -> None:
        self._accepts_writes = value

    def set_role(self, *, master: bool, broker_id: int, master_addr: str) -> None:
        """Controller mode: take the role the controller named (flags the processors read, the id
        name servers list, the master to sync metadata from), then register at once."""
        cfg = self.config
        self.is_slave = not master
        self.sync_master = master and cfg.allAckInSyncStateSet
        self.accepts_writes = master and bool(cfg.brokerPermission & 2)
        self.broker_id = broker_id
        self.master_addr = master_addr
        if self.slave_sync is not None and master_addr:
            self.slave_sync.kick()
        if self.registrar is not None:
            self.registrar.trigger()

    def adopt_stored_topics(self) -> None:
        """A slave promoted before its metadata sync copied a topic (auto-created on the old master a
        moment before it died) still has the topic's queues: give it a config, so routes list it."""
        for topic, queues in sorted(self.store.topic_queues().items()):  # type: ignore[attr-defined]
            if topic not in self.topics.table and not topic.startswith("rmq_sys_") and topic not in (
                    "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"):
                self.topics.update(TopicConfig(topic, queues, queues))
                log.info("topic %s has queues in the store but no config here: created with %d queues", topic, queues)

    def _registered(self, ext: dict[str, str]) -> None:
        """A name server answered a registration: a slave learns its master's addresses from it."""
        if not self.is_slave:
            return
        master = ext.get("masterAddr") or ""
        if master != self.master_addr:
            log.info("master of %s is %s (was %s)", self.config.brokerName, master or "unknown",
                     self.master_addr or "unknown")
            self.master_addr = master
            if self.slave_sync is not None:
                self.slave_sync.kick()
        if self.replication is not None:
            self.replication.update_master_address(ext.get("haServerAddr"))

    def _may_register(self) -> bool:
        """Controller mode: a fenced broker (no role from the controller yet) stays out of routes."""
        return self.replicas is None or self.replicas.role != "FENCED"

    def _register_body(self) -> bytes:
        version = self.topics.data_version.to_json()
        if self.replicas is not None and self.replicas.master_epoch:
            version["stateVersion"] = self.replicas.master_epoch  # the name server keeps the newest epoch's master
        return register_body(self.topics.register_body_table(self.is_slave), version)

    def namesrv_addrs(self) -> list[str]:
        """``namesrvAddr``; else the name server in this process; else ``$NAMESRV_ADDR`` (RocketMQ's broker
        reads it when nothing is configured; an embedded rmqd keeps to its own name server even when an
        operator's shell sets it for mqadmin)."""
        addrs = split_namesrv_addrs(self.config.namesrvAddr)
        if not addrs:
            ns = self.kernel.services.get("namesrv")
            ncfg = self.kernel.config.namesrv
            if ns is not None and ns.server is not None and ncfg is not None:
                host = ncfg.listenHost if ncfg.listenHost not in ("", "0.0.0.0", "::") else "127.0.0.1"
                addrs = [f"{host}:{ns.server.port}"]
            else:
                addrs = split_namesrv_addrs(os.environ.get("NAMESRV_ADDR", ""))
        return addrs

    # ------------------------------------------------------------------ background loops

    async def _flush_loop(self) -> None:
        interval = max(self.config.flushConsumerOffsetInterval, 100) / 1000
        while True:
            await anyio.sleep(interval)
            await self._flush_metadata()

    async def _flush_metadata(self) -> None:
        for mgr in (self.offsets, self.groups):
            text = mgr.snapshot()
            if text is not None:
                try:
                    await anyio.to_thread.run_sync(mgr.file.write, text)
                except OSError as e:
                    log.error("cannot persist %s: %s", mgr.file.path, e)
                    mgr.dirty = True

    async def _client_scan_loop(self) -> None:
        timeout = self.config.channelExpiredTimeout / 1000
        interval = min(CLIENT_SCAN_INTERVAL, max(timeout / 4, 0.05))
        while True:
            await anyio.sleep(interval)
            now = time.monotonic()
            dead = set(self.consumers.expired(now, timeout)) | set(self.producers.expired(now, timeout))
            for conn in dead:
                log.warning("client connection %s:%d expired: no heartbeat for %d ms",
                            *conn.remote_addr[:2], self.config.channelExpiredTimeout)
                self._client_closed(conn)
                await conn.aclose()

    async def _hold_check_loop(self) -> None:
        cfg = self.config
        interval = HOLD_CHECK_INTERVAL_LONG if cfg.longPollingEnable else max(cfg.shortPollingTimeMills, 10) / 1000
        while True:
            await anyio.sleep(interval)
            if self.hold.waiters:
                self.hold.check_all(self.store.get_max_offset)

    # ------------------------------------------------------------------ lifespan

    @asynccontextmanager
    async def run(self) -> AsyncIterator[BrokerController]:
        kernel, cfg = self.kernel, self.config
        self.topics.load()
        self.offsets.load()
        self.groups.load()
        store = kernel.hook.rmq_storage_make_store(kernel=kernel, config=cfg)
        if store is None:
            raise PluginError("no rmq.storage plugin built a store; select one under [plugins] storage")
        self.store = store
        if hasattr(store, "queue_guard"):  # no put opens a consume queue outside its topic's queues (#26)
            store.queue_guard = self.topics.queue_problem
        self.stats = BrokerStats(store)
        # the store calls no hooks itself: build what it works with, hand it over, then open it
        dispatchers = [d for part in kernel.hook.rmq_dispatch_make_dispatchers(kernel=kernel, store=store)
                       for d in part or ()]
        policy = kernel.hook.rmq_flush_make_policy(kernel=kernel, store=store, config=cfg)
        store.attach(dispatchers=dispatchers, flush_policy=policy, on_forced_clean=self._forced_clean)
        self._set_store_host()
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(store)
            stack.callback(self._persist_all)  # runs before the store closes
            repl = kernel.hook.rmq_replication_make_service(kernel=kernel, store=store)
            if repl is not None:
                self.replication = await stack.enter_async_context(repl)
                log.info("replication service %s started (brokerRole %s)", type(repl).__name__, cfg.brokerRole)
            self.pipeline = PutPipeline(
                stage for part in kernel.hook.rmq_broker_put_stages(kernel=kernel, broker=self) for stage in part or ()
            )
            kernel.services["broker"] = self
            stack.callback(kernel.services.pop, "broker", None)
            server, registry = await kernel.serve_role(
                "broker", RemotingConfig(host=cfg.listenHost, port=cfg.listenPort, max_connections=cfg.maxConnections,
                           name="broker", key="broker.listenPort")
            )
            self.server = server
            stack.push_async_callback(server.aclose)
            if server.port != self.port:
                self.port = server.port
                self.broker_addr = f"{self.ip}:{self.port}"
                self._set_store_host()
            self.vip_server = await self._serve_vip_channel(registry)
            stack.push_async_callback(self.vip_server.aclose)
            self.topics.on_change = self._topics_changed
            # extensions (schedule, transactions, ...) run while the store is open; they exit before it closes
            for cm in reversed(kernel.hook.rmq_broker_lifespan(kernel=kernel, broker=self)):
                if cm is not None:
                    await stack.enter_async_context(cm)
            # master-only / slave-only services (rmq_role_lifespan) stop before the extensions and the store;
            # in controller mode the broker starts fenced and the controller's first word gives the role
            stack.push_async_callback(kernel.change_role, None)
            if self.replicas is None:
                await kernel.change_role(SLAVE if self.is_slave else MASTER, self)
            scope = anyio.CancelScope()
            if self.is_slave:  # before registering: the first answer names the master and kicks a sync
                from rmq.plugins.broker.slavesync import SlaveSynchronizer

                self.slave_sync = SlaveSynchronizer(kernel, self, *self.slave_sync_periods)
                stack.push_async_callback(self.slave_sync.aclose)
            addrs = self.namesrv_addrs()
            if addrs:
                self.registrar = NamesrvRegistrar(kernel, cfg, addrs, self._identity, self._register_body,
                                                  on_registered=self._registered, enabled=self._may_register)
                stack.push_async_callback(self.registrar.aclose)
                stack.push_async_callback(self.registrar.unregister_all)
                with anyio.move_on_after(cfg.registerBrokerTimeoutMills / 1000):
                    await self.registrar.register_all()
            else:
                log.warning("no namesrvAddr, no embedded namesrv and no $NAMESRV_ADDR: broker %s will not register",
                            self.broker_addr)
            stack.callback(scope.cancel)  # loops stop first on exit
            self.send_processor.flow.start()
            stack.callback(self.send_processor.flow.stop)

            async def loops() -> None:
                with scope:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._flush_loop)
                        if self.stats is not None:
                            tg.start_soon(self.stats.run)
                        tg.start_soon(self._client_scan_loop)
                        tg.start_soon(self._hold_check_loop)
                        if self.registrar is not None:
                            tg.start_soon(self.registrar.run)
                        if self.slave_sync is not None:
                            tg.start_soon(self.slave_sync.run)
                        if self.replicas is not None:
                            tg.start_soon(self.replicas.run)

            kernel.task_group.start_soon(loops)
            log.info("broker %s (%s, cluster %s) serving at %s, namesrv %s; send path: %s; heartbeat path: %s; "
                     "pull path: %s", cfg.brokerName, cfg.brokerRole, cfg.brokerClusterName, self.broker_addr,
                     ";".join(addrs) or "(none)", self.send_processor.fast.decide(registry),
                     self.consumer_processor.fast.decide(registry), self.pull_processor.decide(registry))
            yield self
            log.info("broker %s shutting down", cfg.brokerName)
            self.hold.wake_all()
        log.info("broker %s stopped", cfg.brokerName)

    async def _serve_vip_channel(self, registry: ProcessorRegistry) -> RemotingServer:
        """RocketMQ's "VIP channel" (BrokerController's fastRemotingServer), always on at listenPort - 2:
        Java clients up to 4.4 (vipChannelEnabled=true by default) send and administer there. It
        serves what the main port serves except PULL_MESSAGE, which RocketMQ keeps off it so a long
        poll never holds a connection senders use. listenPort 0 (tests) takes any free port."""
        cfg, kernel = self.config, self.kernel
        port = cfg.listenPort - 2 if cfg.listenPort else 0
        if port < 0:
            raise PluginError(f"broker.listenPort {cfg.listenPort}: the VIP channel needs listenPort - 2 to be a port")
        vip = ProcessorRegistry("broker", kernel)
        vip.table = {code: proc for code, proc in registry.table.items() if code != RequestCode.PULL_MESSAGE}
        vip.interceptors = list(registry.interceptors)
        config = RemotingConfig(host=cfg.listenHost, port=port, max_connections=cfg.maxConnections, name="broker-vip",
                                key="broker.listenPort - 2 (the VIP channel)")
        server = kernel.hook.rmq_remoting_make_server(kernel=kernel, config=config, handler=make_handler(vip))
        kernel.ports["vip"] = await kernel.task_group.start(server.serve)
        log.info("broker VIP channel listening on %s:%d (pull stays on %d)", cfg.listenHost, server.port, self.port)
        return server

    def _set_store_host(self) -> None:
        self.store_host = host_bytes(self.ip, self.port)
        self.msg_id_prefix = self.store_host.hex().upper()
        try:
            self.store.attach(store_host=self.store_host)
        except ValueError as e:
            log.warning("store does not take store_host %s: %s; message ids may not resolve", self.broker_addr, e)

    def _forced_clean(self, moved: dict[tuple[str, int], tuple[int, int]]) -> None:
        """The store deleted data early (disk nearly full): say which groups lost unconsumed messages."""
        lost: dict[tuple[str, str], int] = {}
        for (topic, qid), (old_min, new_min) in moved.items():
            for group in self.offsets.groups_of_topic(topic):
                committed = self.offsets.query(group, topic, qid)
                if 0 <= committed < new_min:
                    key = (group, topic)
                    lost[key] = lost.get(key, 0) + new_min - max(committed, old_min)
        for (group, topic), n in sorted(lost.items()):
            log.error("forced clean: consumer group %s lost %d unconsumed messages of topic %s", group, n, topic)
        if not lost:
            log.warning("forced clean: no consumer group had unconsumed messages in the deleted files")

    def _topics_changed(self) -> None:
        if self.registrar is not None:
            self.registrar.trigger()

    def _persist_all(self) -> None:
        self.offsets.persist()
        self.groups.persist()
        self.topics.persist()
        log.info("broker metadata persisted (%d topics, %d offset entries)", len(self.topics.table),
                 len(self.offsets.table))
