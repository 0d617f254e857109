"""Three controller nodes replicating the state by Raft (pysyncobj) on loopback: commit on a majority,
survive the leader's loss, refuse to commit without a majority, and replay the journal after a restart."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.plugins.controller.raft import CommitError, RaftState
from rmq.testing.daemon import free_port

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def ev(i: int) -> dict[str, Any]:
    return {"type": "ApplyBrokerId", "clusterName": "C", "brokerName": "b", "brokerId": i,
            "brokerAddress": f"h:{i}", "registerCheckCode": f"h:{i};c"}


async def leader_of(nodes: list[RaftState], timeout: float = 20) -> RaftState:
    with anyio.fail_after(timeout):
        while True:
            leaders = [n for n in nodes if n.is_leader]
            if len(leaders) == 1:
                return leaders[0]
            await anyio.sleep(0.05)


async def converged(nodes: list[RaftState], n_ids: int, timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        while not all(len(n.state.snapshot().get("b", {}).get("brokers", {})) == n_ids for n in nodes):  # noqa: ASYNC110
            await anyio.sleep(0.05)


async def test_three_nodes_commit_fail_over_and_replay(tmp_path: Path) -> None:
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(3)]

    def node(i: int) -> RaftState:
        return RaftState(addrs[i], [a for a in addrs if a != addrs[i]], tmp_path / f"n{i}", password="test-secret",
                         bind_host="127.0.0.1")

    nodes = [node(i) for i in range(3)]
    try:
        leader = await leader_of(nodes)
        await leader.commit([ev(1)])
        await leader.commit([ev(2)])
        await converged(nodes, 2)
        # the leader dies: the other two elect one and keep committing
        leader.close()
        rest = [n for n in nodes if n is not leader]
        second = await leader_of(rest)
        await second.commit([ev(3)])
        await converged(rest, 3)
        # only one node left: no majority, nothing commits (and nothing diverges)
        second.close()
        last = next(n for n in rest if n is not second)
        t0 = time.monotonic()
        with pytest.raises(CommitError):
            await last.commit([ev(4)], timeout=3)
        assert time.monotonic() - t0 < 10
        assert len(last.state.snapshot()["b"]["brokers"]) == 3
        last.close()
        # a full restart of every node: the journals bring the state back
        nodes = [node(i) for i in range(3)]
        leader = await leader_of(nodes)
        await converged(nodes, 3)
        await leader.commit([ev(5)])
        await converged(nodes, 4)
    finally:
        for n in nodes:
            n.close()


def test_importing_the_raft_layer_leaves_socket_inet_ntop_working() -> None:
    import socket

    import rmq.plugins.controller.raft  # noqa: F401 - pysyncobj patches socket.inet_ntop on import

    assert socket.inet_ntop(socket.AF_INET6, bytes(15) + b"\x01") == "::1"


async def test_a_leader_knows_when_a_majority_last_answered_it(tmp_path: Path) -> None:
    """The lease reads' basis (``majority_heard_within``, from answers the transport saw): true while the
    followers answer; false within a second of both going, though the node still leads (it steps down only
    after pysyncobj's fallback timeout), so it stops renewing a master's lease long before that."""
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    nodes = [RaftState(a, [b for b in addrs if b != a], tmp_path / f"n{i}", password="test-secret",
                       bind_host="127.0.0.1") for i, a in enumerate(addrs)]
    try:
        leader = await leader_of(nodes)
        await leader.commit([ev(1)])
        with anyio.fail_after(10):
            while not leader.majority_heard_within(0.5):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        assert not any(n.majority_heard_within(0.5) for n in nodes if n is not leader)  # followers: no answers
        for n in nodes:
            if n is not leader:
                n.close()
        gone = time.monotonic()
        with anyio.fail_after(10):
            while leader.majority_heard_within(0.5):  # noqa: ASYNC110
                await anyio.sleep(0.02)
        assert leader.is_leader, "stepped down before the lease reads stopped: the check would be moot"
        assert time.monotonic() - gone < 3
    finally:
        for n in nodes:
            n.close()
