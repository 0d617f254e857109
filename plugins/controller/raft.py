"""The controller state replicated by Raft: pysyncobj underneath, asyncio on top.

pysyncobj runs its own thread (elections, log replication, journal). Our side submits a
request's events as one log entry and awaits the commit on the event loop; the state
machine (``state.ReplicasInfo``) is applied under a lock on pysyncobj's thread in log
order, identically on every node. The journal and the full dump live in
``controllerStorePath``, so a node that restarts replays what it had and catches up
from the leader; a cluster that lost its majority elects no leader and commits nothing:
writes time out instead of diverging (no split brain).
"""

from __future__ import annotations

import _socket
import asyncio
import socket
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pysyncobj import SyncObj, SyncObjConf, replicated

from rmq.plugins.controller.state import ReplicasInfo, decode_event

# pysyncobj's win_inet_pton module replaces socket.inet_ntop on every platform with a Windows-only
# ctypes version that raises on Linux (its "if os.name == 'nt'" guards only inet_pton): put the
# real one back, for the whole process (IPv6 hosts in messages are decoded with it).
socket.inet_ntop = _socket.inet_ntop

__all__ = ["CommitError", "RaftState"]


class CommitError(Exception):
    """Events that were not committed (no leader, lost leadership, no majority in time)."""


class RaftState(SyncObj):  # type: ignore[misc]
    """One controller node. ``state`` is read under ``lock``; only committed entries change it."""

    def __init__(
        self,
        self_addr: str,
        peers: Sequence[str],
        store_path: Path,
        *,
        on_leader_change: Callable[[], None] | None = None,
        election_timeout: tuple[float, float] = (1.0, 2.0),
    ) -> None:
        store_path.mkdir(parents=True, exist_ok=True)
        self.state = ReplicasInfo()
        self.lock = threading.RLock()
        self._on_leader_change = on_leader_change
        conf = SyncObjConf(
            journalFile=str(store_path / "raft.journal"),
            fullDumpFile=str(store_path / "raft.dump"),
            autoTick=True,
            dynamicMembershipChange=False,
            raftMinTimeout=election_timeout[0],
            raftMaxTimeout=election_timeout[1],
            connectionRetryTime=1.0,
            commandsWaitLeader=False,
            onStateChanged=self._state_changed,
        )
        super().__init__(self_addr, list(peers), conf)

    # pysyncobj pickles the object's __dict__ for its full dump: keep only the state machine
    def __getstate__(self) -> dict[str, Any]:
        return {"state": self.state}

    @replicated  # type: ignore[misc]
    def _append(self, events: list[dict[str, Any]]) -> int:
        with self.lock:
            for ev in events:
                self.state.apply(decode_event(ev))
        return len(events)

    def _state_changed(self, old: int, new: int) -> None:
        if self._on_leader_change is not None:
            self._on_leader_change()

    @property
    def is_leader(self) -> bool:
        return bool(self._isLeader())

    @property
    def leader(self) -> str | None:
        node = self._getLeader()
        return None if node is None else str(getattr(node, "address", node))

    async def commit(self, events: Sequence[dict[str, Any]], timeout: float = 5.0) -> None:
        """Append ``events`` as one entry; return once it is applied here. ``CommitError`` otherwise."""
        if not events:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()

        def done(result: Any, error: Any) -> None:
            def settle() -> None:
                if fut.done():
                    return
                if error or result is None:
                    fut.set_exception(CommitError(f"not committed: raft error {error}"))
                else:
                    fut.set_result(None)

            loop.call_soon_threadsafe(settle)

        self._append([dict(ev) for ev in events], callback=done)
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            raise CommitError(f"not committed within {timeout:g}s (no majority of controllers?)") from None

    def close(self) -> None:
        self.destroy()
