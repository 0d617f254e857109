"""Topic and group names: RocketMQ's rules, the reserved names and the prefixes, in one place.

A name reaches the broker from strangers and ends up in directory names, log lines
and JSON files, so every side that accepts one (broker, name server, store, client)
checks it here before doing anything with it. The rule is RocketMQ's
``TopicValidator``: ``^[%|a-zA-Z0-9_-]+$``, at most 127 characters for a topic and
255 for a group. That excludes separators, dots and control characters by itself.
"""

from __future__ import annotations

import re
from typing import Final

VALID_NAME: Final = re.compile(r"[%|a-zA-Z0-9_-]+")
MAX_TOPIC_LENGTH: Final = 127
MAX_GROUP_LENGTH: Final = 255

RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"

AUTO_CREATE_TOPIC: Final = "TBW102"
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
BENCHMARK_TOPIC: Final = "BenchmarkTest"
SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
TIMER_TOPIC: Final = "rmq_sys_wheel_timer"  # RocketMQ 5 timer messages wait here

#: Topics a client may neither create nor delete (RocketMQ's ``SYSTEM_TOPIC_SET``).
SYSTEM_TOPICS: Final = frozenset(
    (
        AUTO_CREATE_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
        TIMER_TOPIC,
    )
)
#: Topics no producer may send to directly (the broker routes messages there itself).
NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
    (SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, TIMER_TOPIC, SELF_TEST_TOPIC,
     OFFSET_MOVED_EVENT)
)  # and every rmq_sys_* topic


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def _check(kind: str, name: object, limit: int) -> str | None:
    if not isinstance(name, str) or not name or not name.strip():
        return f"The specified {kind} is blank."
    if len(name) > limit:
        return f"The specified {kind} is longer than {kind} max length {limit}: {len(name)} characters."
    if not VALID_NAME.fullmatch(name):
        shown = name if name.isprintable() and len(name) <= 160 else repr(name[:160])
        return f"The specified {kind}[{shown}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    return None


def validate_topic(topic: object) -> str | None:
    """None when ``topic`` is a legal topic name, else the reason (RocketMQ's wording, safe to log)."""
    return _check("topic", topic, MAX_TOPIC_LENGTH)


def validate_group(group: object) -> str | None:
    """None when ``group`` is a legal consumer/producer group name, else the reason."""
    return _check("group", group, MAX_GROUP_LENGTH)


class InvalidNameError(ValueError):
    """A topic or group name broke the rule; ``code`` is the RocketMQ response code to answer with."""

    def __init__(self, reason: str, code: int = 1) -> None:  # 1 = SYSTEM_ERROR, as Java's TopicValidator
        super().__init__(reason)
        self.code = code


def require_topic(topic: object, code: int = 1) -> str:
    """``topic`` when legal, else ``InvalidNameError``: the guard before any side effect."""
    reason = validate_topic(topic)
    if reason is not None:
        raise InvalidNameError(reason, code)
    return topic  # type: ignore[return-value]


def require_group(group: object, code: int = 1) -> str:
    """``group`` when legal, else ``InvalidNameError``."""
    reason = validate_group(group)
    if reason is not None:
        raise InvalidNameError(reason, code)
    return group  # type: ignore[return-value]


def is_system_topic(topic: str) -> bool:
    """Reserved for the broker: clients cannot create or delete it."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def printable(text: object, limit: int = 200) -> str:
    """``text`` made safe for one log line: control characters escaped, length bounded.

    Anything a peer sends (names, remarks, error details) goes through this before it
    is logged, so a peer can neither forge log lines nor flood them.
    """
    s = text if isinstance(text, str) else repr(text)
    if not s.isprintable():
        s = s.encode("unicode_escape", "backslashreplace").decode("ascii")
    if len(s) > limit:
        s = f"{s[:limit]}…(+{len(s) - limit} chars)"
    return s
