"""The controller's state machine: RocketMQ's decision rules, events applied in order, same state everywhere."""

from __future__ import annotations

from typing import Any

from rmq.plugins.controller.state import Code, HeartbeatInfo, ReplicasInfo

ALL_ALIVE = lambda c, n, i: True  # noqa: E731


def commit(state: ReplicasInfo, decision: Any) -> Any:
    for ev in decision.events:
        state.apply(ev)
    return decision


def group(n: int = 3) -> ReplicasInfo:
    s = ReplicasInfo()
    for i in range(1, n + 1):
        assert commit(s, s.apply_broker_id("C", "b", i, f"10.0.0.{i}:10911;code{i}")).code == Code.SUCCESS
    return s


def test_broker_ids_are_applied_once_per_check_code() -> None:
    s = ReplicasInfo()
    assert s.next_broker_id("C", "b").header["nextBrokerId"] == "1"
    assert s.apply_broker_id("C", "b", 2, "a:1;x").code == Code.BROKER_ID_INVALID  # a new set starts at 1
    commit(s, s.apply_broker_id("C", "b", 1, "a:1;x"))
    assert s.next_broker_id("C", "b").header["nextBrokerId"] == "2"
    again = s.apply_broker_id("C", "b", 1, "a:1;x")
    assert again.code == Code.SUCCESS and not again.events  # idempotent for the same broker
    assert s.apply_broker_id("C", "b", 1, "other:1;y").code == Code.BROKER_ID_INVALID


def test_first_election_and_register_answers() -> None:
    s = group()
    assert s.register_broker("C", "b", 9, "x", ALL_ALIVE).code == Code.BROKER_NEED_TO_BE_REGISTERED
    r = s.register_broker("C", "b", 2, "10.0.0.2:10911", ALL_ALIVE)
    assert r.code == 0 and "masterBrokerId" not in r.header and r.header["masterEpoch"] == "0"
    d = commit(s, s.elect_master("b", 2, False, ALL_ALIVE, lambda *a: HeartbeatInfo()))
    assert d.code == 0 and d.header["masterBrokerId"] == "2" and d.header["masterEpoch"] == "1"
    assert d.body["syncStateSet"] == [2] and d.body["brokerMemberGroup"]["brokerAddrs"]["1"] == "10.0.0.1:10911"
    r = s.register_broker("C", "b", 3, "10.0.0.33:10911", ALL_ALIVE)  # an address change is an event
    assert r.header["masterBrokerId"] == "2" and r.events[0]["type"] == "UpdateBrokerAddress"
    commit(s, r)
    assert s.snapshot()["b"]["brokers"][3] == "10.0.0.33:10911"
    dead_master = lambda c, n, i: i != 2  # noqa: E731
    assert "masterBrokerId" not in s.register_broker("C", "b", 1, "10.0.0.1:10911", dead_master).header


def test_alter_sync_state_set_is_fenced_by_epochs() -> None:
    s = group()
    commit(s, s.elect_master("b", 1, False, ALL_ALIVE, lambda *a: HeartbeatInfo()))
    st = s.snapshot()["b"]
    assert (st["masterEpoch"], st["syncStateSetEpoch"], st["syncStateSet"]) == (1, 1, [1])
    assert s.alter_sync_state_set("b", 2, 1, [1, 2], 1, ALL_ALIVE).code == Code.INVALID_MASTER
    assert s.alter_sync_state_set("b", 1, 0, [1, 2], 1, ALL_ALIVE).code == Code.FENCED_MASTER_EPOCH
    assert s.alter_sync_state_set("b", 1, 1, [1, 2], 0, ALL_ALIVE).code == Code.FENCED_SYNC_STATE_SET_EPOCH
    assert s.alter_sync_state_set("b", 1, 1, [1, 7], 1, ALL_ALIVE).code == Code.INVALID_REPLICAS
    assert s.alter_sync_state_set("b", 1, 1, [1, 2], 1, lambda c, n, i: i != 2).code == Code.BROKER_NOT_ALIVE
    assert s.alter_sync_state_set("b", 1, 1, [2, 3], 1, ALL_ALIVE).code == Code.ALTER_SYNC_STATE_SET_FAILED
    assert s.alter_sync_state_set("b", 1, 1, [1], 1, ALL_ALIVE).code == Code.ALTER_SYNC_STATE_SET_FAILED  # unchanged
    d = commit(s, s.alter_sync_state_set("b", 1, 1, [1, 2, 3], 1, ALL_ALIVE))
    assert d.code == 0 and d.header["newSyncStateSetEpoch"] == "2" and s.snapshot()["b"]["syncStateSet"] == [1, 2, 3]


def test_election_after_the_master_dies_picks_the_most_advanced_in_sync_replica() -> None:
    s = group(4)
    commit(s, s.elect_master("b", 1, False, ALL_ALIVE, lambda *a: HeartbeatInfo()))
    commit(s, s.alter_sync_state_set("b", 1, 1, [1, 2, 3], 1, ALL_ALIVE))
    beats = {2: HeartbeatInfo(1, 500), 3: HeartbeatInfo(1, 900), 4: HeartbeatInfo(1, 5000)}  # 4 is not in sync
    master_dead = lambda c, n, i: i != 1  # noqa: E731
    d = commit(s, s.elect_master("b", None, False, master_dead, lambda c, n, i: beats[i]))
    assert d.code == 0 and d.header["masterBrokerId"] == "3" and d.header["masterEpoch"] == "2"
    assert s.snapshot()["b"]["syncStateSet"] == [3]
    # the master is alive: electing again keeps it (MASTER_STILL_EXIST, no event)
    again = s.elect_master("b", 2, False, ALL_ALIVE, lambda c, n, i: beats.get(i, HeartbeatInfo()))
    assert again.code == Code.MASTER_STILL_EXIST and not again.events and again.header["masterBrokerId"] == "3"
    # an admin's designated election moves it
    d = commit(s, s.elect_master("b", 2, True, ALL_ALIVE, lambda c, n, i: HeartbeatInfo()))
    assert d.code == Code.ELECT_MASTER_FAILED  # 2 is not in the sync state set {3}
    st = s.snapshot()["b"]
    assert commit(s, s.alter_sync_state_set("b", 3, st["masterEpoch"], [2, 3], st["syncStateSetEpoch"],
                                            ALL_ALIVE)).code == 0
    d = commit(s, s.elect_master("b", 2, True, ALL_ALIVE, lambda c, n, i: HeartbeatInfo()))
    assert d.code == 0 and d.header["masterBrokerId"] == "2"


def test_no_candidate_unclean_election_and_priority() -> None:
    s = group(3)
    commit(s, s.elect_master("b", 1, False, ALL_ALIVE, lambda *a: HeartbeatInfo()))
    only_3 = lambda c, n, i: i == 3  # noqa: E731  - the master and the in-sync set are gone
    d = commit(s, s.elect_master("b", None, False, only_3, lambda *a: HeartbeatInfo()))
    assert d.code == Code.MASTER_NOT_AVAILABLE and s.snapshot()["b"]["masterBrokerId"] is None
    assert s.snapshot()["b"]["masterEpoch"] == 2  # a failed controller election still bumps the epoch
    assert s.elect_master("b", 3, False, only_3, lambda *a: HeartbeatInfo()).code == Code.ELECT_MASTER_FAILED
    d = s.elect_master("b", None, False, only_3, lambda *a: HeartbeatInfo(), allow_unclean=True)
    assert d.code == 0 and d.header["masterBrokerId"] == "3"
    # equal epoch and offset: the lower electionPriority wins
    t = group(3)
    commit(t, t.elect_master("b", 1, False, ALL_ALIVE, lambda *a: HeartbeatInfo()))
    commit(t, t.alter_sync_state_set("b", 1, 1, [1, 2, 3], 1, ALL_ALIVE))
    prio = {2: HeartbeatInfo(1, 10, priority=5), 3: HeartbeatInfo(1, 10, priority=1)}
    d = t.elect_master("b", None, False, lambda c, n, i: i != 1, lambda c, n, i: prio[i])
    assert d.header["masterBrokerId"] == "3"


def test_clean_broker_data_and_replay_gives_the_same_state() -> None:
    s = group(3)
    log = []

    def run(d: Any) -> Any:
        log.extend(d.events)
        return commit(s, d)

    s2 = ReplicasInfo()
    for i in range(1, 4):  # the same history, replayed from the log on another node
        log.append({"type": "ApplyBrokerId", "clusterName": "C", "brokerName": "b", "brokerId": i,
                    "brokerAddress": f"10.0.0.{i}:10911", "registerCheckCode": f"10.0.0.{i}:10911;code{i}"})
    run(s.elect_master("b", 1, False, ALL_ALIVE, lambda *a: HeartbeatInfo()))
    run(s.alter_sync_state_set("b", 1, 1, [1, 2], 1, ALL_ALIVE))
    assert s.clean_broker_data("b", [2], False, ALL_ALIVE).code == Code.INVALID_CLEAN_BROKER_METADATA
    run(s.clean_broker_data("b", [2], False, lambda c, n, i: i != 2))
    assert s.snapshot()["b"]["syncStateSet"] == [1] and 2 not in s.snapshot()["b"]["brokers"]
    for ev in log:
        s2.apply(ev)
    assert s2.snapshot() == s.snapshot()
    assert s.clean_broker_data("b", None, False, ALL_ALIVE).code == Code.INVALID_CLEAN_BROKER_METADATA  # a master
    run(s.clean_broker_data("b", None, True, ALL_ALIVE))
    assert s.snapshot() == {}
