"""Option parsing for the ``rocketmq`` data source: strings in, validated frozen configs out.

Spark hands options over as a case-insensitive mapping of strings. Everything is parsed on
the driver when the reader/writer is built, so a bad option fails the query at analysis time
with one line saying which option and what is accepted, instead of failing in an executor.
Unknown options fail too (with a suggestion), so a typo never silently keeps a default.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "RocketMQOptionError",
    "OffsetSpec",
    "Selection",
    "SourceConfig",
    "SinkConfig",
    "parse_source_options",
    "parse_sink_options",
    "EARLIEST",
    "LATEST",
]

EARLIEST = -2  # Kafka's convention inside offset JSON
LATEST = -1

SOURCE_OPTIONS = (
    "nameserver",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "failOnDataLoss",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "includeHeaders",
    "filter",
    "filterType",
    "groupId",
    "timestampSource",
    "pullBatchSize",
    "requestTimeoutMs",
    "accessKey",
    "secretKey",
)
SINK_OPTIONS = (
    "nameserver",
    "topic",
    "producerGroup",
    "batchSize",
    "sendTimeoutMs",
    "requestTimeoutMs",
    "accessKey",
    "secretKey",
    "exactlyOnce",
    "commitLogLocation",
    "transactionGraceMs",
    "testFailCommit",
    "testFailTask",
)
# Options Spark itself may put next to the user's; accepted and ignored.
_SPARK_INJECTED = ("path", "paths", "checkpointLocation", "queryName")

# RocketMQ topic names: letters, digits, %, |, _, - (at most 127 characters).
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")


class RocketMQOptionError(ValueError):
    """A bad option of the ``rocketmq`` data source; the message is one line naming the option."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"rocketmq option '{option}': {problem}")
        self.option = option


RocketMQOptionError.__module__ = "rmq.connectors.spark"  # how tracebacks name it

@dataclass(frozen=True)
class Selection:
    """Which queues to read: exactly one of topics / pattern / assignment.

    ``assignment`` maps topic -> list of queue selectors; an ``int`` selects that queue id on
    every broker, a ``"broker:queueId"`` string one queue.
    """

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: dict[str, tuple[int | str, ...]] | None = None

    @property
    def kind(self) -> str:
        if self.assignment is not None:
            return "assign"
        return "subscribePattern" if self.pattern is not None else "subscribe"


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or stop: ``earliest``, ``latest``, per-queue JSON, or a store timestamp (ms).

    ``queues`` (kind ``json``) maps topic -> "broker:queueId" -> offset, where -2 means
    earliest and -1 latest; queues the JSON does not mention take ``default``.
    """

    kind: Literal["earliest", "latest", "json", "timestamp"]
    queues: dict[str, dict[str, int]] = field(default_factory=dict)
    timestamp_ms: int | None = None
    default: int = EARLIEST


@dataclass(frozen=True)
class SourceConfig:
    nameserver: str
    selection: Selection
    starting: OffsetSpec
    ending: OffsetSpec | None  # batch only
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    include_headers: bool = False
    filter_expression: str | None = None
    filter_type: Literal["TAG", "SQL92"] = "TAG"
    group_id: str | None = None
    timestamp_source: Literal["store", "born"] = "store"
    pull_batch_size: int = 256
    request_timeout_s: float = 10.0
    credentials: tuple[str, str] | None = None  # ACL: accessKey, secretKey


@dataclass(frozen=True)
class SinkConfig:
    nameserver: str
    topic: str | None = None
    producer_group: str = "rmq_spark_sink"
    batch_size: int = 256
    send_timeout_s: float = 10.0
    request_timeout_s: float = 10.0
    credentials: tuple[str, str] | None = None  # ACL: accessKey, secretKey
    exactly_once: bool = False
    commit_log: str | None = None  # exactly once: the directory of the commit log (None: from the checkpoint)
    grace_s: float = 60.0  # exactly once: how long a check leaves a commit in progress to its driver
    test_fail_commit: str | None = None  # testing hook: "beforeLog" / "afterLog" makes commit() fail once
    test_fail_task: int | None = None  # testing hook: this partition's first attempt fails after sending


def _credentials(opts: dict[str, str]) -> tuple[str, str] | None:
    ak, sk = (opts.get("accessKey") or "").strip(), (opts.get("secretKey") or "").strip()
    if bool(ak) != bool(sk):
        raise RocketMQOptionError("secretKey" if ak else "accessKey", "give accessKey and secretKey together (ACL)")
    return (ak, sk) if ak else None


def _check_known(options: Mapping[str, str], known: tuple[str, ...]) -> dict[str, str]:
    """Return options keyed by their canonical spelling; reject unknown names with a suggestion."""
    lower = {k.lower(): k for k in known}
    injected = {k.lower() for k in _SPARK_INJECTED}
    out: dict[str, str] = {}
    for name, value in options.items():
        canon = lower.get(name.lower())
        if canon is None:
            if name.lower() in injected or name.lower().startswith("spark."):
                continue
            close = difflib.get_close_matches(name.lower(), list(lower), n=1, cutoff=0.6)
            hint = f"did you mean '{lower[close[0]]}'?" if close else f"known options: {', '.join(known)}"
            raise RocketMQOptionError(name, f"unknown option; {hint}")
        out[canon] = value
    return out


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name)
    if raw is None:
        return default
    v = raw.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise RocketMQOptionError(name, f"expected true or false, got {raw!r}")


def _int(opts: dict[str, str], name: str, *, minimum: int = 1) -> int | None:
    raw = opts.get(name)
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise RocketMQOptionError(name, f"expected an integer, got {raw!r}") from None
    if value < minimum:
        raise RocketMQOptionError(name, f"must be >= {minimum}, got {value}")
    return value


def _nameserver(opts: dict[str, str]) -> str:
    raw = (opts.get("nameserver") or "").strip()
    if not raw:
        raise RocketMQOptionError("nameserver", "required, e.g. .option('nameserver', '127.0.0.1:9876')")
    for addr in raw.split(";"):
        host, sep, port = addr.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise RocketMQOptionError("nameserver", f"expected host:port[;host:port...], got {raw!r}")
    return raw


def _topic(name: str, topic: str) -> str:
    topic = topic.strip()
    if not _TOPIC_RE.match(topic):
        raise RocketMQOptionError(name, f"{topic!r} is not a valid topic name (letters, digits, %|_-)")
    return topic


def split_queue_key(key: str) -> tuple[str, int]:
    """``"broker-a:3"`` -> ("broker-a", 3); raises ValueError otherwise."""
    broker, sep, qid = key.rpartition(":")
    if not sep or not broker or not qid.lstrip("-").isdigit() or int(qid) < 0:
        raise ValueError(f"{key!r} is not 'brokerName:queueId'")
    return broker, int(qid)


def _selection(opts: dict[str, str]) -> Selection:
    given = [k for k in ("subscribe", "subscribePattern", "assign") if opts.get(k, "").strip()]
    if len(given) != 1:
        what = "none" if not given else " and ".join(given)
        raise RocketMQOptionError(
            "subscribe", f"give exactly one of subscribe, subscribePattern or assign (got {what})"
        )
    kind = given[0]
    raw = opts[kind].strip()
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(_topic(kind, t) for t in raw.split(",") if t.strip()))
        if not topics:
            raise RocketMQOptionError(kind, "no topic given")
        return Selection(topics=topics)
    if kind == "subscribePattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise RocketMQOptionError(kind, f"not a valid regular expression: {exc}") from None
        return Selection(pattern=raw)
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise RocketMQOptionError(kind, f"not valid JSON ({exc.msg}); expected e.g. "
                                  '{"topicA": [0, 1], "topicB": ["broker-a:0"]}') from None
    if not isinstance(doc, dict) or not doc:
        raise RocketMQOptionError(kind, 'expected a JSON object like {"topicA": [0, 1]}')
    assignment: dict[str, tuple[int | str, ...]] = {}
    for topic, queues in doc.items():
        _topic(kind, topic)
        if not isinstance(queues, list) or not queues:
            raise RocketMQOptionError(kind, f"topic {topic!r}: expected a non-empty list of queues")
        sel: list[int | str] = []
        for q in queues:
            if isinstance(q, bool) or not isinstance(q, int | str):
                raise RocketMQOptionError(kind, f"topic {topic!r}: {q!r} is not a queue id or 'broker:queueId'")
            if isinstance(q, int):
                if q < 0:
                    raise RocketMQOptionError(kind, f"topic {topic!r}: queue id {q} is negative")
            else:
                try:
                    split_queue_key(q)
                except ValueError as exc:
                    raise RocketMQOptionError(kind, f"topic {topic!r}: {exc}") from None
            sel.append(q)
        assignment[topic] = tuple(dict.fromkeys(sel))
    return Selection(assignment=assignment)


def _offset_spec(opts: dict[str, str], name: str, *, starting: bool, streaming: bool) -> OffsetSpec | None:
    raw = opts.get(name)
    if raw is None:
        return None
    v = raw.strip()
    if v.lower() == "earliest":
        if not starting:
            raise RocketMQOptionError(name, "'earliest' is not allowed as an ending offset")
        return OffsetSpec("earliest")
    if v.lower() == "latest":
        if starting and not streaming:
            raise RocketMQOptionError(name, "'latest' is not allowed as a batch starting offset")
        return OffsetSpec("latest", default=LATEST)
    try:
        doc = json.loads(v)
    except json.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        raise RocketMQOptionError(
            name, 'expected earliest, latest or JSON like {"topicA": {"broker-a:0": 42, "broker-a:1": -2}}'
        )
    queues: dict[str, dict[str, int]] = {}
    for topic, per_queue in doc.items():
        _topic(name, topic)
        if not isinstance(per_queue, dict):
            raise RocketMQOptionError(name, f"topic {topic!r}: expected an object of 'broker:queueId': offset")
        out: dict[str, int] = {}
        for key, off in per_queue.items():
            try:
                split_queue_key(key)
            except ValueError as exc:
                raise RocketMQOptionError(name, f"topic {topic!r}: {exc}") from None
            if isinstance(off, bool) or not isinstance(off, int) or off < EARLIEST:
                raise RocketMQOptionError(name, f"{topic}/{key}: offset must be an integer >= -2, got {off!r}")
            if off == EARLIEST and not starting:
                raise RocketMQOptionError(name, f"{topic}/{key}: -2 (earliest) is not allowed as an ending offset")
            if off == LATEST and starting and not streaming:
                raise RocketMQOptionError(name, f"{topic}/{key}: -1 (latest) is not allowed as a batch start")
            out[key] = off
        queues[topic] = out
    return OffsetSpec("json", queues=queues, default=EARLIEST if starting else LATEST)


def _timestamp_spec(opts: dict[str, str], name: str) -> OffsetSpec | None:
    ts = _int(opts, name, minimum=0)
    return None if ts is None else OffsetSpec("timestamp", timestamp_ms=ts)


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceConfig:
    """Validate reader options; ``streaming`` changes defaults and what is allowed (as Kafka's)."""
    opts = _check_known(options, SOURCE_OPTIONS)
    nameserver = _nameserver(opts)
    selection = _selection(opts)

    starting = _offset_spec(opts, "startingOffsets", starting=True, streaming=streaming)
    by_time = _timestamp_spec(opts, "startingTimestamp")
    if starting is not None and by_time is not None:
        raise RocketMQOptionError("startingTimestamp", "give either startingOffsets or startingTimestamp, not both")
    starting = by_time or starting or (OffsetSpec("latest", default=LATEST) if streaming else OffsetSpec("earliest"))

    ending = _offset_spec(opts, "endingOffsets", starting=False, streaming=streaming)
    end_time = _timestamp_spec(opts, "endingTimestamp")
    if streaming and (ending is not None or end_time is not None):
        bad = "endingOffsets" if ending is not None else "endingTimestamp"
        raise RocketMQOptionError(bad, "only for batch queries; a stream has no end")
    if ending is not None and end_time is not None:
        raise RocketMQOptionError("endingTimestamp", "give either endingOffsets or endingTimestamp, not both")
    if not streaming:
        ending = end_time or ending or OffsetSpec("latest", default=LATEST)

    max_per_trigger = _int(opts, "maxOffsetsPerTrigger")
    if max_per_trigger is not None and not streaming:
        raise RocketMQOptionError("maxOffsetsPerTrigger", "only for streaming queries")

    filter_type = (opts.get("filterType") or "TAG").strip().upper()
    if filter_type not in ("TAG", "SQL92"):
        raise RocketMQOptionError("filterType", f"expected TAG or SQL92, got {opts['filterType']!r}")
    expression = (opts.get("filter") or "").strip() or None
    if filter_type == "SQL92" and expression is None:
        raise RocketMQOptionError("filter", "filterType SQL92 needs a filter expression")
    if filter_type == "TAG" and expression is not None:
        tags = [t.strip() for t in expression.split("||")]
        if any(not t for t in tags):
            raise RocketMQOptionError("filter", f"{expression!r} is not a tag expression like 'a || b' or '*'")

    ts_source = (opts.get("timestampSource") or "store").strip().lower()
    if ts_source not in ("store", "born"):
        raise RocketMQOptionError("timestampSource", f"expected store or born, got {opts['timestampSource']!r}")

    group = (opts.get("groupId") or "").strip() or None
    if group is not None and not _TOPIC_RE.match(group):
        raise RocketMQOptionError("groupId", f"{group!r} is not a valid group name (letters, digits, %|_-)")

    timeout_ms = _int(opts, "requestTimeoutMs")
    return SourceConfig(
        nameserver=nameserver,
        selection=selection,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=_int(opts, "minPartitions"),
        include_headers=_bool(opts, "includeHeaders", False),
        filter_expression=expression,
        filter_type=filter_type,  # type: ignore[arg-type]
        group_id=group,
        timestamp_source=ts_source,  # type: ignore[arg-type]
        pull_batch_size=_int(opts, "pullBatchSize") or 256,
        request_timeout_s=(timeout_ms or 10_000) / 1000.0,
        credentials=_credentials(opts),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkConfig:
    """Validate writer options."""
    opts = _check_known(options, SINK_OPTIONS)
    topic = opts.get("topic")
    send_ms = _int(opts, "sendTimeoutMs")
    req_ms = _int(opts, "requestTimeoutMs")
    group = (opts.get("producerGroup") or "rmq_spark_sink").strip()
    if not _TOPIC_RE.match(group):
        raise RocketMQOptionError("producerGroup", f"{group!r} is not a valid group name")
    return SinkConfig(
        nameserver=_nameserver(opts),
        topic=_topic("topic", topic) if topic is not None else None,
        producer_group=group,
        batch_size=_int(opts, "batchSize") or 256,
        send_timeout_s=(send_ms or 10_000) / 1000.0,
        request_timeout_s=(req_ms or 10_000) / 1000.0,
        credentials=_credentials(opts),
        exactly_once=_bool(opts, "exactlyOnce", False),
        commit_log=_commit_log(options, opts),
        grace_s=(_int(opts, "transactionGraceMs") or 60_000) / 1000.0,
        test_fail_commit=_choice(opts, "testFailCommit", ("beforeLog", "afterLog")),
        test_fail_task=_int(opts, "testFailTask", minimum=0),
    )


def _commit_log(raw: Mapping[str, str], opts: dict[str, str]) -> str | None:
    """Where exactly-once commits are logged: the option, else ``<checkpointLocation>/rocketmq-sink``."""
    if opts.get("commitLogLocation"):
        return opts["commitLogLocation"].strip()
    for k, v in raw.items():
        if k.lower() == "checkpointlocation" and v:
            return v.rstrip("/") + "/rocketmq-sink"
    return None


def _choice(opts: dict[str, str], name: str, allowed: tuple[str, ...]) -> str | None:
    raw = opts.get(name)
    if raw is None:
        return None
    for a in allowed:
        if raw.strip().lower() == a.lower():
            return a
    raise RocketMQOptionError(name, f"expected one of {', '.join(allowed)}, got {raw!r}")


def describe(value: Any) -> str:
    """Short repr for error messages."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
