"""The controller state replicated by Raft: pysyncobj underneath, asyncio on top.

pysyncobj runs its own thread (elections, log replication, journal). Our side submits a
request's events as one log entry and awaits the commit on the event loop; the state
machine (``state.ReplicasInfo``) is applied under a lock on pysyncobj's thread in log
order, identically on every node. The journal and the full dump live in
``controllerStorePath``, so a node that restarts replays what it had and catches up
from the leader; a cluster that lost its majority elects no leader and commits nothing:
writes time out instead of diverging (no split brain).

The Raft port faces strangers, and pysyncobj unpickles what its peers send. So every node
runs with pysyncobj's ``password``: each frame is a Fernet token (AES + HMAC-SHA256) whose
HMAC is checked before the bytes are decompressed or unpickled, the first (key exchange)
frame included; without the secret nothing reaches ``pickle``. The listener binds the
controller's ``listenHost``, and ``BoundedTransport`` caps what one connection may make
this node buffer: a claimed frame length over ``MAX_FRAME`` (``MAX_FIRST_FRAME`` before the
peer proved the secret) or a negative one drops the connection, as does a stranger idling
unauthenticated longer than pysyncobj's connection timeout or beyond ``MAX_UNKNOWN``.
"""

from __future__ import annotations

import _socket
import asyncio
import logging
import os
import secrets
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pysyncobj.tcp_connection as _pysyncobj_tcp
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.monotonic import monotonic
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.transport import TCPTransport

from rmq.kernel import RateLimitedLog, source_host
from rmq.plugins.controller.state import ReplicasInfo, decode_event

# pysyncobj's win_inet_pton module replaces socket.inet_ntop on every platform with a Windows-only
# ctypes version that raises on Linux (its "if os.name == 'nt'" guards only inet_pton): put the
# real one back, for the whole process (IPv6 hosts in messages are decoded with it).
socket.inet_ntop = _socket.inet_ntop

__all__ = ["MAX_FIRST_FRAME", "MAX_FRAME", "BoundedTransport", "CommitError", "RaftState", "load_or_create_secret"]

log = logging.getLogger("rmq.controller")
_limited = RateLimitedLog(log, interval=60.0)

#: the largest frame an authenticated peer may announce (pysyncobj batches entries by 64 KiB; snapshots
#: of the controller state are far smaller than this)
MAX_FRAME = 64 * 1024 * 1024
#: the largest first frame: it is the key exchange (a Fernet token of 32 random bytes, about 200 bytes)
MAX_FIRST_FRAME = 4096
#: connections that have not yet said which node they are, held at once; more are closed at accept
MAX_UNKNOWN = 32
_LENGTH = struct.Struct("i")  # pysyncobj's frame prefix: a native-endian int

# the bounds below override private parts of pysyncobj 0.3.17: fail closed if they moved
for _cls, _name in ((TcpConnection, "_TcpConnection__processRead"), (TcpConnection, "_TcpConnection__readBuffer"),
                    (TcpConnection, "sendRandKey"), (TCPTransport, "_unknownConnections"),
                    (TCPTransport, "_onNewIncomingConnection"), (TCPTransport, "_onTick")):
    if _name not in _cls.__dict__ and _name not in _cls.__init__.__code__.co_names:
        raise ImportError(f"pysyncobj's {_cls.__name__} has no {_name}: the Raft transport's bounds need "
                          "pysyncobj 0.3.17")


class _SourceBoundSockets:
    """Stands in for the ``socket`` module inside ``pysyncobj.tcp_connection``: pysyncobj creates and
    connects an outgoing socket in one method, so binding it to the controller's own address (its
    ``listenHost``, see ``rmq.kernel.net.source_host``) has to happen in the factory. ``source`` is set
    only around a ``_BoundedConnection.connect`` (pysyncobj's ticks run on one thread per node)."""

    def __init__(self) -> None:
        self.source = threading.local()

    def __getattr__(self, name: str) -> Any:
        return getattr(socket, name)

    def socket(self, *args: Any, **kwargs: Any) -> socket.socket:
        sock = socket.socket(*args, **kwargs)
        host = getattr(self.source, "host", "")
        if host:
            try:
                sock.bind((host, 0))
            except OSError:
                sock.close()
                raise
        return sock


_SOCKETS = _SourceBoundSockets()
_pysyncobj_tcp.socket = _SOCKETS  # type: ignore[assignment]


class _BoundedConnection(TcpConnection):  # type: ignore[misc]
    """pysyncobj's connection with a cap on the frame length it will wait for.

    pysyncobj 0.3.17 has no factory for its connections: ``BoundedTransport`` re-classes each one
    before it has read a byte. The read loop here stops at a whole frame (so parsing, and with it
    the HMAC check, runs before more is buffered) and drops a connection whose next frame claims
    more than the cap.
    """

    source_host = ""  # set by BoundedTransport: the address outgoing connections bind

    def connect(self, host: Any, port: Any) -> bool:
        _SOCKETS.source.host = self.source_host
        try:
            try:
                return bool(super().connect(host, port))
            except OSError:  # the bind failed (the address went away): a failed attempt, retried later
                return False
        finally:
            _SOCKETS.source.host = ""

    def _TcpConnection__processRead(self) -> bool:
        more = bool(TcpConnection._TcpConnection__processRead(self))
        buf = self._TcpConnection__readBuffer
        if len(buf) < _LENGTH.size:
            return more
        (size,) = _LENGTH.unpack_from(buf)
        cap = MAX_FRAME if self.sendRandKey else MAX_FIRST_FRAME
        if size < 0 or size > cap:
            _limited.warning("raft-frame", "raft: a peer announced a %d-byte frame (limit %d%s); connection dropped",
                             size, cap, "" if self.sendRandKey else " before authenticating")
            self.disconnect()
            return False
        return more and len(buf) - _LENGTH.size < size


class _CheckedEncryptor:
    """The node's Fernet, logging (rate-limited) frames that fail authentication: a stranger, or a
    controller configured with another ``raftPassword``. pysyncobj drops such a connection silently."""

    def __init__(self, fernet: Any) -> None:
        self._fernet = fernet

    def extract_timestamp(self, data: bytes) -> int:
        try:
            return int(self._fernet.extract_timestamp(data))
        except Exception:
            _limited.warning("raft-auth", "raft: a peer's frame failed authentication (a stranger, or a controller "
                             "with another raftPassword); connection dropped")
            raise

    def decrypt(self, data: bytes) -> bytes:
        return bytes(self._fernet.decrypt(data))

    def encrypt_at_time(self, data: bytes, at: int) -> bytes:
        return bytes(self._fernet.encrypt_at_time(data, at))


class BoundedTransport(TCPTransport):  # type: ignore[misc]
    """pysyncobj's TCP transport with bounded connections (see ``_BoundedConnection``), at most
    ``MAX_UNKNOWN`` connections that have not identified themselves, each for at most the
    connection timeout."""

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:
        self._accepted_at: dict[Any, float] = {}
        # peer address -> monotonic time of its last answer to this node's appends, shared with RaftState
        self.answered_at: dict[str, float] = getattr(syncObj, "answered_at", {})
        super().__init__(syncObj, selfNode, otherNodes)

    def setOnMessageReceivedCallback(self, callback: Any) -> None:
        """Notes when each follower last answered an append (pysyncobj's ``next_node_idx``, sent only to
        the leader of the follower's own term), before pysyncobj handles it: the leader's lease reads
        (``RaftState.majority_heard_within``) rest on these times, not on pysyncobj's private ones."""
        if callback is None:
            super().setOnMessageReceivedCallback(None)
            return
        answered = self.answered_at

        def received(node: Any, message: Any) -> None:
            if type(message) is dict and message.get("type") == "next_node_idx":
                answered[str(getattr(node, "address", node))] = time.monotonic()
            callback(node, message)

        super().setOnMessageReceivedCallback(received)

    def _bound(self, conn: Any) -> None:
        conn.__class__ = _BoundedConnection
        conn.source_host = source_host(self._syncObj.conf.bindAddress.rpartition(":")[0])
        if self._syncObj.encryptor is not None:
            conn.encryptor = _CheckedEncryptor(self._syncObj.encryptor)

    def _onNewIncomingConnection(self, conn: Any) -> None:
        self._bound(conn)
        super()._onNewIncomingConnection(conn)
        if self._syncObj.encryptor is not None:
            conn.encryptor = _CheckedEncryptor(self._syncObj.encryptor)
        if len(self._unknownConnections) > MAX_UNKNOWN:
            _limited.warning("raft-unknown", "raft: more than %d unidentified connections; closing the newest",
                             MAX_UNKNOWN)
            conn.disconnect()
            return
        self._accepted_at[conn] = monotonic()

    def addNode(self, node: Any) -> None:
        super().addNode(node)
        conn = self._connections.get(node)
        if conn is not None:
            self._bound(conn)

    def _onTick(self) -> None:
        super()._onTick()
        if not self._accepted_at:
            return
        deadline = monotonic() - self._syncObj.conf.connectionTimeout
        for conn, at in list(self._accepted_at.items()):
            if conn not in self._unknownConnections or conn.state == CONNECTION_STATE.DISCONNECTED:
                del self._accepted_at[conn]
            elif at < deadline:
                del self._accepted_at[conn]
                conn.disconnect()


def load_or_create_secret(path: Path) -> str:
    """The Raft secret kept in ``path`` (mode 0600), created with a random value on first use. Nodes
    that share the store root share it; creation is atomic, so nodes starting together agree."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)  # fails if another node created it first: then that one is used
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        log.warning("raft secret %s was readable by others (mode %o); now 0600", path, mode)
        os.chmod(path, 0o600)
    secret = path.read_text().strip()
    if len(secret) < 16:
        raise ValueError(f"raft secret {path} holds fewer than 16 characters; remove it to have a new one made")
    return secret


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
        password: str,
        bind_host: str = "",
        on_leader_change: Callable[[], None] | None = None,
        election_timeout: tuple[float, float] = (1.0, 2.0),
    ) -> None:
        store_path.mkdir(parents=True, exist_ok=True)
        self.state = ReplicasInfo()
        self.peers = [str(p) for p in peers]
        self.answered_at: dict[str, float] = {}  # filled by BoundedTransport, cleared on each leadership
        self.lock = threading.RLock()
        self._on_leader_change = on_leader_change
        if not password:
            raise ValueError("the Raft layer needs a password: pysyncobj unpickles what unauthenticated peers send")
        port = self_addr.rpartition(":")[2]
        conf = SyncObjConf(
            password=password,
            bindAddress=f"{bind_host or '0.0.0.0'}:{port}",
            journalFile=str(store_path / "raft.journal"),
            fullDumpFile=str(store_path / "raft.dump"),
            autoTick=True,
            dynamicMembershipChange=False,
            raftMinTimeout=election_timeout[0],
            raftMaxTimeout=election_timeout[1],
            # a leader cut off from its followers steps down after this long without a majority's answer
            # (pysyncobj: 30 s; DLedger, RocketMQ's: 3 missed 2 s heartbeats): until then it still answers
            # brokers' reads, and a write sits in its commit timeout instead of sending them to the new leader
            leaderFallbackTimeout=2 * election_timeout[1],
            connectionRetryTime=1.0,
            commandsWaitLeader=False,
            onStateChanged=self._state_changed,
        )
        super().__init__(self_addr, list(peers), conf, transportClass=BoundedTransport)

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
        self.answered_at.clear()  # a new leadership counts only answers to its own appends
        if self._on_leader_change is not None:
            self._on_leader_change()

    @property
    def is_leader(self) -> bool:
        return bool(self._isLeader())

    def majority_heard_within(self, seconds: float) -> bool:
        """This leader had answers to its appends from a majority of the group (itself included) in the
        last ``seconds``: any other leader's election needs one of those nodes, which stops answering
        this one when it votes, so none was elected before ``seconds`` ago."""
        since = time.monotonic() - seconds
        answered = self.answered_at
        heard = sum(1 for p in self.peers if answered.get(p, 0.0) > since)
        return 1 + heard > (len(self.peers) + 1) / 2

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
