"""Legacy class-filter mode: accepted, and matches every message, as RocketMQ 4.3+ brokers do.

Up to RocketMQ 4.2 a consumer could upload a Java ``MessageFilter`` class that
separate FilterServer processes ran on every message. 4.3 removed the
FilterServer; the ``classFilterMode`` flag survives on the wire and the broker
treats such a subscription as "match everything" (reference §10.4). This plugin
keeps that behaviour, so an old client still subscribes instead of failing; it
never executes anything the client sent. Filter such messages in the consumer.
"""

from __future__ import annotations

from collections.abc import Mapping

from rmq.kernel import MessageFilter
from rmq.plugins.filters._plugin import SingleTypeFilterPlugin

EXPRESSION_TYPE = "CLASS"


class ClassFilter:
    """Matches every message at both stages; ``expression`` is the class name or source as sent."""

    __slots__ = ("expression",)

    expression_type: str = EXPRESSION_TYPE
    needs_properties: bool = False

    expression: str

    def __init__(self, expression: str | None) -> None:
        self.expression = expression or ""

    def match_tags_code(self, tags_code: int) -> bool:
        return True

    def match_properties(self, properties: Mapping[str, str]) -> bool:
        return True

    def __repr__(self) -> str:
        return f"ClassFilter({self.expression!r})"


class ClassFilterPlugin(SingleTypeFilterPlugin):
    """Entry point ``rmq.filters:class``: claims ``CLASS`` (any case)."""

    expression_type = EXPRESSION_TYPE
    entry_point = "rmq.filters:class"

    def build(self, expression: str) -> MessageFilter:
        return ClassFilter(expression)
