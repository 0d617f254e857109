"""rmqd configuration: TOML -> attrs, strict, with RocketMQ's own key names and defaults.

Keys in ``[namesrv]`` and ``[broker]`` are spelled exactly as in RocketMQ's
``broker.conf``/``namesrv.conf`` so a RocketMQ operator's knowledge carries over;
that is why the attrs fields are camelCase. A plugin's own table
(``[plugin.<namespace>.<name>]``) stays an opaque dict here: the plugin
structures it itself.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


class ConfigError(Exception):
    """A configuration problem, rendered as one line naming file, key path and expectation."""


@attrs.define
class NamesrvConfig:
    listenPort: int = 9876
    listenHost: str = "0.0.0.0"
    scanNotActiveBrokerInterval: int = 10_000  # ms
    brokerChannelExpiredTime: int = 120_000  # ms
    orderMessageEnable: bool = False


@attrs.define
class BrokerConfig:
    # identity and network
    brokerName: str = "broker-a"
    brokerClusterName: str = "DefaultCluster"
    brokerId: int = 0
    brokerIP1: str = ""  # "" = the first non-loopback IPv4 address, else 127.0.0.1
    brokerIP2: str = ""
    listenPort: int = 10911
    listenHost: str = "0.0.0.0"
    namesrvAddr: str = ""  # "" with an embedded namesrv = that one
    registerBrokerTimeoutMills: int = 6_000
    registerNameServerPeriod: int = 30_000
    brokerRole: str = "ASYNC_MASTER"  # ASYNC_MASTER | SYNC_MASTER | SLAVE
    region: str = "DefaultRegion"
    traceOn: bool = True
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
    destroyMapedFileIntervalForcibly: int = 120_000
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

    def store_root(self) -> Path:
        if self.storePathRootDir:
            return Path(self.storePathRootDir).expanduser()
        return Path(os.environ.get("RMQ_HOME") or "rmq-store")

    def commitlog_dir(self) -> Path:
        return Path(self.storePathCommitLog) if self.storePathCommitLog else self.store_root() / "commitlog"

    def delay_levels_ms(self) -> list[int]:
        """``messageDelayLevel`` parsed to milliseconds (level n = index n-1)."""
        units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        out = []
        for tok in self.messageDelayLevel.split():
            out.append(int(tok[:-1]) * units[tok[-1]])
        return out
