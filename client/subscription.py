"""Subscriptions: the expression a consumer gives, as heartbeats and pulls carry it."""

from __future__ import annotations

import time
from typing import Any

import attrs

from rmq.protocol.common import java_hash

TAG = "TAG"
SQL92 = "SQL92"
SUB_ALL = "*"


def retry_topic(group: str) -> str:
    return f"%RETRY%{group}"


def dlq_topic(group: str) -> str:
    return f"%DLQ%{group}"


@attrs.frozen(slots=True)
class Subscription:
    """One topic's filter. TAG: ``*`` or ``a || b``; SQL92: an expression over properties."""

    topic: str
    expression: str = SUB_ALL
    expression_type: str = TAG
    tags: frozenset[str] = frozenset()
    codes: tuple[int, ...] = ()
    version: int = attrs.field(factory=lambda: time.time_ns() // 1_000_000)

    @classmethod
    def parse(cls, topic: str, expression: str | None = SUB_ALL, expression_type: str = TAG) -> Subscription:
        etype = (expression_type or TAG).upper()
        if etype not in (TAG, SQL92):
            raise ValueError(f"expression_type must be 'TAG' or 'SQL92', got {expression_type!r}")
        expr = (expression or "").strip()
        if etype == SQL92:
            if not expr:
                raise ValueError("an SQL92 subscription needs an expression")
            return cls(topic, expr, SQL92)
        if not expr or expr == SUB_ALL:
            return cls(topic, SUB_ALL, TAG)
        tags = [t.strip() for t in expr.split("||")]
        tags = [t for t in tags if t]
        if not tags:
            return cls(topic, SUB_ALL, TAG)
        ordered = list(dict.fromkeys(tags))
        return cls(topic, expr, TAG, frozenset(ordered), tuple(java_hash(t) for t in ordered))

    @property
    def all(self) -> bool:
        return self.expression_type == TAG and not self.tags

    @property
    def refilter(self) -> frozenset[str] | None:
        """The exact tag set a consumer re-checks after the broker's hash filter (None: keep all)."""
        return self.tags if self.expression_type == TAG and self.tags else None

    def to_json(self) -> dict[str, Any]:
        """SubscriptionData as Java's heartbeat writes it."""
        return {
            "classFilterMode": False,
            "codeSet": list(self.codes),
            "expressionType": self.expression_type,
            "subString": self.expression,
            "subVersion": self.version,
            "tagsSet": sorted(self.tags),
            "topic": self.topic,
        }
