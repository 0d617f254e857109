"""Bundled subscription filters (entry-point namespace ``rmq.filters``).

``tag`` (TAG: tag-hash match), ``sql92`` (SQL92 over properties) and ``class``
(legacy class-filter mode: matches all). Each plugin claims its expression type
in ``rmq_filter_make_filter`` and returns an immutable ``MessageFilter``; the
compile functions are importable for clients and tools that need no kernel.
"""

from rmq.plugins.filters.classfilter import ClassFilter, ClassFilterPlugin
from rmq.plugins.filters.sql92 import (
    Sql92Error,
    Sql92EvaluationError,
    Sql92Filter,
    Sql92FilterPlugin,
    compile_sql92,
)
from rmq.plugins.filters.tag import TagFilter, TagFilterPlugin, compile_tag, parse_tags

__all__ = [
    "ClassFilter",
    "ClassFilterPlugin",
    "Sql92Error",
    "Sql92EvaluationError",
    "Sql92Filter",
    "Sql92FilterPlugin",
    "TagFilter",
    "TagFilterPlugin",
    "compile_sql92",
    "compile_tag",
    "parse_tags",
]
