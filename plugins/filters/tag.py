"""TAG subscriptions: ``*`` or ``TagA || TagB``, matched by tag hash at the consume-queue stage.

RocketMQ stores a 32-bit Java ``hashCode`` of the whole ``TAGS`` value in every
consume-queue unit, so the broker can decide without reading the commitlog; the
price is that hash collisions over-match, which is why the client re-checks the
exact tag string (``match_tag``). Semantics as RocketMQ 4.x (reference §10.1):

* ``None``, ``""`` or exactly ``"*"`` subscribes to everything (``" * "`` does
  not: it names the tag ``*``, as in RocketMQ).
* Otherwise split on ``||``, trim, drop empties. A whitespace-only expression
  therefore names no tag and matches nothing (RocketMQ accepts it the same way).
* A message without tags matches only an all-subscription.
"""

from __future__ import annotations

from collections.abc import Mapping

from rmq.kernel import MessageFilter
from rmq.plugins.filters._plugin import SingleTypeFilterPlugin
from rmq.protocol.common import Prop, tags_code

EXPRESSION_TYPE = "TAG"
SUBSCRIBE_ALL = "*"
_INT_MIN = -0x80000000
_INT_MAX = 0x7FFFFFFF


def _to_int32(code: int) -> int:
    """Java ``(int) long``: the broker compares the low 32 bits of a stored tags code."""
    code &= 0xFFFFFFFF
    return code - 0x100000000 if code & 0x80000000 else code


def parse_tags(expression: str | None) -> frozenset[str] | None:
    """The tag set of a subscription, or None for subscribe-all."""
    if expression is None or expression == "" or expression == SUBSCRIBE_ALL:
        return None
    return frozenset(t for t in (part.strip() for part in expression.split("||")) if t)


class TagFilter:
    """A compiled TAG subscription; immutable, so one instance serves every pull of the group."""

    __slots__ = ("expression", "tags", "code_set", "subscribe_all")

    expression_type: str = EXPRESSION_TYPE
    needs_properties: bool = False

    expression: str
    tags: frozenset[str]
    code_set: frozenset[int]
    subscribe_all: bool

    def __init__(self, expression: str | None) -> None:
        parsed = parse_tags(expression)
        self.subscribe_all = parsed is None
        self.expression = SUBSCRIBE_ALL if parsed is None else str(expression)
        self.tags = parsed or frozenset()
        self.code_set = frozenset(tags_code(t) for t in self.tags)

    def match_tags_code(self, tags_code: int) -> bool:
        """Consume-queue stage: hash membership (over-matches on collisions; the client re-checks)."""
        if self.subscribe_all or tags_code in self.code_set:
            return True
        # stored codes are sign-extended int32s; anything wider is compared on its low 32 bits
        return not _INT_MIN <= tags_code <= _INT_MAX and _to_int32(tags_code) in self.code_set

    @property
    def compiled_codes(self) -> frozenset[int] | None:
        """This filter for a compiled matcher (the mmap store's pull walk): None matches everything, else
        ``match_tags_code`` is membership in these codes of a tags code, or of its low 32 bits when wider."""
        return None if self.subscribe_all else self.code_set

    def match_tag(self, tag: str | None) -> bool:
        """Client stage: the exact decision on the message's ``TAGS`` value (None = no tags)."""
        return self.subscribe_all or (tag is not None and tag in self.tags)

    def match_properties(self, properties: Mapping[str, str]) -> bool:
        """Exact decision from the properties (``TAGS``); the broker never needs it (needs_properties=False)."""
        return self.match_tag(properties.get(Prop.TAGS))

    def __repr__(self) -> str:
        return f"TagFilter({self.expression!r})"


def compile_tag(expression: str | None) -> TagFilter:
    """Build a TAG filter; every string is a valid TAG expression, so this never raises."""
    return TagFilter(expression)


class TagFilterPlugin(SingleTypeFilterPlugin):
    """Entry point ``rmq.filters:tag``: claims ``TAG`` (and a missing/empty type, RocketMQ's default)."""

    expression_type = EXPRESSION_TYPE
    entry_point = "rmq.filters:tag"
    claims_missing_type = True

    def build(self, expression: str) -> MessageFilter:
        return TagFilter(expression)
