"""The three filter plugins behind one pluggy hook: each claims its type, a third party wins."""

from __future__ import annotations

import pluggy
import pytest

from rmq.kernel.hookspecs import filtering
from rmq.kernel.hookspecs.filtering import FilterExpressionError, MessageFilter
from rmq.kernel.markers import PROJECT, hookimpl
from rmq.plugins.filters import ClassFilterPlugin, Sql92FilterPlugin, TagFilterPlugin
from rmq.plugins.filters.classfilter import ClassFilter
from rmq.plugins.filters.sql92 import Sql92Filter
from rmq.plugins.filters.tag import TagFilter


def manager(*extra: object) -> pluggy.PluginManager:
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(filtering)
    for plugin in (TagFilterPlugin({}), Sql92FilterPlugin({}), ClassFilterPlugin({}), *extra):
        pm.register(plugin)
    pm.check_pending()
    return pm


@pytest.mark.parametrize(
    ("expression_type", "expression", "cls"),
    [
        ("TAG", "TagA || TagB", TagFilter),
        (None, "*", TagFilter),
        ("SQL92", "a > 1", Sql92Filter),
        ("sql92", "a > 1", Sql92Filter),
        ("CLASS", "com.example.F", ClassFilter),
    ],
)
def test_each_type_reaches_its_plugin(expression_type: str | None, expression: str, cls: type) -> None:
    f = manager().hook.rmq_filter_make_filter(expression_type=expression_type, expression=expression)
    assert type(f) is cls


def test_unknown_type_gives_none() -> None:
    assert manager().hook.rmq_filter_make_filter(expression_type="XPATH", expression="/a") is None


def test_compile_errors_propagate() -> None:
    with pytest.raises(FilterExpressionError, match="column"):
        manager().hook.rmq_filter_make_filter(expression_type="SQL92", expression="a LIKE 'x'")


class CaseInsensitiveTags:
    """A third-party TAG filter: registered without trylast, so it is asked first."""

    @hookimpl
    def rmq_filter_make_filter(self, expression_type: str, expression: str) -> MessageFilter | None:
        if (expression_type or "TAG").upper() != "TAG":
            return None
        return TagFilter(expression.lower())


def test_a_third_party_plugin_wins_over_the_bundled_ones() -> None:
    pm = manager(CaseInsensitiveTags())
    f = pm.hook.rmq_filter_make_filter(expression_type="TAG", expression="TagA")
    assert f.tags == {"taga"}
    sql = pm.hook.rmq_filter_make_filter(expression_type="SQL92", expression="a = 1")
    assert type(sql) is Sql92Filter  # it declined; the bundled plugin answered


def test_entry_points_name_these_classes() -> None:
    from importlib.metadata import entry_points

    expected = {"tag": TagFilterPlugin, "sql92": Sql92FilterPlugin, "class": ClassFilterPlugin}
    found = {ep.name: ep.load() for ep in entry_points(group="rmq.filters") if ep.name in expected}
    assert found == expected
