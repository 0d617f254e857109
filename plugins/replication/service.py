"""``HAService``: RocketMQ's classic master/slave replication (HAService, HAConnection, HAClient).

Every broker runs both halves, as in RocketMQ: the master half listens on
``haListenPort`` and streams the commitlog to each slave that connects; the slave half
(role SLAVE) follows the master at ``haMasterAddress`` or at the address the name server
returned on registration. Bytes on the wire are RocketMQ's (see ``frames``), so a Java
slave can follow an rmq master and the reverse.

Master half, per slave connection, two tasks: one reads the slave's 8-byte reports (the
first fixes where the stream starts; each raises ``replicated``, the highest offset any
slave holds, which SYNC_MASTER puts wait on), the other streams chunks of at most
``haTransferBatchSize`` and never across a segment end, sleeping on a notifier the
store's reput pokes (a dispatcher, see the plugin) and sending a heartbeat after
``haSendHeartbeatInterval`` of silence. A slow slave only stalls its own writer task: the
event loop and the other slaves go on. A connection that says nothing for
``haHousekeepingInterval`` is dropped.

Slave half: connect, report at once (RocketMQ waits up to 5 s for its first report; a
master cannot tell the difference), apply each frame through ``ReplicaLog`` (records
checked before any byte is written), report after each apply that moved the log and
every heartbeat interval; on any fault drop the connection, forget the unfinished
record, and reconnect after 5 s from the log's own end. A master whose log ends below
the slave's (the slave has bytes the master lacks) is a diverged log: the slave refuses
to apply and says so.

Failover (a controller promoting a slave) needs only ``set_role`` and
``update_master_address``: the transfer itself does not change.

Confirm offset (controller mode; RocketMQ 5's ``AutoSwitchHAService.computeConfirmOffset``): a
master told its SyncStateSet by ``set_sync_state_set`` holds its store's dispatch back at the
smallest offset every other member acknowledged (acks of 0 do not count; a member with no
connection leaves the value where it is; it never goes down while the master serves), and
recomputes it on each ack from a member. Every frame header carries it (``frames``); a slave
holds its own dispatch at ``min(confirmOffset, its log end)``, so a slave serves no more than
its master confirmed. ``None`` (a SyncStateSet of the master alone, or allAckInSyncStateSet
false, as 5.2+) dispatches to the end.

Who is a slave: RocketMQ serves any peer that connects. With ``aclEnable`` or tls
``server.mode = enforcing`` (``guarded``), a peer must prove itself first: its address
is in ``haWhiteRemoteAddresses`` or it presented a TLS client certificate that verified
against ``server.trustCertPath``. Any other peer is closed before a byte of the commitlog
is sent and is never a ``SlaveLink``: its reports count for nothing (SYNC_MASTER included).
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
import time
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import SocketStream
from anyio.streams.tls import TLSAttribute, TLSListener

from rmq.kernel import OwnLoops, RateLimitedLog, ReplicaError, Watermark, source_host
from rmq.plugins.replication.frames import (
    HANDSHAKE,
    FrameError,
    ReportReader,
    TransferDecoder,
    decode_handshake,
    encode_handshake,
    encode_header,
    encode_report,
)
from rmq.protocol.ports import bind_error

if TYPE_CHECKING:
    from rmq.kernel import MessageStore, ReplicaLog
    from rmq.roles import BrokerConfig

log = logging.getLogger("rmq.ha")
_limited = RateLimitedLog(log, interval=60.0)
RECONNECT_DELAY = 5.0
CONNECT_TIMEOUT = 3.0


def describe(e: BaseException) -> str:
    """One line for a failure, task-group wrapping removed (the first leaf says what happened)."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    if isinstance(e, anyio.BrokenResourceError) and e.__cause__ is not None:
        e = e.__cause__
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def parse_white_list(text: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """``haWhiteRemoteAddresses``: addresses or CIDR blocks separated by commas; ValueError names a bad one."""
    out = []
    for item in text.replace(";", ",").split(","):
        item = item.strip()
        if item:
            try:
                out.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise ValueError(f"haWhiteRemoteAddresses: {item!r} is not an address or CIDR block") from None
    return out


class DivergedError(Exception):
    """The slave's log has bytes its master lacks."""


class DataNotifier:
    """Wakes master writers when the store has new bytes; a ``CommitLogDispatcher`` (one call per
    reput batch, nothing per message) that costs one attribute test while no writer sleeps. It never
    reads the requests (``lazy_requests``: the store need not build them for it)."""

    lazy_requests = True

    def __init__(self) -> None:
        self._event: Any = None

    def dispatch(self, requests: Any) -> None:
        ev = self._event
        if ev is not None:
            self._event = None
            ev.set()

    def poke(self) -> None:
        self.dispatch(())

    async def wait(self, timeout: float) -> None:
        if self._event is None:
            self._event = anyio.Event()
        with anyio.move_on_after(timeout):
            await self._event.wait()


SUPERSEDED = -2  # a SlaveLink's broker id once a newer connection of that slave replaced it


class SlaveLink:
    """One slave as its master sees it."""

    def __init__(self, addr: str) -> None:
        self.addr = addr
        self.request_offset = -1  # from the first report; -1 until it arrives
        self.ack_offset = -1
        self.sent_offset = -1
        self.connected_ms = time.time_ns() // 1_000_000
        self.reported = anyio.Event()
        self.broker_id = -1  # controller mode: from the slave's handshake
        self.caught_up = 0.0  # monotonic time the slave last acknowledged the master's whole log
        self.acked = Watermark()
        self.scope: anyio.CancelScope | None = None  # ends this connection (a newer one of the same slave)

    def info(self, master_max: int) -> dict[str, Any]:
        return {
            "addr": self.addr,
            "slaveAckOffset": self.ack_offset,
            "transferredOffset": self.sent_offset,
            "lagBytes": max(0, master_max - self.ack_offset) if self.ack_offset >= 0 else master_max,
            "connectedSince": self.connected_ms,
            **({"brokerId": self.broker_id} if self.broker_id >= 0 else {}),
        }


class HAService(OwnLoops):
    """See the module docstring. ``replicated``: the highest commitlog offset a slave acknowledged."""

    def __init__(self, store: MessageStore, log_: ReplicaLog, config: BrokerConfig, notifier: DataNotifier) -> None:
        self.store = store
        self.log = log_
        self.config = config
        self.notifier = notifier
        self.role = config.brokerRole.upper()
        self.host = config.listenHost
        self.port = config.haListenPort or (config.listenPort + 1 if config.listenPort else 0)
        self.heartbeat = config.haSendHeartbeatInterval / 1000
        self.housekeeping = config.haHousekeepingInterval / 1000
        self.batch = config.haTransferBatchSize
        self.max_gap = config.haMaxGapNotInSync
        self.timeout = max(config.slaveTimeout, 1) / 1000  # 4.9's and 5.x's GroupCommitRequest deadline
        self.fixed_master = config.haMasterAddress.strip() if len(config.haMasterAddress.strip()) >= 6 else ""
        self.master_address = self.fixed_master
        self.replicated = Watermark()
        self.links: set[SlaveLink] = set()
        self._listener: Any = None
        self._master_changed = anyio.Event()
        self._client_scope: anyio.CancelScope | None = None
        self._session_scope: anyio.CancelScope | None = None  # the stream from the master followed now
        self._session_done = anyio.Event()  # set while no stream runs
        self._session_done.set()
        # slave half state
        self.master_connected = False
        self.last_master_offset = -1  # offset of the last frame header from the master
        self.slave_reported = -1
        self._report_lock = anyio.Lock()  # the heartbeat task and the receive loop both report, on one stream
        self.diverged = ""
        self.applied_chunks = 0
        # controller mode: slaves open with a 16-byte handshake naming their broker id (AutoSwitchHA's layout)
        self.handshake = bool(getattr(config, "enableControllerMode", False))
        # TLS on the HA port: only when every port must be TLS (tls server.mode enforcing); a slave with
        # tls.enable connects with TLS. Otherwise plain, as RocketMQ's HA always is (Java peers interoperate).
        self.tls_server: ssl.SSLContext | None = None
        self.tls_client: ssl.SSLContext | None = None
        self.identity = -1  # this broker's controller-assigned id, sent in that handshake
        # who may be a slave (see the module docstring): set by the plugin from aclEnable / tls enforcing
        self.guarded = False
        self.white = parse_white_list(config.haWhiteRemoteAddresses)
        self.refused = 0
        self.ports: dict[str, int] = {}  # the kernel's table of opened ports: the bound HA port goes in as "ha"
        self.confirm_members: set[int] | None = None  # master: the other SyncStateSet members (see the docstring)

    # ------------------------------------------------------------------ ReplicationService

    @property
    def slave_available(self) -> bool:
        """A slave is connected, has reported, and is less than haMaxGapNotInSync behind (isSlaveOK)."""
        if not any(link.ack_offset >= 0 for link in self.links):
            return False
        return self.store.max_phy_offset - self.replicated.value < self.max_gap

    async def wait_replicated(self, end_offset: int) -> bool:
        if self.replicated.value >= end_offset:
            return True
        self.notifier.poke()  # the writers may be asleep: this put's bytes are there now
        return await self.replicated.wait_for(end_offset, self.timeout)

    async def wait_acked_by(self, broker_ids: set[int], end_offset: int) -> bool:
        """Controller mode with allAckInSyncStateSet: True once every slave in ``broker_ids`` holds
        ``end_offset``; False after slaveTimeout (a member with no connection never acks)."""
        deadline = time.monotonic() + self.timeout
        self.notifier.poke()
        for bid in broker_ids:
            while True:
                link = next((k for k in self.links if k.broker_id == bid), None)
                left = deadline - time.monotonic()
                if link is not None and link.ack_offset >= end_offset:
                    break
                if left <= 0:
                    return False
                if link is None:
                    await anyio.sleep(min(0.05, left))
                elif not await link.acked.wait_for(end_offset, left):
                    return False
        return True

    def set_sync_state_set(self, broker_ids: set[int] | None) -> None:
        """Controller-mode master: the other SyncStateSet members whose acks bound the confirm offset;
        None: nothing bounds it (the set is the master alone, or allAckInSyncStateSet is false)."""
        self.confirm_members = set(broker_ids) if broker_ids else None
        self._update_confirm()

    def _update_confirm(self) -> None:
        members = self.confirm_members
        if not self.handshake or self.role == "SLAVE":
            return
        log_ = self.log
        if members is None:
            log_.set_confirm_offset(None)
            return
        acks = {k.broker_id: k.ack_offset for k in self.links if k.broker_id in members and k.ack_offset >= 0}
        if len(acks) < len(members):
            return  # a member without a connection (or its first ack): the value stays (RocketMQ issue 6662)
        old = log_.confirm_offset
        new = min([self.store.max_phy_offset, *(a for a in acks.values() if a > 0)])
        if new > old or old == self.store.max_phy_offset:
            log_.set_confirm_offset(max(new, old))
            if new > old:
                self.notifier.poke()  # the writers tell the slaves at once

    def in_sync(self, max_lag_ms: int, epoch_start: int) -> set[int]:
        """Controller mode: slaves (by broker id) that acknowledged the whole log within ``max_lag_ms``
        and hold this master's current epoch."""
        now = time.monotonic()
        return {
            k.broker_id for k in self.links
            if k.broker_id >= 0 and k.ack_offset >= epoch_start and now - k.caught_up <= max_lag_ms / 1000
        }

    def update_master_address(self, addr: str | None) -> None:
        """The master's HA address as the name server knows it (ignored when haMasterAddress is set)."""
        if self.fixed_master or not addr or addr == self.master_address:
            return
        log.info("HA master address %s (was %s)", addr, self.master_address or "unknown")
        self.master_address = addr
        if self._session_scope is not None:
            self._session_scope.cancel()  # nothing more from the old master
        ev, self._master_changed = self._master_changed, anyio.Event()
        ev.set()

    async def detach(self) -> None:
        """Stop following the master and return once its stream is closed. A slave that changes masters
        cuts its log back to the new master's only after this: a connection to an old master that a
        partition stalled would otherwise deliver that master's backlog when the link heals, after the
        cut, and the slave's log would fork from the new master's for good."""
        if not self.fixed_master:
            self.master_address = ""
        if self._session_scope is not None:
            self._session_scope.cancel()
        await self._session_done.wait()

    def set_role(self, role: str, master_address: str = "", broker_id: int = -1) -> None:
        """Switch between following a master (SLAVE) and serving slaves only (a master role)."""
        if broker_id >= 0:
            self.identity = broker_id
        role = role.upper()
        if role == self.role:
            if master_address:
                self.update_master_address(master_address)
            return
        log.info("HA role %s -> %s", self.role, role)
        self.role = role
        if role == "SLAVE" and self.handshake:  # serve no more than now until the new master confirms
            self.confirm_members = None
            self.log.set_confirm_offset(self.log.confirm_offset)
        if role == "SLAVE":
            if master_address:
                self.update_master_address(master_address)
            if self._tg is not None:
                self._tg.start_soon(self._follow)
        elif self._client_scope is not None:
            self._client_scope.cancel()

    def stats(self) -> dict[str, Any]:
        """Runtime figures (RocketMQ's names where it has them)."""
        master_max = self.store.max_phy_offset
        out: dict[str, Any] = {
            "brokerRole": self.role,
            "haListenPort": self.port,
            "haConnectionCount": len(self.links),
        }
        if self.guarded:
            out["haRefusedConnections"] = self.refused
        if self.links:
            out["slaveAckOffset"] = self.replicated.value
            out["slaveFallBehindMuch"] = max(0, master_max - self.replicated.value)
            out["haSlaves"] = [link.info(master_max) for link in sorted(self.links, key=lambda k: k.addr)]
        if self.role == "SLAVE":
            out["masterAddr"] = self.master_address
            out["masterConnected"] = self.master_connected
            out["masterTransferOffset"] = self.last_master_offset
            out["slaveReportedOffset"] = self.slave_reported
            if self.diverged:
                out["diverged"] = self.diverged
        return out

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> HAService:
        try:
            self._listener = await anyio.create_tcp_listener(
                local_host=self.host or None, local_port=self.port, reuse_port=False
            )
        except OSError as e:
            key = "broker.haListenPort" if self.config.haListenPort else "broker.haListenPort (0 = listenPort + 1)"
            bind_error(e, key, self.host, self.port)
        self.port = self.ports["ha"] = self._listener.extra(anyio.abc.SocketAttribute.local_port)
        if self.tls_server is not None:
            self._listener = TLSListener(self._listener, self.tls_server, standard_compatible=False,
                                         handshake_timeout=CONNECT_TIMEOUT)
        await self.start_loops(self._serve, *((self._follow,) if self.role == "SLAVE" else ()))
        log.info("HA service listening on %s:%d (brokerRole %s%s)", self.host, self.port, self.role,
                 f", master {self.master_address}" if self.master_address else "")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._tg is None:
            return
        try:
            await self.stop_loops()
        finally:
            await self._listener.aclose()

    # ------------------------------------------------------------------ master half

    async def _serve(self) -> None:
        """Accept slaves until the service stops; an accept failure (out of descriptors) is logged
        and retried, never raised into the broker."""
        while True:
            try:
                await self._listener.serve(self._guarded, task_group=self._tg)
            except Exception as e:
                _limited.error("accept", "HA listener on port %d: accept failed (%s); retrying", self.port, describe(e))
                await anyio.sleep(1)

    def admits(self, host: str, stream: Any) -> bool:
        """Whether a peer may be a slave: always when not ``guarded``; else a white-listed address or a
        TLS client certificate the handshake verified (``getpeercert`` is empty for an unverified one)."""
        if not self.guarded:
            return True
        try:
            ip = ipaddress.ip_address(host.partition("%")[0])
            mapped = getattr(ip, "ipv4_mapped", None)
            if any(a in net for a in (ip, mapped) if a is not None for net in self.white
                   if a.version == net.version):
                return True
        except ValueError:
            pass
        try:
            return bool(stream.extra(TLSAttribute.peer_certificate, None))
        except Exception:
            return False

    async def _guarded(self, stream: SocketStream) -> None:
        """One slave connection; nothing it sends may escape into the task group."""
        try:
            peer = stream.extra(anyio.abc.SocketAttribute.remote_address)
            host, addr = str(peer[0]), f"{peer[0]}:{peer[1]}"
        except Exception:
            host, addr = "", "?"
        if not self.admits(host, stream):
            self.refused += 1
            _limited.warning("refused", "HA: refused %s: not in haWhiteRemoteAddresses and no verified TLS client "
                             "certificate (aclEnable or tls enforcing); %d refused so far", addr, self.refused)
            with anyio.move_on_after(1):
                await stream.aclose()
            return
        link = SlaveLink(addr)
        self.links.add(link)
        log.info("slave %s connected", addr)
        reason = "closed by the slave"
        try:
            async with stream, anyio.create_task_group() as tg:
                link.scope = tg.cancel_scope
                tg.start_soon(self._transfer, stream, link, tg.cancel_scope)
                reason = await self._read_reports(stream, link)
                tg.cancel_scope.cancel()
            if link.broker_id == SUPERSEDED:
                reason = "superseded by a newer connection of the same slave"
        except Exception as e:
            reason = describe(e)
        finally:
            self.links.discard(link)
        log.info("slave %s disconnected (%s); acknowledged offset %d", addr, reason, link.ack_offset)

    def _supersede(self, link: SlaveLink) -> None:
        """A slave follows one stream at a time: its older connections are dead ones the master has
        not noticed yet (a reset that never arrived, a peer gone): they end now, or the sends waiting
        for this slave's acks, and the confirm offset, would follow a stream that no longer moves
        until haHousekeepingInterval drops it."""
        for old in [k for k in self.links if k is not link and k.broker_id == link.broker_id]:
            old.broker_id = SUPERSEDED  # out of the acks and the in-sync set at once
            if old.scope is not None:
                old.scope.cancel()

    async def _read_reports(self, stream: SocketStream, link: SlaveLink) -> str:
        reader = ReportReader()
        pending = b""
        while True:
            try:
                with anyio.fail_after(self.housekeeping):
                    data = await stream.receive(65536)
            except TimeoutError:
                return f"no report for {self.config.haHousekeepingInterval} ms"
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                return "closed by the slave"
            if self.handshake and link.broker_id == -1:
                pending += data
                if len(pending) < HANDSHAKE.size:
                    continue
                try:
                    link.broker_id = decode_handshake(pending[: HANDSHAKE.size])
                except FrameError as e:
                    return str(e)
                data = pending[HANDSHAKE.size :]
                log.info("slave %s is broker id %d", link.addr, link.broker_id)
                self._supersede(link)
                if not data:
                    continue
            try:
                offset = reader.feed(data)
            except FrameError as e:
                return str(e)
            if offset is None:
                continue
            master_max = self.store.max_phy_offset
            if offset > master_max:
                if link.request_offset < 0:
                    _limited.error(
                        f"diverged:{link.addr}",
                        "slave %s reports offset %d but this master's log ends at %d: the slave has bytes the "
                        "master lacks (diverged log); not replicating to it", link.addr, offset, master_max,
                    )
                    # tell a slave where this log ends: its header check then refuses to apply
                    with anyio.move_on_after(1):
                        await stream.send(encode_header(master_max, 0,
                                                        self.log.confirm_offset if self.handshake else None))
                    return "diverged log"
                return f"acknowledged {offset}, beyond this master's end {master_max}"
            if link.request_offset < 0:
                link.request_offset = offset
                link.reported.set()
            link.ack_offset = offset
            link.acked.advance(offset)
            if offset >= master_max:
                link.caught_up = time.monotonic()
            self.replicated.advance(offset)
            if self.confirm_members is not None and link.broker_id in self.confirm_members:
                self._update_confirm()

    async def _transfer(self, stream: SocketStream, link: SlaveLink, scope: anyio.CancelScope) -> None:
        await link.reported.wait()
        if link.request_offset == 0:  # a fresh slave starts at the master's last segment (RocketMQ 4)
            fsize = self.config.mappedFileSizeCommitLog
            master_max = self.store.max_phy_offset
            nxt = master_max - master_max % fsize
        else:
            nxt = link.request_offset
        last_write = time.monotonic()
        confirm = sent_confirm = None  # controller mode: the confirm offset now, and as the slave last heard it
        try:
            while True:
                if self.handshake:
                    confirm = self.log.confirm_offset
                data = self.log.read_commitlog(nxt, self.batch)
                if data is None:
                    _limited.error(
                        f"deleted:{link.addr}",
                        "slave %s needs offset %d but this master's log starts at %d (deleted by retention): it "
                        "cannot catch up; empty the slave's store to restart it from here",
                        link.addr, nxt, self.store.min_phy_offset,
                    )
                    break
                if data:
                    with anyio.fail_after(self.housekeeping):
                        await stream.send(encode_header(nxt, len(data), confirm) + data)
                    nxt += len(data)
                    link.sent_offset = nxt
                    last_write = time.monotonic()
                    sent_confirm = confirm
                    continue
                idle = time.monotonic() - last_write
                if idle >= self.heartbeat or confirm != sent_confirm:
                    with anyio.fail_after(self.housekeeping):
                        await stream.send(encode_header(nxt, 0, confirm))
                    last_write = time.monotonic()
                    sent_confirm = confirm
                    continue
                await self.notifier.wait(self.heartbeat - idle)
        except TimeoutError:
            log.warning("slave %s takes no data for %d ms; dropping it", link.addr, self.config.haHousekeepingInterval)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        scope.cancel()

    # ------------------------------------------------------------------ slave half

    async def _follow(self) -> None:
        """Follow the master while the role is SLAVE; reconnect after faults."""
        scope = self._client_scope = anyio.CancelScope()
        with scope:
            down_logged = False
            while self.role == "SLAVE":
                addr = self.master_address
                if not addr:
                    await self._master_changed.wait()
                    continue
                with anyio.CancelScope() as session:
                    self._session_scope, self._session_done = session, anyio.Event()
                    try:
                        problem = await self._session(addr)
                    except Exception as e:  # whatever the master or the network did: log it, retry
                        problem = describe(e)
                    finally:
                        self._session_scope = None
                        self._session_done.set()
                if session.cancelled_caught:
                    problem = "left for another master"
                if self.master_connected or not down_logged:
                    log.warning("HA connection to master %s lost or refused: %s; retrying every %.0f s",
                                addr, problem, RECONNECT_DELAY)
                    down_logged = True
                self.master_connected = False
                with anyio.move_on_after(RECONNECT_DELAY):
                    await self._master_changed.wait()
        self._client_scope = None

    async def _session(self, addr: str) -> str:
        host, _, port = addr.rpartition(":")
        local = source_host(self.host) or None  # from this broker's own address (see rmq.kernel.net)
        with anyio.fail_after(CONNECT_TIMEOUT):
            if self.tls_client is not None:
                stream = await anyio.connect_tcp(host, int(port), ssl_context=self.tls_client,
                                                 tls_standard_compatible=False, local_host=local)
            else:
                stream = await anyio.connect_tcp(host, int(port), local_host=local)
        async with stream:
            self.log.reset_replica()
            self.diverged = ""
            self.master_connected = True
            log.info("HA connected to master %s; this log ends at %d", addr, self.store.max_phy_offset)
            decoder = TransferDecoder(max(self.batch, 4 * 1024 * 1024), confirm=self.handshake)
            if self.handshake:
                await stream.send(encode_handshake(max(self.identity, 0)))
            await self._report(stream)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._heartbeats, stream)
                try:
                    return await self._receive(stream, decoder)
                finally:
                    tg.cancel_scope.cancel()

    async def _report(self, stream: SocketStream) -> None:
        """Send this log's end; one writer at a time (two sends at once: anyio's BusyResourceError)."""
        async with self._report_lock:
            offset = self.store.max_phy_offset
            await stream.send(encode_report(offset))
            self.slave_reported = offset

    async def _heartbeats(self, stream: SocketStream) -> None:
        while True:
            await anyio.sleep(self.heartbeat)
            with anyio.fail_after(self.housekeeping):
                await self._report(stream)

    async def _receive(self, stream: SocketStream, decoder: TransferDecoder) -> str:
        while True:
            try:
                with anyio.fail_after(self.housekeeping):
                    data = await stream.receive(256 * 1024)
            except TimeoutError:
                return f"nothing from the master for {self.config.haHousekeepingInterval} ms"
            except anyio.EndOfStream:
                return "closed by the master"
            moved = False
            try:
                for offset, body in decoder.feed(data):
                    self.last_master_offset = offset
                    expected = self.log.replica_next_offset
                    if expected and offset != expected:
                        if offset < expected:
                            raise DivergedError(
                                f"the master's stream is at {offset} but this log continues at {expected}: "
                                "this slave has bytes the master lacks (diverged log); refusing to apply. "
                                "Empty this slave's store to follow this master"
                            )
                        raise FrameError(f"the master skipped from {expected} to {offset}")
                    if body:
                        self.log.append_replicated(offset, body)
                        self.applied_chunks += 1
                        moved = True
            except DivergedError as e:
                self.diverged = str(e)
                _limited.error("diverged", "HA: %s", e)
                return "diverged log"
            except (FrameError, ReplicaError) as e:
                _limited.error("bad-frame", "HA: refused data from the master: %s; reconnecting", e)
                return f"refused data: {e}"
            if decoder.confirm_offset >= 0:  # serve only what the master confirmed (and this log holds)
                confirm = min(decoder.confirm_offset, self.store.max_phy_offset)
                if confirm != self.log.confirm_offset:
                    self.log.set_confirm_offset(confirm)
            if moved and self.store.max_phy_offset > self.slave_reported:
                with anyio.fail_after(self.housekeeping):
                    await self._report(stream)

