"""The ``[broker]`` table: RocketMQ's broker settings, the start-up rules its BrokerStartup applies, and what
the broker role turns on.

The keys are spelled as in RocketMQ's ``broker.conf`` (the broker's and its message store's settings
in one table, as RocketMQ reads them from one file), so a RocketMQ operator's knowledge carries over;
that is why the fields are camelCase. Every broker plugin reads this one class: the store plugins
(paths, segment sizes, flush, retention), replication (``ha*``), ACL, timers, metrics. It lives
outside the kernel (which only structures the table: entry point ``rmq.sections: broker``) and
outside the broker plugin (which no other plugin may import).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import attrs

from rmq.kernel import rmq_home

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
MAX_WORKERS = 256  # ports step by 4 per worker: 256 workers span 1024 ports above listenPort


@attrs.define
class BrokerConfig:
    """``[broker]``: RocketMQ's keys and defaults, the role's start-up rules (``problem``) and the plugins a
    broker runs unless ``[plugins]`` says otherwise (``plugins``)."""

    #: the table in rmqd's no-config default: loopback only (a first run must not expose a broker), and
    #: segments sized for a laptop (~170 MB reserved; RocketMQ's 1 GiB commitlog segments plus a 420 MB
    #: index file reserve 2.4 GB before the first message)
    embedded: ClassVar[dict[str, Any]] = {
        "listenHost": "127.0.0.1",
        "brokerIP1": "127.0.0.1",
        "mappedFileSizeCommitLog": 64 * 1024 * 1024,
        "maxHashSlotNum": 500_000,
        "maxIndexNum": 2_000_000,
    }
    required: ClassVar[tuple[str, ...]] = ("storage", "flush")  # namespaces a broker cannot run without

    # identity and network
    brokerName: str = "broker-a"
    brokerClusterName: str = "DefaultCluster"
    brokerId: int = 0
    brokerIP1: str = ""  # "" = the first non-loopback IPv4 address, else 127.0.0.1
    brokerIP2: str = ""
    listenPort: int = 10911
    listenHost: str = "0.0.0.0"
    maxConnections: int = 4096  # accepted connections held at once; more are closed at accept
    allowRemoteAdmin: bool = False  # state-changing admin requests from non-loopback peers (aclEnable: the ACL decides)
    namesrvAddr: str = ""  # "" with an embedded namesrv = that one
    registerBrokerTimeoutMills: int = 6_000
    registerNameServerPeriod: int = 30_000
    brokerRole: str = "ASYNC_MASTER"  # ASYNC_MASTER | SYNC_MASTER | SLAVE
    #: broker processes this rmqd runs under one supervisor (not a RocketMQ key; rmq.roles.workers has the
    #: rules: worker K is brokerName-K on listenPort + 4K with the store <root>/worker-K); 1 = one broker, in-process
    workers: int = 1
    # replication (RocketMQ HA; the bundled "ha" replication plugin reads these)
    haListenPort: int = 0  # 0 = listenPort + 1
    haMasterAddress: str = ""  # a slave's master HA address; "" = learned from the name server
    haSendHeartbeatInterval: int = 5_000
    haHousekeepingInterval: int = 20_000
    haTransferBatchSize: int = 32 * 1024
    haMaxGapNotInSync: int = 256 * 1024 * 1024  # RocketMQ 4's haSlaveFallbehindMax (an alias)
    slaveTimeout: int = 3_000  # ms a SYNC_MASTER put waits for its slave(s), then FLUSH_SLAVE_TIMEOUT
    # with aclEnable or tls server.mode enforcing, the HA port serves only peers from these addresses/CIDR
    # blocks ("10.0.0.5,10.0.1.0/24") or with a verified TLS client certificate
    haWhiteRemoteAddresses: str = ""
    slaveReadEnable: bool = False
    accessMessageInMemoryMaxRatio: int = 40
    # controller mode (RocketMQ 5: a controller elects the master; brokerRole/brokerId then come from it)
    enableControllerMode: bool = False
    controllerAddr: str = ""  # "host:port;host:port", the controllers' controllerDLegerPeers addresses
    controllerHeartBeatTimeoutMills: int = 10_000
    brokerHeartbeatInterval: int = 1_000
    brokerElectionPriority: int = 2**31 - 1  # lower wins an election between equally advanced replicas
    syncBrokerMetadataPeriod: int = 5_000
    checkSyncStateSetPeriod: int = 5_000
    haMaxTimeSlaveNotCatchup: int = 15_000
    allAckInSyncStateSet: bool = False
    regionId: str = "DefaultRegion"  # answered to senders (MSG_REGION); message trace groups by it
    traceOn: bool = True
    traceTopicEnable: bool = False  # create msgTraceTopicName at start, for clients' message traces
    msgTraceTopicName: str = "RMQ_SYS_TRACE_TOPIC"
    # topics, groups, clients
    autoCreateTopicEnable: bool = True
    autoCreateSubscriptionGroup: bool = True
    defaultTopicQueueNums: int = 8
    clusterTopicEnable: bool = True
    brokerTopicEnable: bool = True
    brokerPermission: int = 6
    channelExpiredTimeout: int = 120_000
    enablePropertyFilter: bool = False
    filterSupportRetry: bool = False
    # pull and long polling
    longPollingEnable: bool = True
    shortPollingTimeMills: int = 1_000
    maxTransferCountOnMessageInMemory: int = 32
    maxTransferBytesOnMessageInMemory: int = 256 * 1024
    # send path
    maxMessageSize: int = 4 * 1024 * 1024
    osPageCacheBusyTimeOutMills: int = 1_000
    waitTimeMillsInSendQueue: int = 200
    sendThreadPoolQueueCapacity: int = 10_000
    # store
    storePathRootDir: str = ""  # "" = $RMQ_HOME or ./rmq-store
    storePathCommitLog: str = ""  # "" = <root>/commitlog
    mappedFileSizeCommitLog: int = 1024 * 1024 * 1024
    mappedFileSizeConsumeQueue: int = 300_000 * 20
    flushDiskType: str = "ASYNC_FLUSH"  # ASYNC_FLUSH | SYNC_FLUSH
    flushIntervalCommitLog: int = 500
    flushCommitLogLeastPages: int = 4
    flushCommitLogThoroughInterval: int = 10_000
    flushCommitLogTimed: bool = True
    syncFlushTimeout: int = 5_000
    flushIntervalConsumeQueue: int = 1_000
    flushConsumeQueueLeastPages: int = 2
    flushConsumeQueueThoroughInterval: int = 60_000
    checkCRCOnRecover: bool = True
    messageIndexEnable: bool = True
    messageIndexSafe: bool = False
    maxHashSlotNum: int = 5_000_000
    maxIndexNum: int = 5_000_000 * 4
    maxMsgsNumBatch: int = 64
    fileReservedTime: int = 72  # hours
    deleteWhen: str = "04"
    diskMaxUsedSpaceRatio: int = 75
    diskSpaceCleanForciblyRatio: float = 0.85
    diskSpaceWarningLevelRatio: float = 0.90
    cleanFileForciblyEnable: bool = True
    cleanResourceInterval: int = 10_000
    deleteCommitLogFilesInterval: int = 100
    deleteConsumeQueueFilesInterval: int = 100
    # delay and retry
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    flushDelayOffsetInterval: int = 10_000
    # offsets and metadata
    flushConsumerOffsetInterval: int = 5_000
    # transactions
    transactionTimeOut: int = 6_000
    transactionCheckMax: int = 15
    transactionCheckInterval: int = 60_000
    rejectTransactionMessage: bool = False
    storeReplyMessageEnable: bool = True  # request-reply: store replies too (after pushing them)
    # timer messages (RocketMQ 5's TIMER_* properties; the bundled "timer" processors plugin)
    timerWheelEnable: bool = True
    timerMaxDelaySec: int = 3 * 86_400
    timerPrecisionMs: int = 1_000  # snapped to 100 / 200 / 500 / 1000 as RocketMQ does
    timerFlushIntervalMs: int = 1_000
    timerCongestNumEachSlot: int = 2**31 - 1  # parked messages per slot before flow control (off)
    timerEnableRetryUntilSuccess: bool = False
    mappedFileSizeTimerLog: int = 100 * 1024 * 1024
    recallMessageEnable: bool = False
    # RocketMQ 5 consumers: server-side assignment (QUERY_ASSIGNMENT) and the PULL / POP request mode
    defaultMessageRequestMode: str = "PULL"
    defaultPopShareQueueNum: int = -1
    serverLoadBalancerEnabled: bool = True
    reviveQueueNum: int = 8  # POP: queues of rmq_sys_REVIVE_LOG_<cluster> (checkpoints and acks)
    initPopOffsetByCheckMsgInMem: bool = True  # POP initMode MAX: a queue whose first message is in memory starts at 0
    # Prometheus metrics (RocketMQ 5's keys; the bundled "metrics" plugin)
    metricsExporterType: str = "DISABLE"  # DISABLE | PROM
    metricsPromExporterHost: str = ""  # "" = listenHost
    metricsPromExporterPort: int = 5557
    # access control (RocketMQ ACL 1.0; the bundled "plain" auth plugin)
    aclEnable: bool = False
    plainAclFile: str = ""  # "" = plain_acl.yml beside the config file, else <store root>/conf/plain_acl.yml

    def store_root(self) -> Path:
        return Path(self.storePathRootDir).expanduser() if self.storePathRootDir else rmq_home()

    def commitlog_dir(self) -> Path:
        return Path(self.storePathCommitLog) if self.storePathCommitLog else self.store_root() / "commitlog"

    def delay_levels_ms(self) -> list[int]:
        """``messageDelayLevel`` parsed to milliseconds (level n = index n-1)."""
        units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        out = []
        for tok in self.messageDelayLevel.split():
            out.append(int(tok[:-1]) * units[tok[-1]])
        return out

    def plugins(self) -> dict[str, list[str]]:
        """RocketMQ's broker by default: its companions (delay levels, transactions, timers, the gRPC proxy,
        metrics, the dashboard; each idle until its own setting or table asks), the mmap store flushed
        as ``flushDiskType`` says, HA replication and the plain ACL (idle until ``aclEnable``)."""
        return {
            "processors": ["broker", "schedule", "transaction", "timer", "grpc", "metrics", "dashboard"],
            "storage": ["mmap"],
            "flush": ["sync" if self.flushDiskType.upper() == "SYNC_FLUSH" else "async"],
            "replication": ["ha"],
            "auth": ["plain"],
        }

    def problem(self) -> str:
        """The line that refuses start-up ("" = none): the checks RocketMQ's BrokerStartup makes."""
        return _role_problem(self) or _values_problem(self)

    def supervisor(self, root: Any, argv: list[str]) -> Any:
        """With ``workers`` above 1, what rmqd runs instead of an in-process broker: a supervisor of
        ``workers`` child rmqd processes (``argv``: the arguments each is started with); else None."""
        if self.workers <= 1:
            return None
        from rmq.roles.workers import Supervisor

        return Supervisor(root, argv)

    def worker(self, root: Any, k: int) -> Any:
        """The configuration worker ``k`` of a supervisor runs (``rmqd --worker k``): one broker only; a
        worker started by a supervisor also ties its life to it."""
        from rmq.roles.workers import attach_to_supervisor, worker_config

        config = worker_config(root, k)
        attach_to_supervisor()
        return config


def _values_problem(b: BrokerConfig) -> str:
    """Values rmq cannot honour yet, and the timer's ranges: refused at start, never ignored."""
    if not 1 <= b.workers <= MAX_WORKERS:
        return f"broker.workers: 1..{MAX_WORKERS} broker processes (got {b.workers})"
    if b.workers > 1 and b.listenPort and b.listenPort + 4 * (b.workers - 1) + 1 > 65535:
        return (f"broker.workers: {b.workers} workers need ports up to listenPort + {4 * (b.workers - 1) + 1} "
                f"(worker K listens on listenPort + 4K); listenPort {b.listenPort} is too high")
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
