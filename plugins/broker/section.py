"""The ``[broker]`` table with RocketMQ's start-up rules, declared by the broker role's plugin.

The keys are the kernel's ``BrokerConfig`` (every broker plugin reads them); the rules that
decide whether a broker may start with them (brokerRole and brokerId, controller mode, the HA
and timer ranges, values rmq cannot honour yet) belong to the role and live here. The kernel
calls ``problem()`` once the table is structured and refuses start-up with the line it returns.
"""

from __future__ import annotations

import attrs

from rmq.kernel import BrokerConfig

BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")


@attrs.define
class BrokerSection(BrokerConfig):
    """``BrokerConfig`` plus the checks RocketMQ's BrokerStartup makes (one line, key named)."""

    def problem(self) -> str:
        return _role_problem(self) or _values_problem(self)


def _values_problem(b: BrokerConfig) -> str:
    """Values rmq cannot honour yet, and the timer's ranges: refused at start, never ignored."""
    if b.filterSupportRetry:
        return ("broker.filterSupportRetry: true is not supported yet (subscription filters are not applied "
                "to messages in retry topics); remove the key or set it to false")
    for key in ("timerMaxDelaySec", "timerFlushIntervalMs", "timerCongestNumEachSlot"):
        if getattr(b, key) <= 0:
            return f"broker.{key}: must be above 0 (got {getattr(b, key)})"
    if not 1 <= b.reviveQueueNum <= 1024:
        return f"broker.reviveQueueNum: 1..1024 queues of the revive topic (got {b.reviveQueueNum})"
    if b.mappedFileSizeTimerLog < 4096:
        return f"broker.mappedFileSizeTimerLog: at least 4096 bytes (got {b.mappedFileSizeTimerLog})"
    return ""


def _role_problem(b: BrokerConfig) -> str:
    """RocketMQ's start-up rules for brokerRole and brokerId (masters are id 0, slaves above)."""
    if b.enableControllerMode:
        if not [a for a in b.controllerAddr.replace(",", ";").split(";") if a.strip()]:
            return "broker.controllerAddr: enableControllerMode needs the controllers' addresses (host:port;...)"
        for key in ("controllerHeartBeatTimeoutMills", "brokerHeartbeatInterval", "syncBrokerMetadataPeriod",
                    "checkSyncStateSetPeriod", "haMaxTimeSlaveNotCatchup"):
            if getattr(b, key) <= 0:
                return f"broker.{key}: must be above 0 (got {getattr(b, key)})"
        b.brokerRole = "SLAVE"  # as RocketMQ: the controller decides; a broker starts fenced
        return _ha_problem(b)
    role = b.brokerRole.upper()
    if role not in BROKER_ROLES:
        return f"broker.brokerRole: {b.brokerRole!r} is not one of {', '.join(BROKER_ROLES)}"
    b.brokerRole = role
    if role == "SLAVE" and b.brokerId <= 0:
        return f"broker.brokerId: a SLAVE needs a brokerId above 0 (got {b.brokerId})"
    if role != "SLAVE":
        b.brokerId = 0  # as RocketMQ: a master is broker 0 whatever the file says
    return _ha_problem(b)


def _ha_problem(b: BrokerConfig) -> str:
    if not 0 <= b.haListenPort <= 65535:
        return f"broker.haListenPort: {b.haListenPort} is not a port (0 = listenPort + 1)"
    for key in ("haSendHeartbeatInterval", "haHousekeepingInterval", "haTransferBatchSize", "haMaxGapNotInSync"):
        if getattr(b, key) <= 0:
            return f"broker.{key}: must be above 0 (got {getattr(b, key)})"
    if b.haTransferBatchSize > 4 * 1024 * 1024:
        return f"broker.haTransferBatchSize: at most 4194304, what a slave buffers (got {b.haTransferBatchSize})"
    if not 0 <= b.accessMessageInMemoryMaxRatio <= 100:
        return f"broker.accessMessageInMemoryMaxRatio: a percentage (got {b.accessMessageInMemoryMaxRatio})"
    return ""
