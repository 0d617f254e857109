"""The shape every bundled filter plugin shares: no options, one claimed expression type, one factory.

Each bundled filter claims its type case-insensitively and otherwise defers
(returns None) so the next plugin may claim it; writing that once keeps the
claim rule the same for all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from rmq.kernel import MessageFilter, hookimpl
from rmq.plugins.filters._options import check_no_options


class SingleTypeFilterPlugin:
    """Base of the bundled filter plugins; a subclass names its type and entry point and builds the filter."""

    expression_type: ClassVar[str]
    entry_point: ClassVar[str]  # e.g. ``rmq.filters:tag``, named in option errors
    claims_missing_type: ClassVar[bool] = False  # TAG is RocketMQ's default when no type is sent

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        check_no_options(options, self.entry_point)

    def build(self, expression: str) -> MessageFilter:
        raise NotImplementedError

    @hookimpl(trylast=True)
    def rmq_filter_make_filter(self, expression_type: str, expression: str) -> MessageFilter | None:
        if not expression_type:
            if not self.claims_missing_type:
                return None
        elif expression_type.upper() != self.expression_type:
            return None
        return self.build(expression)
