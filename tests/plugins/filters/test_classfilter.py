"""CLASS filter: the legacy mode is accepted and matches everything, as 4.3+ brokers do."""

from __future__ import annotations

import pytest

from rmq.kernel.hookspecs.filtering import MessageFilter
from rmq.plugins.filters.classfilter import ClassFilter, ClassFilterPlugin
from rmq.testing.filtering import MessageFilterContract


class TestClassFilterContract(MessageFilterContract):
    expression_type = "CLASS"
    valid_expressions = ("com.example.OrderFilter", "", "public class X implements MessageFilter {}")

    def make_filter(self, expression_type: str, expression: str) -> MessageFilter | None:
        return ClassFilterPlugin({}).rmq_filter_make_filter(expression_type, expression)


def test_matches_everything() -> None:
    f = ClassFilter("com.example.OrderFilter")
    assert f.expression_type == "CLASS" and f.needs_properties is False
    assert f.expression == "com.example.OrderFilter"
    assert all(f.match_tags_code(c) for c in (0, 42, -1, 2**31 - 1))
    assert f.match_properties({}) and f.match_properties({"TAGS": "x"})
    assert repr(f) == "ClassFilter('com.example.OrderFilter')"
    assert ClassFilter(None).expression == ""  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("expression_type", "claimed"), [("CLASS", True), ("class", True), ("TAG", False), ("", False)]
)
def test_plugin_claim(expression_type: str, claimed: bool) -> None:
    f = ClassFilterPlugin({}).rmq_filter_make_filter(expression_type, "X")
    assert isinstance(f, ClassFilter) if claimed else f is None


def test_plugin_options() -> None:
    with pytest.raises(ValueError, match=r"rmq\.filters:class: unknown option"):
        ClassFilterPlugin({"servers": 2})
