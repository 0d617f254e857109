"""The ``[controller]`` table: RocketMQ 5's controller settings, its peer list and its Raft password rule.

Declared to the kernel by the entry point ``rmq.sections: controller``: the kernel structures the
table with this class and refuses start-up with the line ``problem()`` returns. Read by the
``controller`` processors plugin (the kernel's default for the role).
"""

from __future__ import annotations

from pathlib import Path

import attrs

from rmq.kernel import rmq_home
from rmq.protocol.access import is_loopback


@attrs.define
class ControllerConfig:
    """RocketMQ 5's controller (``[controller]``; beside ``[namesrv]`` it is RocketMQ's
    enableControllerInNamesrv). Peers are the addresses brokers name in ``controllerAddr``; each
    node serves controller requests on its own peer's port and runs Raft on that port plus
    ``raftPortOffset``."""

    controllerDLegerGroup: str = "group1"
    controllerDLegerPeers: str = "n0-127.0.0.1:9878"
    controllerDLegerSelfId: str = "n0"
    controllerStorePath: str = ""  # "" = $RMQ_HOME or ./rmq-store, then /controller
    listenHost: str = "0.0.0.0"
    maxConnections: int = 4096
    allowRemoteAdmin: bool = False
    scanNotActiveBrokerInterval: int = 5_000  # ms
    enableElectUncleanMaster: bool = False
    notifyBrokerRoleChanged: bool = True
    electMasterMaxRetryCount: int = 3
    raftPortOffset: int = 1
    raftPassword: str = ""  # Raft's shared secret; "" = generated in controllerStorePath (loopback peers only)

    def peers(self) -> dict[str, str]:
        """Peer id -> "host:port" from ``controllerDLegerPeers`` ("n0-host:port;n1-host:port")."""
        out: dict[str, str] = {}
        for item in self.controllerDLegerPeers.replace(",", ";").split(";"):
            item = item.strip()
            if not item:
                continue
            pid, sep, addr = item.partition("-")
            host, _, port = addr.rpartition(":")
            if not sep or not pid or not host or not port.isdigit() or not 0 < int(port) < 65536 - self.raftPortOffset:
                raise ValueError(f"controllerDLegerPeers: {item!r} is not id-host:port")
            out[pid] = addr
        if not out:
            raise ValueError("controllerDLegerPeers: no peer")
        if not self.raftPassword and not all(is_loopback(a.rpartition(":")[0]) for a in out.values()):
            raise ValueError("raftPassword: required when a peer is not on loopback (every controller of the group "
                             "sets the same secret; Raft frames are authenticated with it)")
        if self.controllerDLegerSelfId not in out:
            raise ValueError(f"controllerDLegerSelfId: {self.controllerDLegerSelfId!r} is not among the peers "
                             f"({', '.join(out)})")
        return out

    def problem(self) -> str:
        """The line that refuses start-up ("" = none): the peer list must parse and name this node."""
        try:
            self.peers()
        except ValueError as e:
            return f"controller.{e}"
        return ""

    def store_path(self) -> Path:
        return Path(self.controllerStorePath).expanduser() if self.controllerStorePath else rmq_home() / "controller"
