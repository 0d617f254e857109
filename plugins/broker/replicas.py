"""A broker in controller mode (RocketMQ 5's ReplicasManager): its id, role and epoch come from the controller.

Start: the broker is fenced (takes no writes, does not register with name servers). It
finds the controller leader (CONTROLLER_GET_METADATA_INFO on ``controllerAddr``), gets an
id once (GET_NEXT_BROKER_ID, APPLY_BROKER_ID with a check code; ``brokerIdentity`` keeps
it across restarts, ``brokerIdentity-temp`` a half-done application), registers, and
heartbeats to every controller each ``brokerHeartbeatInterval``. With no master known it
asks to be elected; then it takes the role the controller names and unfences.

Role changes arrive as NOTIFY_BROKER_ROLE_CHANGED and by polling GET_REPLICA_INFO every
``syncBrokerMetadataPeriod``; only a newer master epoch acts.

* To master: the epoch file gets ``(epoch, log end)``, the store becomes writable from its
  own end (queue offsets rebuilt from replicated records), the broker registers as id 0.
  Every ``checkSyncStateSetPeriod`` the master proposes its SyncStateSet: itself plus the
  slaves that acknowledged its whole log within ``haMaxTimeSlaveNotCatchup`` and hold the
  current epoch.
* To slave: the new master's epoch history (GET_BROKER_EPOCH_CACHE) and this log's give
  the last point both agree on; the log is cut back to it (an old master's unreplicated
  tail goes, an acknowledged-in-sync message never: it is on every SyncStateSet member),
  then the broker follows the master's HA port and registers under its own id.

Fencing (beyond RocketMQ, which leaves a cut-off master writable): a master holds a lease,
renewed only by a leader's answer naming it master of its own epoch and counted from when
that question was asked; with no renewal for ``controllerHeartBeatTimeoutMills`` less the
controllers' lease-read window (so it ends before any controller leader can elect another: see
``lease_held``) it takes no writes until one comes, so no write it acknowledges can lose to a
newer epoch's master.
The lease is checked at each write (``lease_held``), not by a timer alone: a master resumed
after a long pause serves its queued requests before any timer or answer can run.
"""

from __future__ import annotations

import json
import logging
import random
import time
from typing import TYPE_CHECKING, Any

import anyio

from rmq.kernel import MASTER, SLAVE, ConfigFile, ReplicaLog
from rmq.plugins.broker.epochs import EpochFile, common_point, epoch_list
from rmq.plugins.broker.registrar import outbound_client
from rmq.protocol.access import ADMIN, SIGNED
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand, ext_int, ext_str
from rmq.protocol.headers import CONTROLLER_LEASE_READ_MS
from rmq.protocol.jsonbody import loads

if TYPE_CHECKING:
    from rmq.kernel import Connection, Kernel, ProcessorRegistry, RemotingClient
    from rmq.plugins.broker.controller import BrokerController

log = logging.getLogger("rmq.broker")

CALL_TIMEOUT = 3.0
LEADER_GRACE = 0.5  # s: how long _find_leader waits for the other answers after the first
RETRY = 5.0


class ControllerError(Exception):
    pass


class ReplicasManager:
    def __init__(self, kernel: Kernel, broker: BrokerController) -> None:
        self.kernel = kernel
        self.broker = broker
        cfg = broker.config
        self.cfg = cfg
        self.addrs = [a.strip() for a in cfg.controllerAddr.replace(",", ";").split(";") if a.strip()]
        self.leader = ""
        self.broker_id = -1  # assigned by the controller
        self.master_id: int | None = None
        self.master_addr = ""
        self.master_epoch = 0
        self.sss_epoch = 0
        self.sss: set[int] = set()
        self.role = "FENCED"
        self.state = "INITIAL"
        self.epochs = EpochFile(cfg.store_root() / "epochFileCheckpoint")
        self.last_leader_ok = 0.0  # monotonic time a leader's answer confirming this master's epoch was asked for
        self.fenced_reason = ""  # set while a master is fenced off for want of a controller leader
        self._lock = anyio.Lock()
        self.client: RemotingClient | None = None
        self._repoll = anyio.Event()  # set: poll the controller now, not after the period
        self._poll_call: anyio.CancelScope | None = None  # the poll's controller call in flight

    # ------------------------------------------------------------------ processors on the broker's port

    def register(self, registry: ProcessorRegistry, owner: str) -> None:
        # the controller tells a broker its new role: a cluster member's write, admin-only under ACL
        registry.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self.on_notify, owner=owner, access=ADMIN)
        registry.register(RequestCode.GET_BROKER_EPOCH_CACHE, self.epoch_cache, owner=owner, access=SIGNED)

    async def on_notify(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        master_id = ext_int(cmd, "masterBrokerId", -1)
        epoch = ext_int(cmd, "masterEpoch", 0)
        addr = ext_str(cmd, "masterAddress", "") or ""
        sss_epoch = ext_int(cmd, "syncStateSetEpoch", 0)
        try:
            sss = set(loads(cmd.body or b"{}").get("syncStateSet") or [])
        except (ValueError, AttributeError):
            sss = set()
        log.info("controller says: master of %s is id %d (%s), epoch %d", self.cfg.brokerName, master_id, addr, epoch)
        if epoch > self.master_epoch:
            self.leader = ""  # a leader elected this master: maybe a new one, found afresh at the next call
        self.kernel.task_group.start_soon(self.apply_master, master_id if master_id >= 0 else None, addr, epoch,
                                          sss_epoch, sss)
        return cmd.response()

    async def epoch_cache(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        store = self.broker.store
        body = {
            "clusterName": self.cfg.brokerClusterName,
            "brokerName": self.cfg.brokerName,
            "brokerId": self.broker_id,
            "epochList": epoch_list(self.epochs.entries, store.max_phy_offset),
            "maxOffset": store.max_phy_offset,
        }
        return cmd.response(body=json.dumps(body, separators=(",", ":")).encode())

    # ------------------------------------------------------------------ controller calls

    async def _call(self, addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
        assert self.client is not None
        cmd = RemotingCommand.request(code, {k: str(v) for k, v in (ext or {}).items()}, body)
        return await self.client.invoke(addr, cmd, CALL_TIMEOUT)

    async def _find_leader(self) -> str:
        """Ask every controller at once and take the leader most of the answers name (one that names
        itself breaks a tie), once all answered or LEADER_GRACE after the first answer. One at a time, a
        controller a partition cut off would cost a call timeout, and a master elected meanwhile would go
        unconfirmed (fenced) that long; and a cut-off old leader still naming itself is outvoted."""
        named: list[str] = []
        claims: set[str] = set()  # leaders that answered for themselves
        first, done = anyio.Event(), anyio.Event()
        left = [len(self.addrs)]

        async def ask(addr: str) -> None:
            try:
                r = await self._call(addr, RequestCode.CONTROLLER_GET_METADATA_INFO)
                leader = r.ext.get("controllerLeaderAddress") or ""
                if r.code == 0 and leader:
                    named.append(leader)
                    if r.ext.get("isLeader") == "true":
                        claims.add(leader)
                    first.set()
            except Exception:
                pass
            finally:
                left[0] -= 1
                if not left[0]:
                    first.set()
                    done.set()

        async with anyio.create_task_group() as tg:
            for addr in self.addrs:
                tg.start_soon(ask, addr)
            await first.wait()
            with anyio.move_on_after(LEADER_GRACE):
                await done.wait()
            tg.cancel_scope.cancel()
        if not named:
            raise ControllerError(f"no controller leader among {';'.join(self.addrs)}")
        leader = max(sorted(set(named)), key=lambda a: (named.count(a), a in claims))
        if leader != self.leader:
            log.info("controller leader is %s", leader)
        self.leader = leader
        return leader

    async def _leader_call(self, code: int, ext: dict[str, Any] | None = None, body: bytes = b"") -> RemotingCommand:
        """A request to the leader; a NOT_LEADER answer or a dead leader re-finds it once."""
        for attempt in range(2):
            leader = self.leader or await self._find_leader()
            try:
                r = await self._call(leader, code, ext, body)
            except Exception as e:
                self.leader = ""
                if attempt:
                    raise ControllerError(f"controller {leader}: {e}") from None
                continue
            if r.code == ResponseCode.CONTROLLER_NOT_LEADER:
                self.leader = ""
                if attempt:
                    raise ControllerError(f"controller {leader} is not the leader")
                continue
            return r
        raise ControllerError("unreachable")

    # ------------------------------------------------------------------ start-up

    async def run(self) -> None:
        self.client = outbound_client(self.kernel, "broker-controller", CALL_TIMEOUT, "the controller calls")
        self.epochs.load()
        try:
            while self.state != "RUNNING":
                try:
                    await self._start_once()
                except Exception as e:
                    log.warning("controller mode start-up: %s; retrying in %.0f s", e, RETRY)
                    await anyio.sleep(RETRY)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._heartbeat_loop)
                tg.start_soon(self._poll_loop)
                tg.start_soon(self._sss_loop)
                tg.start_soon(self._fence_loop)
        finally:
            if self.client is not None:
                await self.client.aclose()

    async def _start_once(self) -> None:
        await self._find_leader()
        await self._apply_id()
        r = await self._leader_call(RequestCode.CONTROLLER_REGISTER_BROKER, {
            "clusterName": self.cfg.brokerClusterName, "brokerName": self.cfg.brokerName,
            "brokerId": self.broker_id, "brokerAddress": self.broker.broker_addr})
        if r.code != 0:
            raise ControllerError(f"register: code {r.code} {r.remark or ''}")
        await self._heartbeat_once()
        master = r.ext.get("masterBrokerId")
        epoch = int(r.ext.get("masterEpoch") or 0)
        sss_body = loads(r.body) if r.body else {}
        if master is None:
            r = await self._leader_call(RequestCode.CONTROLLER_ELECT_MASTER, {
                "clusterName": self.cfg.brokerClusterName, "brokerName": self.cfg.brokerName,
                "brokerId": self.broker_id, "designateElect": "false"})
            if r.code not in (0, ResponseCode.CONTROLLER_MASTER_STILL_EXIST):
                raise ControllerError(f"no master and no election: code {r.code} {r.remark or ''}")
            master, epoch = r.ext.get("masterBrokerId"), int(r.ext.get("masterEpoch") or 0)
            sss_body = loads(r.body) if r.body else {}
        await self.apply_master(int(master) if master is not None else None, r.ext.get("masterAddress") or "",
                                epoch, int(r.ext.get("syncStateSetEpoch") or 0), set(sss_body.get("syncStateSet") or []),
                                force=True)
        if self.role in ("MASTER", "SLAVE"):
            self.state = "RUNNING"

    async def _apply_id(self) -> None:
        cfg = self.cfg
        root = cfg.store_root()
        ident = ConfigFile(root / "brokerIdentity")
        temp = ConfigFile(root / "brokerIdentity-temp")
        text = _read(ident)
        if text:
            cluster, name, bid = (text.split("#") + ["", "", ""])[:3]
            if (cluster, name) != (cfg.brokerClusterName, cfg.brokerName):
                raise ControllerError(f"{ident.path} names {cluster}/{name}, the config {cfg.brokerClusterName}/"
                                      f"{cfg.brokerName}: fix one of them")
            self.broker_id = int(bid)
            return
        tmp = _read(temp)
        if tmp:
            parts = tmp.split("#")
            bid, code = int(parts[2]), parts[3]
        else:
            r = await self._leader_call(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                                        {"clusterName": cfg.brokerClusterName, "brokerName": cfg.brokerName})
            if r.code != 0:
                raise ControllerError(f"next broker id: code {r.code} {r.remark or ''}")
            bid = int(r.ext["nextBrokerId"])
            code = f"{self.broker.broker_addr};{time.time_ns() // 1_000_000}"
            await anyio.to_thread.run_sync(temp.write, f"{cfg.brokerClusterName}#{cfg.brokerName}#{bid}#{code}")
        r = await self._leader_call(RequestCode.CONTROLLER_APPLY_BROKER_ID, {
            "clusterName": cfg.brokerClusterName, "brokerName": cfg.brokerName, "appliedBrokerId": bid,
            "registerCheckCode": code})
        if r.code != 0:
            temp.path.unlink(missing_ok=True)
            await anyio.sleep(random.random())
            raise ControllerError(f"apply broker id {bid}: code {r.code} {r.remark or ''}")
        await anyio.to_thread.run_sync(ident.write, f"{cfg.brokerClusterName}#{cfg.brokerName}#{bid}")
        temp.path.unlink(missing_ok=True)
        self.broker_id = bid
        log.info("controller assigned broker id %d to %s", bid, self.broker.broker_addr)

    # ------------------------------------------------------------------ loops

    async def _heartbeat_once(self) -> None:
        assert self.client is not None
        ext = {"clusterName": self.cfg.brokerClusterName, "brokerAddr": self.broker.broker_addr,
               "brokerName": self.cfg.brokerName, "brokerId": str(self.broker_id),
               "epoch": str(self.epochs.last_epoch), "maxOffset": str(self.broker.store.max_phy_offset),
               "confirmOffset": str(self.confirm_offset()),
               "heartbeatTimeoutMills": str(self.cfg.controllerHeartBeatTimeoutMills),
               "electionPriority": str(self.cfg.brokerElectionPriority)}
        for addr in self.addrs:
            try:
                with anyio.move_on_after(1):
                    await self.client.invoke_oneway(addr, RemotingCommand.request(RequestCode.BROKER_HEARTBEAT,
                                                                                  dict(ext)))
            except Exception:
                pass

    async def _heartbeat_loop(self) -> None:
        while True:
            await anyio.sleep(self.cfg.brokerHeartbeatInterval / 1000)
            await self._heartbeat_once()

    async def _poll_loop(self) -> None:
        period = self.cfg.syncBrokerMetadataPeriod / 1000
        while True:
            with anyio.move_on_after(min(period, self.cfg.controllerHeartBeatTimeoutMills / 3000)):
                await self._repoll.wait()
            self._repoll = anyio.Event()
            asked = time.monotonic()
            r = None
            with anyio.CancelScope() as self._poll_call:
                try:
                    r = await self._leader_call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {
                        "brokerName": self.cfg.brokerName, "brokerId": str(self.broker_id),
                        "brokerAddress": self.broker.broker_addr,
                        "heartbeatTimeoutMills": str(self.cfg.controllerHeartBeatTimeoutMills)})
                except Exception as e:
                    log.debug("replica info poll failed: %s", e)
            self._poll_call = None
            if r is None:
                continue
            if r.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST:
                self.state = "INITIAL"
                continue
            if r.code != 0:
                continue
            body = loads(r.body) if r.body else {}
            master = r.ext.get("masterBrokerId")
            epoch = int(r.ext.get("masterEpoch") or 0)
            if self.role == "MASTER" and master is not None and int(master) == self.broker_id \
                    and epoch == self.master_epoch:
                # the lease runs from when the question left, and only an answer naming this broker master of
                # its own epoch renews it: an answer about a newer epoch must not let the old master write
                # while it steps down. Never backwards: an answer asked before this broker was elected
                # (it became master on that very answer) must not undo the lease its election granted
                self.last_leader_ok = max(self.last_leader_ok, asked)
            if epoch > self.master_epoch:
                await self.apply_master(int(master) if master is not None else None, r.ext.get("masterAddress") or "",
                                        epoch, int(body.get("syncStateSetEpoch") or 0),
                                        set(body.get("syncStateSet") or []))
            elif self.role == "MASTER" and int(body.get("syncStateSetEpoch") or 0) > self.sss_epoch:
                self.sss, self.sss_epoch = set(body.get("syncStateSet") or []), int(body["syncStateSetEpoch"])
                self._bound_confirm()
            if self.role == "SLAVE":
                with anyio.CancelScope() as self._poll_call:  # its master may be cut off: a call timeout
                    await self._adopt_master_epochs()
                self._poll_call = None

    async def _sss_loop(self) -> None:
        while True:
            await anyio.sleep(self.cfg.checkSyncStateSetPeriod / 1000)
            if self.role != "MASTER" or self.broker.replication is None:
                continue
            start = self.epochs.entries[-1][1] if self.epochs.entries else 0
            new = {self.broker_id} | self.broker.replication.in_sync(self.cfg.haMaxTimeSlaveNotCatchup, start)
            if new == self.sss:
                continue
            try:
                r = await self._leader_call(
                    RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                    {"brokerName": self.cfg.brokerName, "masterBrokerId": self.broker_id,
                     "masterEpoch": self.master_epoch},
                    json.dumps({"syncStateSet": sorted(new), "syncStateSetEpoch": self.sss_epoch}).encode())
            except Exception as e:
                log.info("sync state set change not reported: %s", e)
                continue
            if r.code == 0:
                log.info("sync state set of %s is now %s", self.cfg.brokerName, sorted(new))
                self.sss, self.sss_epoch = new, int(r.ext.get("newSyncStateSetEpoch") or self.sss_epoch + 1)
                self._bound_confirm()
            else:
                log.info("sync state set change %s refused: code %d %s", sorted(new), r.code, r.remark or "")

    def lease_held(self) -> bool:
        """False for a master no controller leader confirmed for ``controllerHeartBeatTimeoutMills``
        (less the lease-read window): it may have been replaced. The broker's ``accepts_writes`` asks at
        every write; the fence and its end are logged when first seen, here."""
        if self.role != "MASTER":
            return True
        silent = time.monotonic() - self.last_leader_ok
        # it must end before any controller leader can elect another master. The leader that confirmed it
        # counts this master's poll as a heartbeat, so it cannot find it dead sooner than the timeout after
        # the question arrived; a newer leader elects only after leading for the timeout, and the grant
        # came at most CONTROLLER_LEASE_READ_MS after that leadership began: the timeout less that is safe
        timeout_ms = self.cfg.controllerHeartBeatTimeoutMills
        lease_s = max(timeout_ms - CONTROLLER_LEASE_READ_MS, timeout_ms / 2) / 1000
        if silent <= lease_s:
            if self.fenced_reason:
                self.fenced_reason = ""
                log.info("master %s unfenced: the controller leader confirms its epoch again", self.broker.broker_addr)
            return True
        if not self.fenced_reason:
            self.fenced_reason = f"no controller leader confirmed its epoch for {silent:.1f} s"
            log.error("master %s fenced: %s (its lease ended %.3f s ago); it takes no writes until a controller "
                      "answers", self.broker.broker_addr, self.fenced_reason, silent - lease_s)
        return False

    async def _fence_loop(self) -> None:
        """Keeps the fence state (runtime info, log) current while no write asks (``lease_held``)."""
        timeout = self.cfg.controllerHeartBeatTimeoutMills / 1000
        while True:
            await anyio.sleep(min(1.0, timeout / 4))
            self.lease_held()

    # ------------------------------------------------------------------ role changes

    async def apply_master(self, master_id: int | None, master_addr: str, epoch: int, sss_epoch: int,
                           sss: set[int], force: bool = False) -> None:
        async with self._lock:
            if epoch < self.master_epoch or (epoch == self.master_epoch and not force):
                return
            if master_id is None:
                self.master_epoch = epoch
                return  # no master yet: the next poll or notice names one
            if master_id == self.broker_id:
                await self._to_master(epoch, sss_epoch, sss)
            else:
                await self._to_slave(master_id, master_addr, epoch)

    async def _to_master(self, epoch: int, sss_epoch: int, sss: set[int]) -> None:
        b = self.broker
        store = b.store
        was = self.role
        if b.replication is not None:
            b.replication.set_role("SYNC_MASTER")
        self.sss_epoch, self.sss = sss_epoch, sss or {self.broker_id}
        self._bound_confirm()  # before the queues are taken: they hold what is confirmed
        await store.become_writable()
        b.adopt_stored_topics()
        self.epochs.truncate_from_epoch(epoch)
        self.epochs.append(epoch, store.max_phy_offset)
        self.master_epoch = epoch
        self.master_id, self.master_addr = self.broker_id, b.broker_addr
        self.role = "MASTER"
        self.fenced_reason = ""
        self.last_leader_ok = time.monotonic()
        self._poll_afresh()
        b.set_role(master=True, broker_id=0, master_addr="")
        await self.kernel.change_role(MASTER, b)  # delay, timer, transaction checks... start here
        log.info("%s is MASTER of %s at epoch %d (was %s), log end %d", b.broker_addr, self.cfg.brokerName, epoch,
                 was, store.max_phy_offset)

    def _poll_afresh(self) -> None:
        """Drop the poll's call in flight and ask again now. A new master's election lease lasts until
        its first renewal, and the poll may be waiting on the old controller leader or the old master
        a partition cut off (a call timeout each): the renewal would come too late."""
        if self._poll_call is not None:
            self._poll_call.cancel()
        self._repoll.set()

    def _bound_confirm(self) -> None:
        """A master serves below the smallest offset every other SyncStateSet member acknowledged; its
        whole log when the set is itself or allAckInSyncStateSet is false (RocketMQ 5.2+)."""
        others = self.sss - {self.broker_id}
        members = others if others and self.cfg.allAckInSyncStateSet else None
        if self.broker.replication is not None:
            self.broker.replication.set_sync_state_set(members)
        elif isinstance(self.broker.store, ReplicaLog):
            self.broker.store.set_confirm_offset(None)

    def confirm_offset(self) -> int:
        """What consumers may read up to (BrokerHeartbeatRequestHeader.confirmOffset)."""
        store = self.broker.store
        return store.confirm_offset if isinstance(store, ReplicaLog) else store.max_phy_offset

    async def _to_slave(self, master_id: int, master_addr: str, epoch: int) -> None:
        b = self.broker
        was = self.role
        await self.kernel.change_role(SLAVE, b)  # master-only services stop (and persist) before the log may be cut
        b.set_role(master=False, broker_id=self.broker_id, master_addr=master_addr)  # no writes from here on
        if b.replication is not None:
            b.replication.set_role("SLAVE")
            await b.replication.detach()  # no stream from any master (an old one's included) while the log is cut
        cut = await self._truncate_to_master(master_addr)
        self.master_epoch, self.master_id, self.master_addr = epoch, master_id, master_addr
        self.role = "SLAVE"
        ha = await self._ha_address(master_addr)
        if b.replication is not None:
            b.replication.set_role("SLAVE", ha, self.broker_id)
        log.info("%s is SLAVE of %s (id %d, HA %s) at epoch %d (was %s)%s", b.broker_addr, master_addr, master_id,
                 ha, epoch, was, f"; cut {cut} bytes the new master lacks" if cut else "")

    async def _truncate_to_master(self, master_addr: str) -> int:
        """Cut this log back to the last point it shares with the master's (by epoch history)."""
        store = self.broker.store
        for _ in range(10):
            try:
                r = await self._call(master_addr, RequestCode.GET_BROKER_EPOCH_CACHE)
                if r.code == 0:
                    break
            except Exception as e:
                log.info("epoch history of %s not available yet: %s", master_addr, e)
            await anyio.sleep(0.5)
        else:
            raise ControllerError(f"cannot read the epoch history of master {master_addr}")
        doc = loads(r.body)
        theirs = [(int(d["epoch"]), int(d["startOffset"])) for d in doc.get("epochList") or []]
        point = common_point(self.epochs.entries, store.max_phy_offset, theirs, int(doc.get("maxOffset") or 0))
        if point is None:
            raise ControllerError(f"this log shares no epoch with master {master_addr}'s: repair by hand "
                                  "(empty this broker's store to copy the master's)")
        cut = 0
        if point < store.max_phy_offset:
            cut = await store.truncate_log(point)
            self.epochs.truncate_from_offset(point)
        self.epochs.replace([(e, s) for e, s in theirs if s <= store.max_phy_offset])
        return cut

    async def _adopt_master_epochs(self) -> None:
        """A slave's log is a prefix of its master's: keep the master's epoch entries it covers."""
        if not self.master_addr:
            return
        try:
            r = await self._call(self.master_addr, RequestCode.GET_BROKER_EPOCH_CACHE)
            doc = loads(r.body) if r.code == 0 else {}
        except Exception:
            return
        mx = self.broker.store.max_phy_offset
        theirs = [(int(d["epoch"]), int(d["startOffset"])) for d in doc.get("epochList") or []]
        self.epochs.replace([(e, s) for e, s in theirs if s <= mx])

    async def _ha_address(self, master_addr: str) -> str:
        try:
            r = await self._call(master_addr, RequestCode.GET_BROKER_RUNTIME_INFO)
            port = json.loads(r.body)["table"]["haListenPort"]
            return f"{master_addr.rpartition(':')[0]}:{int(port)}"
        except Exception:
            host, _, port = master_addr.rpartition(":")
            return f"{host}:{int(port) + 1}"

    def stats(self) -> dict[str, str]:
        self.lease_held()  # brings fenced_reason up to date
        return {
            "controllerMode": "true",
            "controllerBrokerId": str(self.broker_id),
            "controllerRole": self.role,
            "masterEpoch": str(self.master_epoch),
            "syncStateSet": json.dumps(sorted(self.sss)),
            "syncStateSetEpoch": str(self.sss_epoch),
            "confirmOffset": str(self.confirm_offset()),
            "controllerLeader": self.leader,
            **({"fenced": self.fenced_reason} if self.fenced_reason and self.role == "MASTER" else {}),
        }


def _read(f: ConfigFile) -> str:
    try:
        return f.path.read_text().strip()
    except OSError:
        return ""
