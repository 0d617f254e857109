"""``ControllerService``: one controller node of RocketMQ 5's controller mode, on rmq's remoting.

Requests that change state (apply an id, register, alter the SyncStateSet, elect, clean)
are served by the Raft leader only (others answer CONTROLLER_NOT_LEADER) and one at a
time: decided against the current state, committed through Raft, then answered. A
request whose events cannot be committed (no majority) fails with SYSTEM_ERROR and
changes nothing anywhere.

Liveness is not replicated (as in RocketMQ): every node keeps the heartbeats brokers
send to all controllers. A scan every ``scanNotActiveBrokerInterval`` drops brokers whose
heartbeats stopped, and the leader elects a new master for every broker set whose master
is dead but which has a live replica, then tells the set's live members
(NOTIFY_BROKER_ROLE_CHANGED) when ``notifyBrokerRoleChanged``.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from rmq.kernel import RemotingConfig, source_host
from rmq.plugins.controller.raft import CommitError, RaftState, load_or_create_secret
from rmq.plugins.controller.state import Code, Decision, HeartbeatInfo
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand, ext_bool, ext_int, ext_str
from rmq.protocol.headers import CONTROLLER_LEASE_READ_MS
from rmq.protocol.jsonbody import loads

if TYPE_CHECKING:
    from rmq.kernel import Connection, Kernel, ProcessorRegistry, RemotingClient
    from rmq.roles import ControllerConfig

log = logging.getLogger("rmq.controller")

DEFAULT_HEARTBEAT_TIMEOUT_MS = 10_000
#: brokers heartbeating at once that no registered broker set holds (registered ones are always kept)
MAX_UNREGISTERED_LIVE = 4096
#: cluster and broker names: RocketMQ's topic characters plus "." (they end up in Raft entries and log lines)
NAME = re.compile(r"[%|a-zA-Z0-9_.-]{1,255}")
#: a broker address: host (name, IPv4 or [IPv6]) and port
ADDRESS = re.compile(r"[a-zA-Z0-9_.:\[\]%-]{1,255}:[0-9]{1,5}")
LONG = 2**63
#: s: how recent a majority's answer must be for the leader to answer a poll (a master's lease renewal)
LEASE_READ_S = CONTROLLER_LEASE_READ_MS / 1000


class BadRequest(ValueError):
    """A request field that no broker sends: answered INVALID_REQUEST before anything is decided."""


def _name(cmd: RemotingCommand, key: str) -> str:
    v = ext_str(cmd, key)
    if not NAME.fullmatch(v):
        raise BadRequest(f"{key} {v[:80]!r} is not a name (1-255 of [%|a-zA-Z0-9_.-])")
    return str(v)


def _address(cmd: RemotingCommand, key: str) -> str:
    v = ext_str(cmd, key)
    if not ADDRESS.fullmatch(v) or not 0 < int(v.rpartition(":")[2]) < 65536:
        raise BadRequest(f"{key} {v[:80]!r} is not host:port")
    return str(v)


def _printable(cmd: RemotingCommand, key: str, limit: int = 1024) -> str:
    v = ext_str(cmd, key)
    if len(v) > limit or not v.isprintable() or not v.isascii():
        raise BadRequest(f"{key} is not printable ASCII of at most {limit} characters")
    return str(v)


def _long(v: Any, what: str) -> int:
    if type(v) is not int or not -LONG <= v < LONG:
        raise BadRequest(f"{what} {str(v)[:40]} is not a long")
    return v


def _refusing_bad_requests(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Answer a ``BadRequest`` raised by the handler's parsing with INVALID_REQUEST (nothing was decided)."""

    @functools.wraps(handler)
    async def wrapper(self: Any, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            return await handler(self, conn, cmd)  # type: ignore[no-any-return]
        except BadRequest as e:
            return cmd.response(Code.INVALID_REQUEST, str(e))

    return wrapper
RAFT_SECRET_FILE = "raft.secret"


@attrs.define
class BrokerLive:
    address: str
    last_ms: int
    timeout_ms: int = DEFAULT_HEARTBEAT_TIMEOUT_MS
    epoch: int = -1
    max_offset: int = -1
    confirm_offset: int = -1
    priority: int = 2**31 - 1


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ControllerService:
    def __init__(self, kernel: Kernel, config: ControllerConfig) -> None:
        self.kernel = kernel
        self.config = config
        self.peers = config.peers()
        self.self_id = config.controllerDLegerSelfId
        self.self_addr = self.peers[self.self_id]
        self.raft_of = {pid: self._raft_addr(a) for pid, a in self.peers.items()}
        self.live: dict[tuple[str, str, int], BrokerLive] = {}
        self.raft: RaftState | None = None
        self._lock = anyio.Lock()
        self.client: RemotingClient | None = None
        self.elections = 0
        self.ready_term: int | None = None  # the term whose first entry this node committed as leader
        self.led_since = 0.0  # monotonic s: when this node's leadership of ready_term began serving
        # the heartbeat timeout each registered broker last declared here, kept after it stops (lease_may_run)
        self.timeouts: dict[tuple[str, int], int] = {}
        self._services: dict[str, Any] = {}

    def _raft_addr(self, addr: str) -> str:
        host, _, port = addr.rpartition(":")
        return f"{host}:{int(port) + self.config.raftPortOffset}"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        others = [a for pid, a in self.raft_of.items() if pid != self.self_id]
        self.raft = RaftState(self.raft_of[self.self_id], others, self.config.store_path() / self.self_id,
                              password=self.raft_password(), bind_host=self.config.listenHost,
                              on_leader_change=self._leader_changed)
        self.client = self.kernel.hook.rmq_remoting_make_client(
            kernel=self.kernel, config=RemotingConfig(name="controller-notify", connect_timeout=3.0,
                                                        local_host=source_host(self.config.listenHost)), handler=None
        )

    def raft_password(self) -> str:
        """``raftPassword``, else the secret generated beside the controller store (the config refuses an
        empty one when a peer is off loopback): nodes sharing ``controllerStorePath`` share it; nodes with
        stores of their own need ``raftPassword``."""
        if self.config.raftPassword:
            return self.config.raftPassword
        path = self.config.store_path() / RAFT_SECRET_FILE
        secret = load_or_create_secret(path)
        if len(self.peers) > 1:
            log.info("raft secret from %s: every controller of the group must use it (the same "
                     "controllerStorePath, or the same raftPassword)", path)
        return secret

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.aclose()
        if self.raft is not None:
            await anyio.to_thread.run_sync(self.raft.close)

    def _leader_changed(self) -> None:  # pysyncobj's thread: logging only
        log.info("controller %s: raft state changed (leader now %s)", self.self_id, self.leader_addr() or "none")

    @property
    def is_leader(self) -> bool:
        return self.raft is not None and self.raft.is_leader

    def leader_addr(self) -> str:
        if self.raft is None:
            return ""
        raft_leader = self.raft.leader
        for pid, ra in self.raft_of.items():
            if ra == raft_leader:
                return self.peers[pid]
        return ""

    def leader_id(self) -> str:
        addr = self.leader_addr()
        return next((pid for pid, a in self.peers.items() if a == addr), "")

    # ------------------------------------------------------------------ liveness

    def alive(self, cluster: str, name: str, bid: int) -> bool:
        b = self.live.get((cluster, name, bid))
        return b is not None and b.last_ms + b.timeout_ms >= _now_ms()

    def lease_may_run(self, cluster: str, name: str, master: int) -> bool:
        """Whether a master this leader has not heard for a heartbeat timeout may still hold a lease
        granted by an earlier leader. Such a grant came while that leader still had a majority, so before
        this leadership began plus ``LEASE_READ_S``, and a lease lasts the master's heartbeat timeout less
        ``LEASE_READ_S``: once this node has led for that timeout (as the master last declared it here;
        else the longest the set's live members declare) every such lease has ended, and only then is a
        new master elected. Beyond RocketMQ, whose new leader elects as soon as its liveness table says."""
        timeout_ms = self.timeouts.get((name, master)) or max(
            (b.timeout_ms for (c, n, _), b in self.live.items() if c == cluster and n == name),
            default=DEFAULT_HEARTBEAT_TIMEOUT_MS)
        return time.monotonic() - self.led_since < timeout_ms / 1000

    def info(self, cluster: str, name: str, bid: int) -> HeartbeatInfo:
        b = self.live.get((cluster, name, bid))
        if b is None:
            return HeartbeatInfo()
        return HeartbeatInfo(b.epoch, b.max_offset, b.priority)

    async def run_leader_barrier(self) -> None:
        """A new leader serves nothing until an entry of its own term is committed: only then are the
        entries earlier leaders left known committed and applied (Raft; RocketMQ's leader appends an
        empty entry first for the same reason)."""
        term = None
        while True:
            raft = self.raft
            if raft is not None and raft.is_leader:
                current = raft.raftCurrentTerm
                if term != current:
                    try:
                        await raft.commit([{"type": "Noop"}], timeout=3)
                        term = current
                        self.led_since = time.monotonic()
                        self.ready_term = current
                    except CommitError:
                        pass
            await anyio.sleep(0.1)

    @property
    def leader_ready(self) -> bool:
        raft = self.raft
        return raft is not None and raft.is_leader and self.ready_term == raft.raftCurrentTerm

    async def run_scanner(self) -> None:
        interval = max(self.config.scanNotActiveBrokerInterval, 100) / 1000
        await anyio.sleep(min(2.0, interval))
        while True:
            now = _now_ms()
            for key, b in list(self.live.items()):
                if b.last_ms + b.timeout_ms < now:
                    del self.live[key]
                    log.info("broker %s id %d at %s stopped heartbeating", key[1], key[2], b.address)
            if self.leader_ready:
                await self._elect_where_master_dead()
            await anyio.sleep(interval)

    async def _elect_where_master_dead(self) -> None:
        assert self.raft is not None
        with self.raft.lock:
            sets = [(st.cluster, name, st.master_id) for name, st in self.raft.state.states.items()]
        for cluster, name, master in sets:
            if master is not None and (self.alive(cluster, name, master) or self.lease_may_run(cluster, name, master)):
                continue
            members = self.raft.state.replicas.get(name)
            if members is None or not any(self.alive(cluster, name, i) for i in members.ids):
                continue
            if master is None and self.raft.state.states[name].master_epoch == 0:
                continue  # never elected: the first broker asks for itself
            for attempt in range(max(1, self.config.electMasterMaxRetryCount)):
                d = await self._write(lambda name=name: self.raft.state.elect_master(  # type: ignore[union-attr]
                    name, None, False, self.alive, self.info, self.config.enableElectUncleanMaster))
                if d.code == Code.SUCCESS:
                    log.info("elected broker %s id %s (%s) as master of %s, epoch %s", name,
                             d.header["masterBrokerId"], d.header["masterAddress"], name, d.header["masterEpoch"])
                    self.elections += 1
                    self._notify(name, d)
                    break
                if d.code in (Code.MASTER_STILL_EXIST, Code.MASTER_NOT_AVAILABLE):
                    if d.code == Code.MASTER_NOT_AVAILABLE:
                        log.warning("no replica of %s can be elected: %s", name, d.remark)
                    break
                log.warning("election for %s failed (attempt %d): %s %s", name, attempt + 1, d.code, d.remark)

    def _notify(self, name: str, d: Decision) -> None:
        if not self.config.notifyBrokerRoleChanged or self.client is None or self.raft is None:
            return
        rep = self.raft.state.replicas.get(name)
        if rep is None:
            return
        ext = {k: d.header[k] for k in ("masterAddress", "masterEpoch", "syncStateSetEpoch", "masterBrokerId")}
        body = json.dumps({"syncStateSet": d.body["syncStateSet"],
                           "syncStateSetEpoch": int(d.header["syncStateSetEpoch"])}).encode()
        for bid, (addr, _code) in rep.ids.items():
            if self.alive(rep.cluster, name, bid):
                self.kernel.task_group.start_soon(self._notify_one, addr, ext, body)

    async def _notify_one(self, addr: str, ext: dict[str, str], body: bytes) -> None:
        assert self.client is not None
        try:
            with anyio.move_on_after(3):
                await self.client.invoke_oneway(
                    addr, RemotingCommand.request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, dict(ext), body))
        except Exception as e:
            log.info("role change notice to %s failed: %s", addr, e)

    # ------------------------------------------------------------------ the decide/commit pipeline

    async def _write(self, decide: Callable[[], Decision]) -> Decision:
        raft = self.raft
        if raft is None or not self.leader_ready:
            return Decision(Code.NOT_LEADER, remark=f"controller {self.self_id} is not the leader "
                                                     f"(leader: {self.leader_addr() or 'none'})")
        async with self._lock:
            with raft.lock:
                d = decide()
            if d.events:
                try:
                    await raft.commit(d.events)
                except CommitError as e:
                    return Decision(int(ResponseCode.SYSTEM_ERROR), remark=str(e))
        return d

    def _read(self, decide: Callable[[], Decision]) -> Decision:
        raft = self.raft
        if raft is None or not self.leader_ready:
            return Decision(Code.NOT_LEADER, remark=f"controller {self.self_id} is not the leader")
        with raft.lock:
            return decide()

    @staticmethod
    def _answer(cmd: RemotingCommand, d: Decision) -> RemotingCommand:
        body = json.dumps(d.body, separators=(",", ":")).encode() if d.body is not None else b""
        return cmd.response(d.code, d.remark or None, dict(d.header), body)

    # ------------------------------------------------------------------ processors

    def register(self, registry: ProcessorRegistry, owner: str) -> None:
        from rmq.protocol.access import ADMIN, SIGNED

        self._services = registry.services
        rc = RequestCode
        # writes change who is master: a cluster member's (brokers) or an operator's; reads are open
        for code, proc, acc in (
            (rc.BROKER_HEARTBEAT, self.heartbeat, ADMIN),
            (rc.CONTROLLER_GET_NEXT_BROKER_ID, self.next_broker_id, SIGNED),
            (rc.CONTROLLER_APPLY_BROKER_ID, self.apply_broker_id, ADMIN),
            (rc.CONTROLLER_REGISTER_BROKER, self.register_broker, ADMIN),
            (rc.CONTROLLER_GET_REPLICA_INFO, self.get_replica_info, SIGNED),
            (rc.CONTROLLER_ALTER_SYNC_STATE_SET, self.alter_sync_state_set, ADMIN),
            (rc.CONTROLLER_ELECT_MASTER, self.elect_master, ADMIN),
            (rc.CONTROLLER_GET_METADATA_INFO, self.metadata, SIGNED),
            (rc.CONTROLLER_GET_SYNC_STATE_DATA, self.sync_state_data, SIGNED),
            (rc.CLEAN_BROKER_DATA, self.clean_broker_data, ADMIN),
        ):
            registry.register(code, proc, owner=owner, access=acc)

    @_refusing_bad_requests
    async def heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cluster, name, addr = _name(cmd, "clusterName"), _name(cmd, "brokerName"), _address(cmd, "brokerAddr")
        bid = ext_int(cmd, "brokerId", -1)
        if bid < 0:
            return cmd.response(Code.INVALID_REQUEST, "heartbeat without a brokerId")
        key = (cluster, name, bid)
        b = self.live.get(key)
        epoch, max_offset = ext_int(cmd, "epoch", -1), ext_int(cmd, "maxOffset", -1)
        timeout = ext_int(cmd, "heartbeatTimeoutMills", DEFAULT_HEARTBEAT_TIMEOUT_MS)
        priority = ext_int(cmd, "electionPriority", 2**31 - 1)
        if b is None and len(self.live) >= MAX_UNREGISTERED_LIVE and not self._registered(name, bid):
            return cmd.response(ResponseCode.SYSTEM_BUSY, f"{len(self.live)} brokers heartbeating; broker {name} "
                                                          f"id {bid} is not registered")
        if b is None:
            b = self.live[key] = BrokerLive(addr, _now_ms(), timeout, epoch, max_offset,
                                            ext_int(cmd, "confirmOffset", -1), priority)
            log.info("broker %s id %d at %s is heartbeating", name, bid, addr)
        else:
            b.address, b.last_ms, b.timeout_ms, b.priority = addr, _now_ms(), timeout, priority
        if self.timeouts.get((name, bid)) != timeout and self._registered(name, bid):  # bounded by the Raft state
            self.timeouts[name, bid] = timeout
            if (epoch, max_offset) > (b.epoch, b.max_offset):
                b.epoch, b.max_offset = epoch, max_offset
                b.confirm_offset = ext_int(cmd, "confirmOffset", -1)
        return cmd.response()

    def _registered(self, name: str, bid: int) -> bool:
        raft = self.raft
        if raft is None:
            return False
        with raft.lock:
            rep = raft.state.replicas.get(name)
            return rep is not None and bid in rep.ids

    @_refusing_bad_requests
    async def next_broker_id(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cluster, name = _name(cmd, "clusterName"), _name(cmd, "brokerName")
        return self._answer(cmd, self._read(lambda: self.raft.state.next_broker_id(cluster, name)))  # type: ignore[union-attr]

    @_refusing_bad_requests
    async def apply_broker_id(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cluster, name = _name(cmd, "clusterName"), _name(cmd, "brokerName")
        bid, code = ext_int(cmd, "appliedBrokerId"), _printable(cmd, "registerCheckCode")
        d = await self._write(lambda: self.raft.state.apply_broker_id(cluster, name, bid, code))  # type: ignore[union-attr]
        return self._answer(cmd, d)

    @_refusing_bad_requests
    async def register_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        cluster, name = _name(cmd, "clusterName"), _name(cmd, "brokerName")
        bid, addr = ext_int(cmd, "brokerId"), _address(cmd, "brokerAddress")
        d = await self._write(lambda: self.raft.state.register_broker(cluster, name, bid, addr, self.alive))  # type: ignore[union-attr]
        return self._answer(cmd, d)

    @_refusing_bad_requests
    async def get_replica_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """A broker's poll, and a master's lease renewal: answered only by a leader a majority answered
        within LEASE_READ_S. A leader cut off from its followers leads on until it steps down (twice the
        election timeout), and its answers would keep a cut-off master writable after the majority
        elected another (beyond RocketMQ, whose master takes no lease from it). A master's own poll (it
        names its id and address; an admin's signature when ACL is on) also counts as its heartbeat
        here: the lease it renews then ends before this leader could find it dead, whenever its
        heartbeats themselves travel."""
        name = _name(cmd, "brokerName")
        raft = self.raft
        if raft is not None and self.leader_ready and not raft.majority_heard_within(LEASE_READ_S):
            return cmd.response(Code.NOT_LEADER, f"controller {self.self_id} has not heard from a majority "
                                                 f"for {LEASE_READ_S:g} s")
        d = self._read(lambda: self.raft.state.get_replica_info(name, self.alive))  # type: ignore[union-attr]
        if d.code == Code.SUCCESS and cmd.ext.get("brokerId") is not None:
            self._polled_by_master(conn, cmd, name, d)
        return self._answer(cmd, d)

    def _polled_by_master(self, conn: Connection, cmd: RemotingCommand, name: str, d: Decision) -> None:
        from rmq.protocol.access import is_admin

        bid = ext_int(cmd, "brokerId", -1)
        if str(bid) != str(d.header.get("masterBrokerId")) or _address(cmd, "brokerAddress") != d.header.get(
                "masterAddress") or not is_admin(self._services, conn.remote_addr[0], cmd):
            return
        with self.raft.lock:  # type: ignore[union-attr]
            rep = self.raft.state.replicas.get(name)  # type: ignore[union-attr]
        if rep is None:
            return
        key = (rep.cluster, name, bid)
        b = self.live.get(key)
        if b is None:
            timeout = ext_int(cmd, "heartbeatTimeoutMills", DEFAULT_HEARTBEAT_TIMEOUT_MS)
            self.live[key] = BrokerLive(str(d.header["masterAddress"]), _now_ms(), timeout)
        else:
            b.last_ms = _now_ms()

    @_refusing_bad_requests
    async def alter_sync_state_set(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name = _name(cmd, "brokerName")
        master, epoch = ext_int(cmd, "masterBrokerId"), ext_int(cmd, "masterEpoch")
        try:
            doc = loads(cmd.body or b"{}")
            ids = doc["syncStateSet"]
            if not isinstance(ids, list) or len(ids) > 1024:
                raise BadRequest("syncStateSet is not a list of at most 1024 broker ids")
            new = [_long(i, "broker id") for i in ids]
            sss_epoch = _long(doc["syncStateSetEpoch"], "syncStateSetEpoch")
        except (ValueError, KeyError, TypeError) as e:
            return cmd.response(Code.INVALID_REQUEST, f"bad sync state set body: {e}")
        d = await self._write(lambda: self.raft.state.alter_sync_state_set(  # type: ignore[union-attr]
            name, master, epoch, new, sss_epoch, self.alive))
        return self._answer(cmd, d)

    @_refusing_bad_requests
    async def elect_master(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name = _name(cmd, "brokerName")
        bid = ext_int(cmd, "brokerId", -1)
        designate = ext_bool(cmd, "designateElect", False)
        d = await self._write(lambda: self.raft.state.elect_master(  # type: ignore[union-attr]
            name, bid, designate, self.alive, self.info, self.config.enableElectUncleanMaster))
        if d.code == Code.SUCCESS:
            self.elections += 1
            log.info("elected broker %s id %s as master (asked by %s), epoch %s", name, d.header["masterBrokerId"],
                     "an admin" if designate else f"broker {bid}", d.header["masterEpoch"])
            self._notify(name, d)
        return self._answer(cmd, d)

    async def metadata(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        peers = "".join(f"{pid}:{addr};" for pid, addr in self.peers.items())
        return cmd.response(ext={
            "group": self.config.controllerDLegerGroup,
            "controllerLeaderId": self.leader_id(),
            "controllerLeaderAddress": self.leader_addr(),
            "isLeader": "true" if self.leader_ready else "false",
            "peers": peers,
        })

    async def sync_state_data(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        try:
            names = loads(cmd.body) if cmd.body else []
        except (ValueError, TypeError) as e:
            return cmd.response(Code.INVALID_REQUEST, f"body must be a JSON list of broker names: {e}")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return cmd.response(Code.INVALID_REQUEST, "body must be a JSON list of broker names")
        raft = self.raft
        if raft is None or not self.leader_ready:
            return cmd.response(Code.NOT_LEADER, f"controller {self.self_id} is not the leader")
        table: dict[str, Any] = {}
        with raft.lock:
            for name in names or list(raft.state.states):
                st, rep = raft.state.states.get(name), raft.state.replicas.get(name)
                if st is None or rep is None:
                    continue

                def member(i: int, rep: Any = rep, name: str = name) -> dict[str, Any]:
                    return {"brokerName": name, "brokerId": i, "brokerAddress": rep.ids[i][0],
                            "alive": self.alive(rep.cluster, name, i)}

                table[name] = {
                    "masterBrokerId": st.master_id,
                    "masterAddress": rep.ids[st.master_id][0] if st.master_id in rep.ids else None,
                    "masterEpoch": st.master_epoch,
                    "syncStateSetEpoch": st.sss_epoch,
                    "inSyncReplicas": [member(i) for i in sorted(st.sss) if i in rep.ids],
                    "notInSyncReplicas": [member(i) for i in sorted(rep.ids) if i not in st.sss],
                }
        return cmd.response(body=json.dumps({"replicasInfoTable": table}, separators=(",", ":")).encode())

    @_refusing_bad_requests
    async def clean_broker_data(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name = _name(cmd, "brokerName")
        raw = ext_str(cmd, "brokerControllerIdsToClean", "") or ""
        try:
            ids = [int(x) for x in raw.split(";") if x.strip()]
        except ValueError:
            return cmd.response(Code.INVALID_REQUEST, f"brokerControllerIdsToClean {raw!r} is not ids separated by ;")
        living = ext_bool(cmd, "isCleanLivingBroker", False)
        d = await self._write(lambda: self.raft.state.clean_broker_data(name, ids or None, living, self.alive))  # type: ignore[union-attr]
        return self._answer(cmd, d)
