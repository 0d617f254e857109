"""SQL92 under random input: garbage compiles or raises FilterExpressionError, nothing else;
well-formed expressions always compile and never raise while matching.

Part of the fuzz suite: ``make fuzz`` runs these properties with the ``rmq-fuzz`` profile
(see ``rmq.testing.fuzz``)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.kernel.hookspecs.filtering import FilterExpressionError
from rmq.plugins.filters.sql92 import Sql92EvaluationError, Sql92Filter, compile_sql92
from rmq.testing.fuzz import fuzz_settings

NAMES = ["a", "b", "c", "TAGS"]

TOKENS = [
    "a", "b", "TAGS", "$x", "_y", "NOT", "not", "AND", "OR", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE",
    "LIKE", "CONTAINS", "(", ")", ",", "=", "<>", "<", "<=", ">", ">=", "+", "-", "*", "/", "!=", "'x'", "'",
    "''", "'it''s'", "0", "1", "012", "5L", "2147483648", "99999999999999999999", "1.5", ".5", "5.", "1e3",
    "1e999", "0x1F", "--", "/*", "*/", "\n", "\t", ";", '"', "\u00e9", "\u20ac",
]  # fmt: skip

property_values = st.one_of(
    st.integers().map(str),
    st.floats().map(repr),
    st.text(max_size=6),
    st.sampled_from(["true", "TRUE", "NaN", "Infinity", "-0", "0x1p3", " 7 ", "1.5f", "9" * 30, ""]),
)
properties = st.dictionaries(st.sampled_from(NAMES), property_values, max_size=4)

garbage = st.one_of(
    st.text(max_size=60),
    st.lists(st.sampled_from(TOKENS), max_size=24).map(" ".join),
    st.lists(st.sampled_from(TOKENS), max_size=24).map("".join),
)


def check_matching(f: Sql92Filter, props: Mapping[str, str]) -> object:
    assert type(f.match_properties(props)) is bool
    try:
        value = f.evaluate(props)
    except Sql92EvaluationError:
        return "ERR"
    assert value is True or value is False or value is None
    return value


@fuzz_settings(600)
@given(garbage, properties)
def test_garbage_compiles_or_raises_filter_expression_error(expression: str, props: dict[str, str]) -> None:
    try:
        f = compile_sql92(expression)
    except FilterExpressionError as e:
        assert str(e).startswith("SQL92 filter error at ")
        return
    check_matching(f, props)


# -- well-formed expressions, built from the grammar

name = st.sampled_from(NAMES)
int_literal = st.integers(-(2**63) + 1, 2**63 - 1).map(str)
float_literal = st.floats(allow_nan=False, allow_infinity=False).map(repr)
number = st.one_of(int_literal, float_literal)
string_literal = st.text(max_size=5).map(lambda s: "'" + s.replace("'", "''") + "'")
order_op = st.sampled_from(["=", "<>", "<", "<=", ">", ">="])
ordered_bounds = st.lists(st.integers(-1000, 1000), min_size=2, max_size=2).map(sorted)

comparison = st.one_of(
    st.builds(lambda n, op, v: f"{n} {op} {v}", name, order_op, number),
    st.builds(lambda v, op, n: f"{v} {op} {n}", number, order_op, name),
    st.builds(lambda n, op, m: f"{n} {op} {m}", name, order_op, name),
    st.builds(lambda n, op, s: f"{n} {op} {s}", name, st.sampled_from(["=", "<>"]), string_literal),
    st.builds(lambda n, b: f"{n} = {b}", name, st.sampled_from(["TRUE", "FALSE"])),
    st.builds(
        lambda n, neg, lh: f"{n} {neg}BETWEEN {lh[0]} AND {lh[1]}",
        name,
        st.sampled_from(["", "NOT "]),
        ordered_bounds,
    ),
    st.builds(
        lambda n, neg, items: f"{n} {neg}IN ({', '.join(items)})",
        name,
        st.sampled_from(["", "NOT "]),
        st.lists(string_literal, min_size=1, max_size=4),
    ),
    st.builds(lambda n, neg: f"{n} IS {neg}NULL", name, st.sampled_from(["", "NOT "])),
    st.sampled_from(["TRUE", "FALSE", "NULL", "a", "NOT b"]),
)
condition = st.recursive(
    comparison,
    lambda inner: st.one_of(
        st.builds(lambda x, y: f"({x}) AND ({y})", inner, inner),
        st.builds(lambda x, y: f"({x}) OR ({y})", inner, inner),
        st.builds(lambda x: f"NOT ({x})", inner),
        st.builds(lambda x: f"/* c */ ({x}) -- c\n", inner),
    ),
    max_leaves=10,
)

NOT = {True: False, False: True, None: None, "ERR": "ERR"}


@fuzz_settings(400)
@given(condition, properties)
def test_well_formed_expressions_compile_and_never_raise(expression: str, props: dict[str, str]) -> None:
    f = compile_sql92(expression)
    value = check_matching(f, props)
    # metamorphic checks against the three-valued rules
    assert check_matching(compile_sql92(f"NOT ({expression})"), props) == NOT[value]
    assert check_matching(compile_sql92(f"({expression}) AND ({expression})"), props) == value
    if value != "ERR":
        assert check_matching(compile_sql92(f"({expression}) OR TRUE"), props) is True
        assert check_matching(compile_sql92(f"({expression}) AND FALSE"), props) is False
        assert check_matching(compile_sql92(f"({expression}) IS NULL"), props) is (value is None)


HOSTILE = [
    "(" * 5000 + "a = 1" + ")" * 5000,
    "NOT " * 5000 + "a",
    "a = " + "1" * 5000,
    "a IN (" + ", ".join(["'x'"] * 5000) + ")",
    " AND ".join(["a = 1"] * 5000),
    " OR ".join(["a = 1"] * 5000),
    "a = '" + "''" * 5000 + "'",
    "a BETWEEN " + " AND ".join(["1"] * 500),
    "a = 1e99511627776",
    "a = NaN OR b = Infinity",
    "a = '\x00\udcff'",
]


@pytest.mark.parametrize("expression", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_expressions_are_bounded(expression: str) -> None:
    """Deep nesting, huge literals and long lists: a FilterExpressionError or a filter, never a crash."""
    try:
        f = compile_sql92(expression)
    except FilterExpressionError:
        return
    for props in ({}, {"a": "1"}, {"a": "x", "b": "2"}):
        check_matching(f, props)
