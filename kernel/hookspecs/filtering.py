"""Filtering: which messages of a queue a subscription receives.

A filter is built once per (group, topic, expression) and cached by the broker;
the store consults it per consume-queue unit and, only when the filter asks for
it, per record's properties. Bundled: ``tag`` (TAG, hash match), ``sql92``
(SQL92 over properties), ``class`` (legacy class-filter mode: matches all).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from rmq.kernel.markers import hookspec


class FilterExpressionError(ValueError):
    """A subscription expression that does not compile; the message says where and why."""


@runtime_checkable
class MessageFilter(Protocol):
    """A compiled subscription.

    Pure and thread-safe: no I/O, no state between calls, same answer for the
    same input. ``needs_properties`` tells the store whether it must decode
    record properties for ``match_properties`` (False for tag filters, so the
    common path never touches the commitlog).
    """

    expression_type: str
    expression: str
    needs_properties: bool

    def match_tags_code(self, tags_code: int) -> bool:
        """Consume-queue stage: may the message with this tags hash match? (may over-match)."""
        ...

    def match_properties(self, properties: Mapping[str, str]) -> bool:
        """Commitlog stage: exact decision for filters that need properties."""
        ...


@hookspec(firstresult=True)
def rmq_filter_make_filter(expression_type: str, expression: str) -> MessageFilter | None:
    """Compile a subscription expression.

    ``expression_type`` is ``TAG``, ``SQL92`` or another name a plugin claims
    (compare case-insensitively); ``expression`` as the client sent it. Return
    None when the type is not yours. Raise ``FilterExpressionError`` when the
    type is yours but the expression is invalid. Called once per subscription
    change (the broker caches by group, topic and expression).

    Arguments:
    - ``expression_type``: ``TAG``, ``SQL92`` or a name a plugin claims (case-insensitive).
    - ``expression``: the subscription expression as the client sent it.
    """
