"""RocketMQ's configuration keys and what rmqd does with each: honoured, ignored, or refused at start with why.

A RocketMQ operator brings a ``broker.conf`` / ``namesrv.conf``; every key in it must take its RocketMQ
effect, or be one that only tunes Java internals (thread pools, Netty, locks, statistics) or asks for
what rmq does anyway, which is accepted, ignored and listed (IGNORED, NOOP; logged at start, shown by
``rmqd config``), or stop ``rmqd`` with one line saying why; never be dropped silently and never be
called "unknown" when RocketMQ knows it. The lists are built from the real classes read in
apache/rocketmq: 4.9.8's BrokerConfig, MessageStoreConfig, NettyServerConfig, NettyClientConfig (all
four are read from one broker.conf) and NamesrvConfig, and 5.3.3's additions to them plus its
ControllerConfig and BrokerIdentity. Pure data: ``kernel/config.py`` looks a refused key up when
it renders the error, and renames an alias before it structures a section.
"""

from __future__ import annotations

#: RocketMQ's spelling -> the rmq field holding the same fact (one home per fact)
ALIASES: dict[str, dict[str, str]] = {
    "broker": {
        "haSlaveFallbehindMax": "haMaxGapNotInSync",  # 4.9's name; 5.x renamed it (isSlaveOK's gap)
        "serverLoadBalancerEnable": "serverLoadBalancerEnabled",  # 5.x's spelling; rmq's first spelling kept
        "bindAddress": "listenHost",  # 5.x NettyServerConfig: the address the listener binds
    },
    "namesrv": {"bindAddress": "listenHost"},
    "controller": {"bindAddress": "listenHost"},
}

#: RocketMQ keys rmq honours with RocketMQ's meaning (each is a field of its section, or an alias)
HONOURED: dict[str, str] = {
    "broker": """
        namesrvAddr brokerIP1 brokerIP2 brokerName brokerClusterName brokerId brokerPermission
        defaultTopicQueueNums autoCreateTopicEnable clusterTopicEnable brokerTopicEnable
        autoCreateSubscriptionGroup msgTraceTopicName traceTopicEnable flushConsumerOffsetInterval
        rejectTransactionMessage sendThreadPoolQueueCapacity longPollingEnable shortPollingTimeMills regionId
        registerBrokerTimeoutMills slaveReadEnable waitTimeMillsInSendQueue traceOn filterSupportRetry
        enablePropertyFilter registerNameServerPeriod transactionTimeOut transactionCheckMax
        transactionCheckInterval aclEnable storeReplyMessageEnable
        storePathRootDir storePathCommitLog mappedFileSizeCommitLog mappedFileSizeConsumeQueue
        flushIntervalCommitLog flushCommitLogTimed flushIntervalConsumeQueue cleanResourceInterval
        deleteCommitLogFilesInterval deleteConsumeQueueFilesInterval deleteWhen diskMaxUsedSpaceRatio
        fileReservedTime maxMessageSize checkCRCOnRecover flushCommitLogLeastPages flushConsumeQueueLeastPages
        flushCommitLogThoroughInterval flushConsumeQueueThoroughInterval maxTransferBytesOnMessageInMemory
        maxTransferCountOnMessageInMemory accessMessageInMemoryMaxRatio messageIndexEnable maxHashSlotNum
        maxIndexNum maxMsgsNumBatch messageIndexSafe haListenPort haSendHeartbeatInterval haHousekeepingInterval
        haTransferBatchSize haMasterAddress haSlaveFallbehindMax brokerRole flushDiskType syncFlushTimeout
        slaveTimeout messageDelayLevel flushDelayOffsetInterval cleanFileForciblyEnable osPageCacheBusyTimeOutMills
        listenPort
        brokerElectionPriority brokerHeartbeatInterval channelExpiredTimeout checkSyncStateSetPeriod controllerAddr
        controllerHeartBeatTimeoutMills defaultMessageRequestMode defaultPopShareQueueNum enableControllerMode
        metricsExporterType metricsPromExporterHost metricsPromExporterPort recallMessageEnable
        serverLoadBalancerEnable syncBrokerMetadataPeriod allAckInSyncStateSet diskSpaceCleanForciblyRatio
        diskSpaceWarningLevelRatio haMaxGapNotInSync haMaxTimeSlaveNotCatchup mappedFileSizeTimerLog
        timerCongestNumEachSlot timerEnableRetryUntilSuccess timerFlushIntervalMs timerMaxDelaySec timerPrecisionMs
        timerWheelEnable bindAddress reviveQueueNum initPopOffsetByCheckMsgInMem
    """,
    "namesrv": "kvConfigPath orderMessageEnable listenPort scanNotActiveBrokerInterval enableControllerInNamesrv "
               "bindAddress",
    "controller": "controllerDLegerGroup controllerDLegerPeers controllerDLegerSelfId controllerStorePath "
                  "scanNotActiveBrokerInterval enableElectUncleanMaster notifyBrokerRoleChanged "
                  "electMasterMaxRetryCount bindAddress",
}

# Java-internal tuning: accepted and ignored (IGNORED), so a RocketMQ deployment's files start rmqd unchanged
_THREADS = ("sizes a Java thread pool; rmq serves requests on one event loop per process (disk syncs in "
            "worker threads it sizes itself)")
_POOL_QUEUE = ("bounds a Java thread pool's queue; rmq queues no requests outside their connections (sends "
               "are bounded by sendThreadPoolQueueCapacity)")
_WAIT_QUEUE = ("is how long a request may wait in a Java thread pool's queue; only sends queue in rmq "
               "(waitTimeMillsInSendQueue)")
_NETTY = "is a Netty setting (threads, buffers, pooling, epoll); rmq's sockets are asyncio's"
_NETTY_CLIENT = ("is a setting of RocketMQ's Netty client (the broker's connections to name servers and its "
                 "master); rmq's client has no such knob")
_UNUSED = "is declared by RocketMQ 4.9 but never read by it"
_COMMERCIAL = "feeds commercial usage accounting in the broker's statistics; rmq meters nothing"
_JAVA = "tunes Java's store internals (locks, heap copies, page warming, deferred unmapping)"
_STATS_IGNORED = "switches a RocketMQ statistics detail; rmq keeps its own statistics (GET_BROKER_RUNTIME_INFO)"
_ONLY_WITH = "only matters with {0}=true, which rmq refuses"
_DLEDGER = ("configures DLedger commitlog replication, which rmq does not have: replicate with classic HA "
            "(brokerRole) or RocketMQ 5's controller mode (enableControllerMode): remove it")
_LMQ = "configures light message queues (LMQ, multi-dispatch for MQTT), which rmq does not have: remove it"
_TRANSIENT = ("configures the transient store pool (writes into off-heap buffers, committed later), a Java "
              "copy optimisation; rmq writes into the mapped segment directly: remove it")
_CQ_EXT = ("configures the consume queue extension (filter bitmaps), which rmq does not have; SQL92 "
           "filters are evaluated per message: remove it")
_BLOOM = ("tunes the bloom-filter bitmaps that speed SQL92 filtering up (with enableConsumeQueueExt, which rmq "
          "refuses); rmq evaluates every message, with the same result")
_ROCKSDB = "configures the RocksDB consume queue store; rmq keeps consume queues in mapped files: remove it"
_COMPACTION = "configures compacted topics, which rmq does not have: remove it"
_POP_BUFFER = ("tunes RocketMQ 5's POP checkpoint buffer and revive scan; rmq writes each checkpoint and ack "
               "straight to the revive topic and hands an expired message out again from its own queue: remove it")
_SWAP = ("configures RocketMQ 5's swapping of idle mapped files; rmq's store maps consume queues when used "
         "and unmaps idle ones on its own bounds: remove it")
_COLD = "configures cold-data read flow control, which rmq does not have: remove it"
_ACTING = ("configures slave-acting-master (escaping messages to other brokers), which rmq does not have; "
           "automatic failover is controller mode (enableControllerMode): remove it")
_OTEL = ("configures the OTLP gRPC or logging metrics exporters; rmq exports Prometheus only "
         "(metricsExporterType PROM): remove it")
_CONTAINER = "configures RocketMQ 5's BrokerContainer (several brokers in one JVM); rmq runs one broker per process: remove it"
_TIMER_INTERNAL = "tunes the internals of RocketMQ 5's timer store (threads, metrics, progress logs); rmq's timer has none: remove it"
_HOME = ("is RocketMQ's install directory (ROCKETMQ_HOME); rmq has none: its files live under storePathRootDir "
         "(default $RMQ_HOME, else ./rmq-store): remove it")
_BLACKLIST = ("guards keys from UPDATE_BROKER_CONFIG; rmq changes at run time only the keys it reads at run "
              "time and refuses the rest, so there is nothing to add: remove it")
_DNS = "looks the addresses up through an address server or DNS; rmq takes them as written: list them in the key itself"

#: RocketMQ key -> why rmq refuses it (a clause that follows "<section>.<key> ")
REFUSED: dict[str, dict[str, str]] = {"broker": {}, "namesrv": {}, "controller": {}}
#: RocketMQ key -> why rmq accepts and ignores it: it only tunes Java internals (thread pools, Netty, locks,
#: statistics) or only matters together with a key rmq refuses. Logged at start and in ``rmqd config``.
IGNORED: dict[str, dict[str, str]] = {"broker": {}, "namesrv": {}, "controller": {}}
#: a refused key -> the value (as text, lower case) at which it asks for what rmq does anyway: accepted and
#: ignored at that value (``forceRegister=true``, ``enableDLegerCommitLog=false``), refused at any other
NOOP: dict[str, dict[str, str]] = {"broker": {}, "namesrv": {}, "controller": {}}


def _refuse(sections: str, keys: str, why: str) -> None:
    for section in sections.split():
        for key in keys.split():
            REFUSED[section][key] = why


def _ignore(sections: str, keys: str, why: str) -> None:
    for section in sections.split():
        for key in keys.split():
            IGNORED[section][key] = why


_ignore("broker", """sendMessageThreadPoolNums putMessageFutureThreadPoolNums pullMessageThreadPoolNums
    processReplyMessageThreadPoolNums queryMessageThreadPoolNums adminBrokerThreadPoolNums clientManageThreadPoolNums
    consumerManageThreadPoolNums heartbeatThreadPoolNums endTransactionThreadPoolNums ackMessageThreadPoolNums
    litePullMessageThreadPoolNums loadBalanceProcessorThreadPoolNums recoverThreadPoolNums
    batchDispatchRequestThreadPoolNums dispatchCqThreads compactionThreadNum timerGetMessageThreadNum
    timerPutMessageThreadNum""", _THREADS)
_ignore("broker", """putThreadPoolQueueCapacity pullThreadPoolQueueCapacity replyThreadPoolQueueCapacity
    queryThreadPoolQueueCapacity clientManagerThreadPoolQueueCapacity consumerManagerThreadPoolQueueCapacity
    heartbeatThreadPoolQueueCapacity endTransactionPoolQueueCapacity ackThreadPoolQueueCapacity
    adminBrokerThreadPoolQueueCapacity litePullThreadPoolQueueCapacity loadBalanceThreadPoolQueueCapacity""",
        _POOL_QUEUE)
_ignore("broker", """waitTimeMillsInPullQueue waitTimeMillsInHeartbeatQueue waitTimeMillsInTransactionQueue
    waitTimeMillsInAckQueue waitTimeMillsInAdminBrokerQueue waitTimeMillsInLitePullQueue""", _WAIT_QUEUE)
_ignore("broker namesrv controller", """serverWorkerThreads serverCallbackExecutorThreads serverSelectorThreads
    serverOnewaySemaphoreValue serverAsyncSemaphoreValue serverChannelMaxIdleTimeSeconds serverSocketSndBufSize
    serverSocketRcvBufSize writeBufferHighWaterMark writeBufferLowWaterMark serverSocketBacklog
    serverPooledByteBufAllocatorEnable useEpollNativeSelector serverNettyWorkerGroupEnable
    enableShutdownGracefully shutdownWaitTimeSeconds""", _NETTY)
_ignore("broker", """clientWorkerThreads clientCallbackExecutorThreads clientOnewaySemaphoreValue
    clientAsyncSemaphoreValue connectTimeoutMillis channelNotActiveInterval clientChannelMaxIdleTimeSeconds
    clientSocketSndBufSize clientSocketRcvBufSize clientPooledByteBufAllocatorEnable clientCloseSocketIfTimeout
    disableCallbackExecutor disableNettyWorkerGroup enableReconnectForGoAway isScanAvailableNameSrv
    maxReconnectIntervalTimeSeconds""", _NETTY_CLIENT)
_refuse("broker", "socksProxyConfig", "routes the broker's connections through a SOCKS proxy, which rmq's client "
        "does not do: remove it")
_ignore("broker", "flushConsumerOffsetHistoryInterval filterServerNums highSpeedMode maxDelayTime putMsgIndexHightWater",
        _UNUSED)
_ignore("broker", """commercialEnable commercialTimerCount commercialTransCount commercialBigCount commercialBaseCount
    commercialSizePerMsg""", _COMMERCIAL)
_refuse("broker", "storePathDLedgerCommitLog enableDLegerCommitLog dLegerGroup dLegerPeers dLegerSelfId preferredLeaderId",
        _DLEDGER)
_refuse("broker", "enableLmq enableMultiDispatch maxLmqConsumeQueueNum enableLmqStats", _LMQ)
_refuse("broker", """commitIntervalCommitLog commitCommitLogLeastPages commitCommitLogThoroughInterval
    transientStorePoolEnable transientStorePoolSize fastFailIfNoBufferInStorePool wakeCommitWhenPutMessage""",
        _TRANSIENT)
_refuse("broker", "enableConsumeQueueExt mappedFileSizeConsumeQueueExt bitMapLengthConsumeQueueExt", _CQ_EXT)
_ignore("broker", "enableCalcFilterBitMap expectConsumerNumUseFilter maxErrorRateOfBloomFilter filterDataCleanTimeSpan",
        _BLOOM)
_ignore("broker", """enableDetailStat autoDeleteUnusedStats enableScheduleMessageStats accountStatsEnable
    accountStatsPrintZeroValues maxStatsIdleTimeInMinutes transactionMetricFlushInterval printChannelGroups
    printChannelGroupsMinNum estimateAccumulation""", _STATS_IGNORED)
_refuse("broker", """storeType rocksdbCQDoubleWriteEnable rocksdbCompressionType rocksdbFlushWalFrequency
    rocksdbWalFileRollingThreshold bottomMostCompressionTypeForConsumeQueueStore cleanRocksDBDirtyCQIntervalMin
    enableRocksDBLog memTableFlushIntervalMs realTimePersistRocksDBConfig statRocksDBCQIntervalSec""", _ROCKSDB)
_refuse("broker", """enableCompaction compactionCqMappedFileSize compactionMappedFileSize compactionScheduleInternal
    maxOffsetMapSize""", _COMPACTION)
_refuse("broker", """popCkMaxBufferSize popCkOffsetMaxQueueSize popCkStayBufferTime popCkStayBufferTimeOut
    enablePopBufferMerge enablePopBatchAck enablePopLog appendAckAsync appendCkAsync reviveAckWaitMs reviveInterval
    reviveMaxSlow reviveScanTime popReviveMaxAttemptTimes popReviveMaxReturnSizePerRead
    skipWhenCKRePutReachMaxTimes enableSkipLongAwaitingAck popConsumerFSServiceInit popConsumerKVServiceEnable
    popConsumerKVServiceInit popConsumerKVServiceLog popPollingMapSize popPollingSize maxPopPollingSize
    popLongPollingForceNotifyInterval popFromRetryProbability popInflightMessageThreshold enablePopMessageThreshold
    enableNotifyAfterPopOrderLockRelease enableNotifyBeforePopCalculateLag
    popResponseReturnActualRetryTopic retrieveMessageFromPopRetryTopicV1 enableRetryTopicV2""", _POP_BUFFER)
_refuse("broker", """mappedFileSwapEnable commitLogForceSwapMapInterval commitLogSwapMapInterval
    commitLogSwapMapReserveFileNum logicQueueForceSwapMapInterval logicQueueSwapMapInterval
    logicQueueSwapMapReserveFileNum cleanSwapedMapInterval""", _SWAP)
_refuse("broker", """coldDataFlowControlEnable coldDataScanEnable cgColdReadThreshold globalColdReadThreshold
    coldCtrStrategyEnable usePIDColdCtrStrategy""", _COLD)
_refuse("broker", "enableSlaveActingMaster enableRemoteEscape forwardTimeout syncBrokerMemberGroupPeriod",
        _ACTING)
_refuse("broker controller", """metricsGrpcExporterTarget metricsGrpcExporterHeader metricGrpcExporterTimeOutInMills
    metricGrpcExporterIntervalInMills metricLoggingExporterIntervalInMills metricsLabel metricsInDelta""", _OTEL)
_refuse("broker", "metricsOtelCardinalityLimit", _OTEL)
_refuse("broker", "transactionOpBatchInterval transactionOpMsgMaxSize",
        "batches RocketMQ 5's transaction op messages; rmq writes one op per ended half: remove it")
_refuse("broker", "isBrokerContainer isInBrokerContainer brokerConfigPath", _CONTAINER)
_ignore("broker", "isolateLogEnable", "names Java's log files per broker; rmq logs to stderr")
_refuse("broker", """timerCheckMetricsWhen timerEnableCheckMetrics timerMetricSmallThreshold timerProgressLogIntervalMs
    timerEnableDisruptor timerWarmEnable timerColdDataCheckIntervalMs timerSkipUnknownError timerRollWindowSlot""",
        _TIMER_INTERNAL)
_refuse("broker namesrv controller", "rocketmqHome", _HOME)
_refuse("broker namesrv controller", "configBlackList", _BLACKLIST)
_refuse("broker", "fetchNamesrvAddrByAddressServer fetchNameSrvAddrByDnsLookup fetchControllerAddrByDnsLookup "
        "fetchNamesrvAddrInterval updateNameServerAddrPeriod", _DNS)
_ignore("namesrv", """clientRequestThreadPoolNums defaultThreadPoolNums""", _THREADS)
_ignore("namesrv", "clientRequestThreadPoolQueueCapacity defaultThreadPoolQueueCapacity unRegisterBrokerQueueCapacity",
        _POOL_QUEUE)
_ignore("controller", "controllerThreadPoolNums", _THREADS)
_ignore("controller", "controllerRequestThreadPoolQueueCapacity", _POOL_QUEUE)
_refuse("controller", "metricsExporterType metricsPromExporterPort metricsPromExporterHost",
        "configures metrics of RocketMQ's controller; rmq's controller exports none: remove it")

REFUSED["broker"].update({
    "region": "is an earlier rmq spelling: RocketMQ's key is regionId; rename it",
    "messageStorePlugIn": "names RocketMQ's store plug-in classes; rmq's store wrappers are plugins chosen in "
                          "[plugins] storage = [...]: move them there",
    "notifyConsumerIdsChangedEnable": "is the broker-wide switch; rmq honours the subscription group's own "
                                      "notifyConsumerIdsChangedEnable: remove it and set it on the groups",
    "disableConsumeIfConsumerReadSlowly": "disables groups that read far behind, which rmq does not do: remove it",
    "brokerFastFailureEnable": "switches the send queue's fast failure, which rmq always applies "
                               "(waitTimeMillsInSendQueue, osPageCacheBusyTimeOutMills): remove it",
    "startAcceptSendRequestTimeStamp": "delays sends until a given time, which rmq does not do: remove it",
    "compressedRegister": "compresses broker registrations, which rmq's broker does not do: remove it",
    "forceRegister": "is always true in rmq (the whole topic table is registered every round): remove it",
    "readOnlyCommitLogStorePaths": "adds read-only commitlog directories; rmq has one (storePathCommitLog): "
                                   "remove it",
    "offsetCheckInSlave": "corrects pull offsets on a slave, which rmq does not do: remove it",
    "duplicationEnable": "is duplication mode (a broker replaying another's offsets), which rmq does not have: "
                         "remove it",
    "defaultQueryMaxNum": "bounds query-by-key results; rmq bounds them by maxMsgsNumBatch: remove it",
    "useTLS": "is set in rmq's [tls] table (tls.enable, tls.server.mode): move it there",
    "allowRecallWhenBrokerNotWriteable": "lets a broker without write permission take recalls, which rmq does "
                                         "not do: remove it",
    "asyncSendEnable": "chooses Java's asynchronous send processing; rmq's sends are always asynchronous on the "
                       "event loop: remove it",
    "broadcastOffsetExpireMaxSecond": "tunes the broadcast offset store, which rmq does not have: remove it",
    "broadcastOffsetExpireSecond": "tunes the broadcast offset store, which rmq does not have: remove it",
    "enableBroadcastOffsetStore": "switches the broadcast offset store, which rmq does not have: remove it",
    "brokerNotActiveTimeoutMillis": "is a slave-acting-master timeout, which rmq does not have: remove it",
    "cleanOfflineBrokerInterval": "is a slave-acting-master schedule, which rmq does not have: remove it",
    "sendHeartbeatTimeoutMillis": "is a slave-acting-master timeout, which rmq does not have: remove it",
    "skipPreOnline": "skips a BrokerContainer's pre-online step, which rmq does not have: remove it",
    "clearRetryTopicWhenDeleteTopic": "is not supported: remove it",
    "compatibleWithOldNameSrv": "is not supported: remove it",
    "configManagerVersion": "chooses RocketMQ 5's config file format; rmq's is its own: remove it",
    "consumerOffsetUpdateVersionStep": "versions the offset table for RocketMQ 5's metadata sync; rmq syncs "
                                       "whole tables: remove it",
    "delayOffsetUpdateVersionStep": "versions the delay offsets for RocketMQ 5's metadata sync; rmq syncs "
                                    "whole tables: remove it",
    "enableCreateSysGroup": "is not supported: remove it",
    "enableFastChannelEventProcess": "tunes Java's channel event thread: remove it",
    "enableMixedMessageType": "lets one topic mix message types (5.x topic attributes), which rmq does not "
                              "check: remove it",
    "enableNetWorkFlowControl": "is RocketMQ 5's network flow control, which rmq does not have: remove it",
    "enableRegisterProducer": "is not supported: remove it",
    "enableSingleTopicRegister": "registers one topic at a time with the name server, which rmq does not do: "
                                 "remove it",
    "enableSplitRegistration": "splits large registrations, which rmq does not do: remove it",
    "splitRegistrationSize": "tunes enableSplitRegistration, which rmq does not do: remove it",
    "litePullMessageEnable": "gates LITE_PULL_MESSAGE, which rmq always serves: remove it",
    "loadBalancePollNameServerInterval": "tunes the proxy's route polling; rmq's embedded gRPC reads routes "
                                         "directly: remove it",
    "lockInStrictMode": "is not supported: remove it",
    "realTimeNotifyConsumerChange": "is how rmq always behaves (a group's members are told of changes at once): remove it",
    "recoverConcurrently": "recovers the store with several Java threads; rmq's recovery is not configurable: remove it",
    "rejectPullConsumerEnable": "is not supported: rmq serves pull consumers always: remove it",
    "subscriptionExpiredTimeout": "expires idle subscriptions, which rmq does not do: remove it",
    "syncControllerMetadataPeriod": "is a controller metadata schedule rmq's broker does not run: remove it",
    "useServerSideResetOffset": "is not supported: remove it",
    "useStaticSubscription": "is not supported: remove it",
    "validateSystemTopicWhenUpdateTopic": "is not supported: remove it",
    "accessMessageInMemoryHotRatio": "is a cold-data ratio rmq does not use: remove it",
    "asyncLearner": "is a controller-mode learner switch, which rmq does not have: remove it",
    "autoMessageVersionOnTopicLen": "chooses the message record version by topic length; rmq writes version 1 "
                                    "records (topics up to 127 bytes): remove it",
    "correctLogicMinOffsetForceInterval": "tunes Java's consume queue minimum correction: remove it",
    "correctLogicMinOffsetSleepInterval": "tunes Java's consume queue minimum correction: remove it",
    "dataReadAheadEnable": "switches read-ahead; rmq sets madvise per file kind itself: remove it",
    "deleteFileBatchMax": "bounds deletions per round; rmq deletes by deleteCommitLogFilesInterval: remove it",
    "maxBatchDeleteFilesNum": "bounds deletions per round; rmq deletes by deleteCommitLogFilesInterval: remove it",
    "disappearTimeAfterStart": "is not supported: remove it",
    "dispatchCqCacheNum": "tunes a Java dispatch cache: remove it",
    "dispatchFromSenderThread": "dispatches on the sender's thread; rmq dispatches in its reput loop: remove it",
    "enableAsyncReput": "chooses Java's asynchronous reput; rmq's reput is one loop: remove it",
    "enableAutoInSyncReplicas": "is not supported: rmq's SyncStateSet follows haMaxTimeSlaveNotCatchup: remove it",
    "inSyncReplicas": "is not supported: a SYNC_MASTER waits for one slave (allAckInSyncStateSet: all): remove it",
    "minInSyncReplicas": "is not supported: a SYNC_MASTER waits for one slave (allAckInSyncStateSet: all): remove it",
    "totalReplicas": "is not supported: a SYNC_MASTER waits for one slave (allAckInSyncStateSet: all): remove it",
    "enableBuildConsumeQueueConcurrently": "builds consume queues with several Java threads; rmq's reput is one "
                                           "loop: remove it",
    "enableCleanExpiredOffset": "is not supported: rmq keeps offsets until their group or topic goes: remove it",
    "enabledAppendPropCRC": "appends a properties CRC, which rmq does not write: remove it",
    "forceVerifyPropCRC": "verifies a properties CRC, which rmq does not write: remove it",
    "haFlowControlEnable": "throttles HA traffic, which rmq does not do: remove it",
    "maxHaTransferByteInSecond": "throttles HA traffic, which rmq does not do: remove it",
    "logicalDiskSpaceCleanForciblyThreshold": "is not supported: rmq cleans by diskSpaceCleanForciblyRatio: "
                                              "remove it",
    "mapperFileSizeBatchConsumeQueue": "sizes batch consume queues, which rmq does not have: remove it",
    "searchBcqByCacheEnable": "tunes batch consume queues, which rmq does not have: remove it",
    "maxAsyncPutMessageRequests": "bounds Java's pending puts; rmq bounds sends by sendThreadPoolQueueCapacity: "
                                  "remove it",
    "maxChecksumRange": "tunes RocketMQ 5's HA checksum, which rmq does not have: remove it",
    "maxConsumeQueueScan": "bounds filtered scans; rmq bounds a pull by maxTransferCountOnMessageInMemory: remove it",
    "maxFilterMessageSize": "bounds filtered scans; rmq bounds a pull by maxTransferBytesOnMessageInMemory: remove it",
    "maxRecoveryCommitlogFiles": "bounds recovery, which rmq does not: remove it",
    "maxSlaveResendLength": "tunes RocketMQ 5's HA resend, which rmq does not have: remove it",
    "maxTopicLength": "is fixed in rmq at RocketMQ's 127 characters: remove it",
    "pullBatchMaxMessageCount": "bounds pulls; rmq bounds them by maxTransferCountOnMessageInMemory: remove it",
    "putConsumeQueueDataByFileChannel": "chooses Java file channels for consume queues; rmq maps them: remove it",
    "putMessageTimeout": "is not supported: rmq's puts are bounded by syncFlushTimeout and slaveTimeout: remove it",
    "readUnCommitted": "is not supported: remove it",
    "recheckReputOffsetFromCq": "is not supported: remove it",
    "replicasPerDiskPartition": "is a BrokerContainer disk setting rmq does not have: remove it",
    "sampleCountThreshold": "tunes a RocketMQ 5 sampler rmq does not have: remove it",
    "sampleSteps": "tunes a RocketMQ 5 sampler rmq does not have: remove it",
    "spinLockCollisionRetreatOptimalDegree": "tunes a Java spin lock; rmq has none: remove it",
    "storePathBrokerIdentity": "places a controller-mode file; rmq keeps it under storePathRootDir: remove it",
    "storePathEpochFile": "places a controller-mode file; rmq keeps it under storePathRootDir: remove it",
    "syncFromLastFile": "is not supported: remove it",
    "syncMasterFlushOffsetWhenStartup": "is not supported: remove it",
    "timerInterceptDelayLevel": "sends delay levels through the timer wheel, which rmq does not do (they use "
                                "SCHEDULE_TOPIC_XXXX): remove it",
    "timerStopDequeue": "is not supported: rmq's timer always delivers: remove it",
    "timerStopEnqueue": "is not supported: rmq's timer always parks: remove it",
    "topicQueueLockNum": "sizes a Java lock table; rmq has none: remove it",
    "travelCqFileNumWhenGetMessage": "is not supported: remove it",
    "useABSLock": "chooses a Java lock; rmq has none: remove it",
    "wakeFlushWhenPutMessage": "is not supported: rmq's flush policy decides when to flush: remove it",
})
REFUSED["namesrv"].update({
    "clusterTest": "is a RocketMQ test switch: remove it",
    "deleteTopicWithBrokerRegistration": "is not supported: remove it",
    "enableAllTopicList": "gates GET_ALL_TOPIC_LIST_FROM_NAMESERVER, which rmq always serves: remove it",
    "enableTopicList": "gates topic lists, which rmq always serves: remove it",
    "needWaitForService": "is not supported: rmq's name server serves once started: remove it",
    "waitSecondsForService": "is not supported: rmq's name server serves once started: remove it",
    "notifyMinBrokerIdChanged": "is a slave-acting-master notification, which rmq does not have: remove it",
    "returnOrderTopicConfigToBroker": "is not supported: remove it",
    "supportActingMaster": "is slave-acting-master, which rmq does not have: remove it",
})
REFUSED["controller"].update({
    "configStorePath": "is where RocketMQ writes controller.properties; rmq's controller keeps no such file: remove it",
    "listenPort": "is not how rmq's controller listens: each node serves on its own peer's port in "
                  "controllerDLegerPeers: remove it",
    "jraftConfig": "configures jRaft; rmq's controller runs its own Raft: remove it",
    "controllerType": "chooses DLedger or jRaft; rmq's controller runs its own Raft: remove it",
    "mappedFileSize": "sizes DLedger's log segments; rmq's controller log is its own: remove it",
    "isProcessReadEvent": "is not supported: reads are served by the leader: remove it",
    "scanInactiveMasterInterval": "is not supported: rmq elects on a broker's missed heartbeats "
                                  "(scanNotActiveBrokerInterval): remove it",
})


# single 4.9.8 keys that only tune Java internals, or only act together with a key rmq refuses
for _key, _why in {
    "transferMsgByHeap": _JAVA, "useReentrantLockWhenPutMessage": _JAVA, "destroyMapedFileIntervalForcibly": _JAVA,
    "redeleteHangedFileInterval": _JAVA, "warmMapedFileEnable": _JAVA, "flushLeastPagesWhenWarmMapedFile": _JAVA,
    "debugLockEnable": _JAVA, "diskFallRecorded": _STATS_IGNORED,
    "maxTransferBytesOnMessageInDisk": "sizes pulls served from disk; rmq sizes every pull by "
                                       "maxTransferBytesOnMessageInMemory",
    "maxTransferCountOnMessageInDisk": "sizes pulls served from disk; rmq sizes every pull by "
                                       "maxTransferCountOnMessageInMemory",
    "enableBatchPush": "chooses how Java's HA service batches; rmq's ships haTransferBatchSize chunks",
    "isEnableBatchPush": "chooses how Java's HA service batches; rmq's ships haTransferBatchSize chunks",
    "enableScheduleAsyncDeliver": "chooses how Java's schedule service hands due messages over; rmq's has one loop",
    "scheduleAsyncDeliverMaxPendingLimit": _ONLY_WITH.format("enableScheduleAsyncDeliver"),
    "scheduleAsyncDeliverMaxResendNum2Blocked": _ONLY_WITH.format("enableScheduleAsyncDeliver"),
    "consumerFallbehindThreshold": _ONLY_WITH.format("disableConsumeIfConsumerReadSlowly"),
    **dict.fromkeys(("transientStorePoolSize", "commitIntervalCommitLog", "commitCommitLogLeastPages",
                     "commitCommitLogThoroughInterval", "fastFailIfNoBufferInStorePool"),
                    _ONLY_WITH.format("transientStorePoolEnable")),
    **dict.fromkeys(("dLegerGroup", "dLegerPeers", "dLegerSelfId", "preferredLeaderId", "storePathDLedgerCommitLog"),
                    _ONLY_WITH.format("enableDLegerCommitLog")),
    **dict.fromkeys(("mappedFileSizeConsumeQueueExt", "bitMapLengthConsumeQueueExt"),
                    _ONLY_WITH.format("enableConsumeQueueExt")),
    "maxLmqConsumeQueueNum": _ONLY_WITH.format("enableLmq"),
}.items():
    REFUSED["broker"].pop(_key, None)
    IGNORED["broker"][_key] = _why
IGNORED["namesrv"]["configStorePath"] = ("is where RocketMQ writes the settings UPDATE_NAMESRV_CONFIG changes; rmq "
                                         "writes them into the config file it started from")
IGNORED["namesrv"]["productEnvName"] = _ONLY_WITH.format("clusterTest")
NOOP["broker"].update({
    "forceRegister": "true", "compressedRegister": "false", "notifyConsumerIdsChangedEnable": "true",
    "disableConsumeIfConsumerReadSlowly": "false", "brokerFastFailureEnable": "true",
    "startAcceptSendRequestTimeStamp": "0", "messageStorePlugIn": "", "readOnlyCommitLogStorePaths": "",
    "enableDLegerCommitLog": "false", "enableLmq": "false", "enableMultiDispatch": "false",
    "enableConsumeQueueExt": "false", "transientStorePoolEnable": "false", "duplicationEnable": "false",
    "offsetCheckInSlave": "false", "fetchNamesrvAddrByAddressServer": "false",
    "configBlackList": "configblacklist;brokerconfigpath",
})
NOOP["namesrv"].update({"clusterTest": "false", "configBlackList": "configblacklist;configstorepath;kvconfigpath"})


def refusal(section: str, key: str) -> str | None:
    """Why ``section.key`` (a RocketMQ key rmq does not take) is refused, or None for a key RocketMQ
    does not know either (the caller says "unknown key")."""
    return REFUSED.get(section, {}).get(key)


def ignored(section: str, key: str, value: object) -> str | None:
    """Why ``section.key = value`` is accepted and ignored (it only tunes Java internals, or asks for what
    rmq does anyway), or None when the key must be honoured or refused."""
    if key in IGNORED.get(section, {}):
        return IGNORED[section][key]
    noop = NOOP.get(section, {}).get(key)
    text = ("true" if value else "false") if isinstance(value, bool) else str(value).strip().lower()
    return "asks for what rmq does anyway" if noop is not None and text == noop else None


def honoured(section: str) -> list[str]:
    """The RocketMQ keys of ``section`` rmq honours (fields of the section, or aliases of one)."""
    return HONOURED.get(section, "").split()
