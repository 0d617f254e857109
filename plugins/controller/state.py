"""The controller's replicated state (RocketMQ 5's ReplicasInfoManager), as a deterministic event log.

Per ``brokerName``: the replicas (broker id → address and register check code, the next
id to hand out) and the sync state (master id, master epoch, SyncStateSet and its epoch).
Requests are *decided* against the current state and produce events; the state changes
only when events are *applied*. The Raft layer appends a request's events and applies
them on every node in log order, so every node reaches the same state and a request is
answered only once its events are committed. Nothing here does I/O or reads a clock:
liveness comes in as a predicate and heartbeat figures, so the same inputs always give
the same answer (unit-tested without a network).

Response codes and rules are RocketMQ's (CONTROLLER_* 2000-2016); see
``reference/rocketmq-ha-controller.md`` §2.2-2.5.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs

__all__ = [
    "Code",
    "Decision",
    "HeartbeatInfo",
    "ReplicasInfo",
    "decode_event",
    "encode_event",
]


class Code:
    SUCCESS = 0
    FENCED_MASTER_EPOCH = 2000
    FENCED_SYNC_STATE_SET_EPOCH = 2001
    INVALID_MASTER = 2002
    INVALID_REPLICAS = 2003
    MASTER_NOT_AVAILABLE = 2004
    INVALID_REQUEST = 2005
    BROKER_NOT_ALIVE = 2006
    NOT_LEADER = 2007
    BROKER_METADATA_NOT_EXIST = 2008
    INVALID_CLEAN_BROKER_METADATA = 2009
    BROKER_NEED_TO_BE_REGISTERED = 2010
    MASTER_STILL_EXIST = 2011
    ELECT_MASTER_FAILED = 2012
    ALTER_SYNC_STATE_SET_FAILED = 2013
    BROKER_ID_INVALID = 2014


@attrs.define
class Replicas:
    cluster: str
    broker_name: str
    next_id: int = 1
    ids: dict[int, tuple[str, str]] = attrs.field(factory=dict)  # id -> (address, register check code)


@attrs.define
class SyncState:
    cluster: str
    broker_name: str
    master_epoch: int = 0
    sss_epoch: int = 0
    sss: frozenset[int] = frozenset()
    master_id: int | None = None


@attrs.frozen
class HeartbeatInfo:
    """What a broker's heartbeats said last (the election ranks candidates by it)."""

    epoch: int = -1
    max_offset: int = -1
    priority: int = 2**31 - 1  # brokerElectionPriority: lower wins


@attrs.frozen
class Decision:
    """A request's answer and the events that must be committed before it is sent."""

    code: int
    header: dict[str, str] = attrs.field(factory=dict)
    body: Any = None
    events: tuple[dict[str, Any], ...] = ()
    remark: str = ""


# events are plain dicts (msgpack-able): {"type": name, ...fields}
def encode_event(ev: dict[str, Any]) -> dict[str, Any]:
    return {k: (sorted(v) if isinstance(v, (set, frozenset)) else v) for k, v in ev.items()}


def decode_event(ev: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(ev, dict) or ev.get("type") not in _APPLY:
        raise ValueError(f"not a controller event: {ev!r}")
    return ev


Alive = Callable[[str, str, int], bool]  # (cluster, brokerName, brokerId) -> alive


class ReplicasInfo:
    """All broker sets the controller knows."""

    def __init__(self) -> None:
        self.replicas: dict[str, Replicas] = {}
        self.states: dict[str, SyncState] = {}

    # ------------------------------------------------------------------ apply (every node, log order)

    def apply(self, ev: dict[str, Any]) -> None:
        _APPLY[ev["type"]](self, ev)

    def _apply_alter(self, ev: dict[str, Any]) -> None:
        st = self.states.get(ev["brokerName"])
        if st is not None:
            st.sss = frozenset(ev["syncStateSet"])
            st.sss_epoch += 1

    def _apply_broker_id(self, ev: dict[str, Any]) -> None:
        name = ev["brokerName"]
        if name not in self.replicas:
            self.replicas[name] = Replicas(ev["clusterName"], name)
            self.states[name] = SyncState(ev["clusterName"], name)
        rep = self.replicas[name]
        bid = ev["brokerId"]
        if bid not in rep.ids:
            rep.ids[bid] = (ev["brokerAddress"], ev["registerCheckCode"])
            rep.next_id = max(rep.next_id, bid + 1)

    def _apply_elect(self, ev: dict[str, Any]) -> None:
        st = self.states.get(ev["brokerName"])
        if st is None:
            return
        new = ev.get("newMasterId")
        st.master_id = new
        st.master_epoch += 1  # even when the election failed (no master)
        if new is not None:
            st.sss = frozenset([new])
            st.sss_epoch += 1

    def _apply_clean(self, ev: dict[str, Any]) -> None:
        name = ev["brokerName"]
        ids = ev.get("brokerIds")
        if not ids:
            self.replicas.pop(name, None)
            self.states.pop(name, None)
            return
        rep, st = self.replicas.get(name), self.states.get(name)
        if rep is not None:
            for bid in ids:
                rep.ids.pop(bid, None)
            if not rep.ids:
                self.replicas.pop(name, None)
                self.states.pop(name, None)
                return
        if st is not None:
            st.sss = st.sss - set(ids)
            if st.master_id in ids:
                st.master_id = None

    def _apply_update_address(self, ev: dict[str, Any]) -> None:
        rep = self.replicas.get(ev["brokerName"])
        if rep is not None and ev["brokerId"] in rep.ids:
            rep.ids[ev["brokerId"]] = (ev["brokerAddress"], rep.ids[ev["brokerId"]][1])

    # ------------------------------------------------------------------ decide (leader, current state)

    def _master_fields(self, name: str, alive: Alive) -> dict[str, str]:
        st, rep = self.states[name], self.replicas[name]
        out = {"masterEpoch": str(st.master_epoch), "syncStateSetEpoch": str(st.sss_epoch)}
        if st.master_id is not None and st.master_id in rep.ids and alive(rep.cluster, name, st.master_id):
            out["masterBrokerId"] = str(st.master_id)
            out["masterAddress"] = rep.ids[st.master_id][0]
        return out

    def _sss_body(self, name: str) -> dict[str, Any]:
        st = self.states[name]
        return {"syncStateSet": sorted(st.sss), "syncStateSetEpoch": st.sss_epoch}

    def next_broker_id(self, cluster: str, name: str) -> Decision:
        rep = self.replicas.get(name)
        nxt = rep.next_id if rep is not None else 1
        return Decision(Code.SUCCESS, {"clusterName": cluster, "brokerName": name, "nextBrokerId": str(nxt)})

    def apply_broker_id(self, cluster: str, name: str, broker_id: int, check_code: str) -> Decision:
        addr = check_code.split(";")[0]
        hdr = {"clusterName": cluster, "brokerName": name}
        rep = self.replicas.get(name)
        if rep is None:
            if broker_id != 1:
                return Decision(Code.BROKER_ID_INVALID, hdr, remark=f"the first broker of {name} must take id 1")
        elif broker_id in rep.ids:
            if rep.ids[broker_id][1] != check_code:
                return Decision(Code.BROKER_ID_INVALID, hdr, remark=f"broker id {broker_id} of {name} is taken")
            return Decision(Code.SUCCESS, hdr)
        elif broker_id <= 0:
            return Decision(Code.BROKER_ID_INVALID, hdr, remark=f"broker id {broker_id} is not above 0")
        ev = {"type": "ApplyBrokerId", "clusterName": cluster, "brokerName": name, "brokerId": broker_id,
              "brokerAddress": addr, "registerCheckCode": check_code}
        return Decision(Code.SUCCESS, hdr, events=(ev,))

    def register_broker(self, cluster: str, name: str, broker_id: int, address: str, alive: Alive) -> Decision:
        rep = self.replicas.get(name)
        if rep is None or broker_id not in rep.ids:
            return Decision(Code.BROKER_NEED_TO_BE_REGISTERED, remark=f"broker {name} id {broker_id} has not applied for an id")
        events: tuple[dict[str, Any], ...] = ()
        if rep.ids[broker_id][0] != address:
            events = ({"type": "UpdateBrokerAddress", "brokerName": name, "brokerId": broker_id,
                       "brokerAddress": address},)
        hdr = {"clusterName": cluster, "brokerName": name, **self._master_fields(name, alive)}
        return Decision(Code.SUCCESS, hdr, self._sss_body(name), events)

    def get_replica_info(self, name: str, alive: Alive) -> Decision:
        if name not in self.states:
            return Decision(Code.BROKER_METADATA_NOT_EXIST, remark=f"broker {name} is unknown")
        return Decision(Code.SUCCESS, self._master_fields(name, alive), self._sss_body(name))

    def alter_sync_state_set(
        self, name: str, master_id: int, master_epoch: int, new_sss: Iterable[int], sss_epoch: int, alive: Alive
    ) -> Decision:
        st, rep = self.states.get(name), self.replicas.get(name)
        new = frozenset(new_sss)
        if st is None or rep is None:
            return Decision(Code.ALTER_SYNC_STATE_SET_FAILED, remark=f"broker {name} is unknown")
        if new == st.sss:
            return Decision(Code.ALTER_SYNC_STATE_SET_FAILED, remark="the sync state set is unchanged")
        if st.master_id != master_id:
            return Decision(Code.INVALID_MASTER, remark=f"{master_id} is not the master ({st.master_id})")
        if st.master_epoch != master_epoch:
            return Decision(Code.FENCED_MASTER_EPOCH, remark=f"master epoch {master_epoch} is not {st.master_epoch}")
        if st.sss_epoch != sss_epoch:
            return Decision(Code.FENCED_SYNC_STATE_SET_EPOCH, remark=f"sync state set epoch {sss_epoch} is not {st.sss_epoch}")
        for bid in new:
            if bid not in rep.ids:
                return Decision(Code.INVALID_REPLICAS, remark=f"broker id {bid} is not registered")
            if not alive(rep.cluster, name, bid):
                return Decision(Code.BROKER_NOT_ALIVE, remark=f"broker id {bid} is not alive")
        if master_id not in new:
            return Decision(Code.ALTER_SYNC_STATE_SET_FAILED, remark="the new set lacks the master")
        ev = {"type": "AlterSyncStateSet", "brokerName": name, "syncStateSet": sorted(new)}
        body = {"syncStateSet": sorted(new), "syncStateSetEpoch": st.sss_epoch + 1}
        return Decision(Code.SUCCESS, {"newSyncStateSetEpoch": str(st.sss_epoch + 1)}, body, (ev,))

    def elect_master(
        self,
        name: str,
        broker_id: int | None,
        designate: bool,
        alive: Alive,
        info: Callable[[str, str, int], HeartbeatInfo],
        allow_unclean: bool = False,
    ) -> Decision:
        """``broker_id`` None or -1: the controller itself asks (a dead master); otherwise a broker or an
        admin (``designate``: that broker and no other)."""
        st, rep = self.states.get(name), self.replicas.get(name)
        if st is None or rep is None:
            return Decision(Code.BROKER_NEED_TO_BE_REGISTERED, remark=f"broker {name} is unknown")
        by_controller = broker_id is None or broker_id < 0
        if st.master_epoch == 0 and not by_controller and broker_id in rep.ids:
            new: int | None = broker_id
        else:
            prefer = broker_id if designate and not by_controller else None
            new = self._pick(rep, st, st.sss, prefer, alive, info)
            if new is None and allow_unclean:
                new = self._pick(rep, st, rep.ids.keys(), prefer, alive, info)
        if new is not None and new == st.master_id:
            hdr = self._elect_header(name, new, st.master_epoch, st.sss_epoch)
            return Decision(Code.MASTER_STILL_EXIST, hdr, self._member_body(name, st.sss))
        if new is None:
            if by_controller:
                return Decision(Code.MASTER_NOT_AVAILABLE, events=({"type": "ElectMaster", "brokerName": name,
                                                                   "newMasterId": None},),
                                remark=f"no alive in-sync replica of {name} to elect")
            return Decision(Code.ELECT_MASTER_FAILED, remark=f"no eligible replica of {name} to elect")
        ev = {"type": "ElectMaster", "brokerName": name, "newMasterId": new}
        hdr = self._elect_header(name, new, st.master_epoch + 1, st.sss_epoch + 1)
        return Decision(Code.SUCCESS, hdr, self._member_body(name, frozenset([new])), (ev,))

    def _elect_header(self, name: str, master: int, master_epoch: int, sss_epoch: int) -> dict[str, str]:
        return {"masterBrokerId": str(master), "masterAddress": self.replicas[name].ids[master][0],
                "masterEpoch": str(master_epoch), "syncStateSetEpoch": str(sss_epoch)}

    def _member_body(self, name: str, sss: frozenset[int]) -> dict[str, Any]:
        rep = self.replicas[name]
        return {"brokerMemberGroup": {"cluster": rep.cluster, "brokerName": name,
                                      "brokerAddrs": {str(i): a for i, (a, _c) in sorted(rep.ids.items())}},
                "syncStateSet": sorted(sss)}

    @staticmethod
    def _pick(
        rep: Replicas,
        st: SyncState,
        pool: Iterable[int],
        prefer: int | None,
        alive: Alive,
        info: Callable[[str, str, int], HeartbeatInfo],
    ) -> int | None:
        """RocketMQ's DefaultElectPolicy over ``pool``: alive ids only; the old master if it is alive
        (and not overridden); a preferred id if alive; else the best by epoch, max offset, priority."""
        live = [i for i in pool if i in rep.ids and alive(rep.cluster, rep.broker_name, i)]
        if not live:
            return None
        if st.master_id in live and (prefer is None or prefer == st.master_id):
            return st.master_id
        if prefer is not None:
            return prefer if prefer in live else None

        def rank(i: int) -> tuple[int, int, int, int]:
            h = info(rep.cluster, rep.broker_name, i)
            return (-h.epoch, -h.max_offset, h.priority, i)

        return min(live, key=rank)

    def clean_broker_data(self, name: str, ids: list[int] | None, clean_living: bool, alive: Alive) -> Decision:
        rep, st = self.replicas.get(name), self.states.get(name)
        if rep is None or st is None:
            return Decision(Code.INVALID_CLEAN_BROKER_METADATA, remark=f"broker {name} is unknown")
        if not clean_living:
            if ids:
                for bid in ids:
                    if alive(rep.cluster, name, bid):
                        return Decision(Code.INVALID_CLEAN_BROKER_METADATA, remark=f"broker id {bid} is alive")
            elif st.master_id is not None:
                return Decision(Code.INVALID_CLEAN_BROKER_METADATA, remark=f"{name} still has a master")
        return Decision(Code.SUCCESS, events=({"type": "CleanBrokerData", "brokerName": name,
                                               "brokerIds": sorted(ids or [])},))

    def snapshot(self) -> dict[str, Any]:
        """Everything, for GET_SYNC_STATE_DATA-like views and tests (plain data)."""
        return {
            name: {
                "cluster": rep.cluster,
                "nextBrokerId": rep.next_id,
                "brokers": {i: a for i, (a, _c) in sorted(rep.ids.items())},
                "masterBrokerId": self.states[name].master_id,
                "masterEpoch": self.states[name].master_epoch,
                "syncStateSet": sorted(self.states[name].sss),
                "syncStateSetEpoch": self.states[name].sss_epoch,
            }
            for name, rep in sorted(self.replicas.items())
        }


_APPLY: dict[str, Callable[[ReplicasInfo, dict[str, Any]], None]] = {
    "Noop": lambda state, ev: None,  # a new leader's first entry: it commits what earlier terms left
    "AlterSyncStateSet": ReplicasInfo._apply_alter,
    "ApplyBrokerId": ReplicasInfo._apply_broker_id,
    "ElectMaster": ReplicasInfo._apply_elect,
    "CleanBrokerData": ReplicasInfo._apply_clean,
    "UpdateBrokerAddress": ReplicasInfo._apply_update_address,
}
