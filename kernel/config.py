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

from rmq.kernel.options import did_you_mean, first_error, make_converter
from rmq.protocol.rocketmq_keys import ALIASES, refusal
from rmq.protocol.tomledit import toml_value

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


class ConfigError(Exception):
    """A configuration problem, rendered as one line naming file, key path and expectation."""


def rmq_home() -> Path:
    """Where rmqd keeps what no setting places elsewhere: $RMQ_HOME, else ./rmq-store."""
    return Path(os.environ.get("RMQ_HOME") or "rmq-store")


@attrs.define
class NamesrvConfig:
    listenPort: int = 9876
    listenHost: str = "0.0.0.0"
    maxConnections: int = 4096  # accepted connections held at once; more are closed at accept
    allowRemoteAdmin: bool = False  # state-changing admin requests from non-loopback peers (until ACL)
    scanNotActiveBrokerInterval: int = 10_000  # ms
    brokerChannelExpiredTime: int = 120_000  # ms
    orderMessageEnable: bool = False
    enableControllerInNamesrv: bool = False  # run the controller role in this process ([controller] or defaults)
    kvConfigPath: str = ""  # "" = <broker storePathRootDir, else $RMQ_HOME or ./rmq-store>/namesrv/kvConfig.json

    def kv_config_path(self, home: Path | None = None) -> Path:
        """``kvConfigPath``, else ``namesrv/kvConfig.json`` under ``home`` (rmqd passes its broker's store
        root), $RMQ_HOME or ./rmq-store: RocketMQ's ``~/namesrv`` would be outside any store."""
        return Path(self.kvConfigPath).expanduser() if self.kvConfigPath else (home or rmq_home()) / "namesrv" / "kvConfig.json"


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
    maxConnections: int = 4096  # accepted connections held at once; more are closed at accept
    allowRemoteAdmin: bool = False  # state-changing admin requests from non-loopback peers (until ACL)
    namesrvAddr: str = ""  # "" with an embedded namesrv = that one
    registerBrokerTimeoutMills: int = 6_000
    registerNameServerPeriod: int = 30_000
    brokerRole: str = "ASYNC_MASTER"  # ASYNC_MASTER | SYNC_MASTER | SLAVE
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


NAMESPACES = (
    "storage",
    "dispatch",
    "allocation",
    "filters",
    "flush",
    "replication",
    "remoting",
    "processors",
    "extensions",
    "auth",
)
ALL_ALLOCATORS = [
    "averagely",
    "averagely_by_circle",
    "consistent_hash",
    "machine_room",
    "machine_room_nearby",
    "by_config",
]


@attrs.define
class ProxyConfig:
    """RocketMQ 5's proxy, in local mode: the gRPC endpoint of the broker (the bundled ``grpc`` plugin).
    Only a config with a ``[proxy]`` table opens it (the embedded default has one): a RocketMQ broker
    serves no gRPC unless its proxy is enabled, and two brokers on one host must not both take 8081."""

    grpcServerPort: int = 8081  # 0 = no gRPC endpoint


@attrs.define
class LogConfig:
    level: str = "INFO"


@attrs.define
class RootConfig:
    """The whole TOML document. A ``[namesrv]`` / ``[broker]`` section present enables that role."""

    namesrv: NamesrvConfig | None = None
    broker: BrokerConfig | None = None
    controller: Any = None  # structured by its plugin's class (section_class), as every role table
    plugins: dict[str, list[str]] = attrs.field(factory=dict)
    plugin: dict[str, dict[str, dict[str, Any]]] = attrs.field(factory=dict)
    log: LogConfig = attrs.field(factory=LogConfig)
    proxy: ProxyConfig | None = None  # None (no table) = no gRPC endpoint
    tls: dict[str, Any] = attrs.field(factory=dict)  # opaque here: the remoting plugin reads it
    dashboard: dict[str, Any] | None = None  # opaque: the dashboard plugin reads it; None (no table) = off
    source: str = attrs.field(default="<defaults>", metadata={"internal": True})

    def roles(self) -> list[str]:
        return [r for r in ("namesrv", "controller", "broker") if getattr(self, r) is not None]

    def selected(self) -> dict[str, list[str]]:
        """Plugin names per namespace: the TOML's choice, else RocketMQ-like defaults for the roles on."""
        out: dict[str, list[str]] = {ns: [] for ns in NAMESPACES}
        out["remoting"] = ["tcp"]
        out["processors"] = self.roles() + (["schedule", "transaction", "timer", "grpc", "metrics", "dashboard"] if self.broker is not None else [])
        out["filters"] = ["tag", "sql92", "class"]
        out["allocation"] = list(ALL_ALLOCATORS)
        if self.broker is not None:
            out["storage"] = ["mmap"]
            out["flush"] = ["sync" if self.broker.flushDiskType.upper() == "SYNC_FLUSH" else "async"]
            out["replication"] = ["ha"]
            out["auth"] = ["plain"]
        out.update({ns: list(names) for ns, names in self.plugins.items()})
        return out

    def plugin_options(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.plugin.get(namespace, {}).get(name, {}))


def _make_converter() -> cattrs.Converter:
    conv = make_converter()

    def names_hook(value: Any, _: Any) -> list[str]:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise ValueError("expected a plugin name or a list of names")

    def plugins_hook(value: Any, _: Any) -> dict[str, list[str]]:
        if not isinstance(value, dict):
            raise ValueError("expected a table of namespace = name(s)")
        out = {}
        for ns, names in value.items():
            if ns not in NAMESPACES:
                hint = did_you_mean(ns, NAMESPACES)
                raise ValueError(f"unknown plugin namespace {ns!r}{hint}; namespaces: {', '.join(NAMESPACES)}")
            try:
                out[ns] = names_hook(names, None)
            except ValueError as e:
                raise ValueError(f"{ns}: {e}") from None
        return out

    conv.register_structure_hook_func(lambda t: t == dict[str, list[str]], plugins_hook)
    return conv


CONVERTER = _make_converter()


ROLE_SECTIONS = ("namesrv", "controller", "broker")


def section_class(name: str) -> type:
    """The attrs class of a table: the ``config_class`` the plugin of that role (the ``rmq.processors`` entry point
    of the same name) declares, with the role's start-up rules in a ``problem()`` method; else the kernel's."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="rmq.processors", name=name):
        declared = getattr(ep.load(), "config_class", None)
        if declared is not None:
            return declared  # type: ignore[no-any-return]
    return {"namesrv": NamesrvConfig, "broker": BrokerConfig, "proxy": ProxyConfig, "log": LogConfig}.get(
        name, RootConfig)


def _render_error(exc: Exception, source: str, section: str = "") -> str:
    """One line: file, key path, what was expected; a RocketMQ key rmq refuses says why
    (``protocol/rocketmq_keys.py``), never "unknown"."""
    path, text = first_error(exc)
    path = ".".join(p for p in (section, path) if p)
    if text.startswith("extra fields found (") and text.endswith(")"):
        extras = text[len("extra fields found (") : -1].split(", ")
        cls = section_class(path.split(".")[0]) if path else RootConfig
        known = [f.name for f in attrs.fields(cls) if not f.metadata.get("internal")]
        key = f"{path}.{extras[0]}" if path else extras[0]
        why = refusal(path.split(".")[0] if path else "", extras[0])
        if why is not None:
            return f"{source}: {key} {why}"
        return f"{source}: unknown key {key!r}{did_you_mean(extras[0], known)}"
    return f"{source}: {path or '(top level)'}: {text}"


def _coerce_override(root: dict[str, Any], dotted: str, raw: str) -> None:
    """Apply ``--set section.key=value`` to the raw TOML dict, typed by the target field."""
    parts = dotted.split(".")
    if len(parts) < 2:
        raise ConfigError(f"--set {dotted}={raw}: expected section.key=value")
    section, key = parts[0], ALIASES.get(parts[0], {}).get(parts[-1], parts[-1])
    value: Any = raw
    cls = section_class(section) if section in (*ROLE_SECTIONS, "proxy", "log") else None
    if cls is not None and len(parts) == 2:
        fields = {f.name: f for f in attrs.fields(cls)}
        if key not in fields:
            raise ConfigError(f"--set {dotted}: unknown key {dotted!r}{did_you_mean(key, fields)}")
        kind = fields[key].type
        try:
            if kind in ("int", int):
                value = int(raw)
            elif kind in ("float", float):
                value = float(raw)
            elif kind in ("bool", bool):
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                value = raw.lower() in ("true", "1")
        except ValueError:
            raise ConfigError(f"--set {dotted}={raw}: expected {getattr(kind, '__name__', kind)}") from None
    elif section not in ("plugins", "plugin", "tls", "dashboard"):
        raise ConfigError(f"--set {dotted}: unknown section {section!r}; sections: namesrv, broker, controller, "
                          "proxy, tls, dashboard, plugins, plugin, log")
    else:
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
    node = root
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"--set {dotted}: {p!r} is not a table")
    node[key] = value


EMBEDDED = "<embedded default>"


def embedded_default() -> dict[str, Any]:
    """``rmqd`` with no config: both roles, loopback only, a store sized for a laptop (~170 MB reserved).

    Loopback because nothing is protected yet (no ACL) and a first run should not expose
    a broker to the network; the segment sizes because RocketMQ's (1 GiB commitlog segments
    plus a 420 MB index file) reserve 2.4 GB before the first message.
    """
    loopback = {"listenHost": "127.0.0.1"}
    return {
        "namesrv": dict(loopback),
        "broker": {
            **loopback,
            "brokerIP1": "127.0.0.1",
            "mappedFileSizeCommitLog": 64 * 1024 * 1024,
            "maxHashSlotNum": 500_000,
            "maxIndexNum": 2_000_000,
        },
        "dashboard": {},  # the browser dashboard on 127.0.0.1:8080
        "proxy": {},  # RocketMQ 5 clients' gRPC endpoint on 8081
    }


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RootConfig:
    """Read, override and validate; raise ``ConfigError`` with one precise line on any problem.

    With no file the embedded default applies: both roles on with defaults.
    """
    if path is None:
        doc: dict[str, Any] = embedded_default()
        source = EMBEDDED
    else:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"{source}: cannot read: {e.strerror or e}") from None
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{source}: invalid TOML: {e}") from None
    for item in overrides:
        dotted, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item}: expected section.key=value")
        _coerce_override(doc, dotted.strip(), raw.strip())
    return structure_config(doc, source)


def structure_config(doc: dict[str, Any], source: str = "<dict>") -> RootConfig:
    for name, aliases in ALIASES.items():  # RocketMQ's other spellings of a field (haSlaveFallbehindMax)
        table = doc.get(name)
        for old in set(aliases) & set(table) if isinstance(table, dict) else ():
            if aliases[old] in table:
                raise ConfigError(f"{source}: {name}.{old} and {name}.{aliases[old]} are one setting; keep one")
            doc[name] = table = {aliases[old] if k == old else k: v for k, v in table.items()}
    role_tables, section = {role: doc[role] for role in ROLE_SECTIONS if role in doc}, ""
    try:
        cfg = CONVERTER.structure({k: v for k, v in doc.items() if k not in role_tables}, RootConfig)
        for role, table in role_tables.items():
            section = role
            setattr(cfg, role, CONVERTER.structure(table, section_class(role)))
    except Exception as e:  # cattrs wraps everything in validation groups
        raise ConfigError(_render_error(e, source, section)) from None
    cfg.source = source
    if not cfg.roles():
        raise ConfigError(f"{source}: no role enabled: add a [namesrv], [controller] and/or [broker] section")
    for ns, tables in cfg.plugin.items():
        if ns not in NAMESPACES:
            raise ConfigError(f"{source}: plugin.{ns}: unknown plugin namespace{did_you_mean(ns, NAMESPACES)}")
        for name, table in tables.items():
            if not isinstance(table, dict):
                raise ConfigError(f"{source}: plugin.{ns}.{name}: expected a table")
    if cfg.namesrv is not None and cfg.namesrv.enableControllerInNamesrv and cfg.controller is None:
        cfg.controller = section_class("controller")()
    for role in ROLE_SECTIONS:  # the role's own start-up rules (its plugin's config_class.problem)
        problem = getattr(getattr(cfg, role), "problem", str)()
        if problem:
            raise ConfigError(f"{source}: {problem}")
    return cfg


def dump_config(cfg: RootConfig) -> str:
    """The effective config as TOML (``rmqd config``)."""
    lines: list[str] = [f"# effective configuration (source: {cfg.source})"]
    for role in ("namesrv", "controller", "broker"):
        section = getattr(cfg, role)
        if section is not None:
            lines.append(f"\n[{role}]")
            lines += [f"{k} = {toml_value(v)}" for k, v in attrs.asdict(section).items()]
    lines.append("\n[plugins]")
    lines += [f"{ns} = {toml_value(names)}" for ns, names in cfg.selected().items()]
    for ns, tables in cfg.plugin.items():
        for name, table in tables.items():
            lines.append(f"\n[plugin.{ns}.{name}]")
            lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
    proxy = cfg.proxy
    lines.append(f"\n[proxy]\ngrpcServerPort = {proxy.grpcServerPort}" if proxy else "\n# no [proxy] table: no gRPC")
    lines.append("\n[log]")
    lines.append(f"level = {toml_value(cfg.log.level)}")
    return "\n".join(lines) + "\n"
