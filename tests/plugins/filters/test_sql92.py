"""SQL92 filter: the reference's grammar and three-valued semantics (§10.2), case by case.

Expected values were derived by hand from the rules, not by running the code:
T/F/N are TRUE/FALSE/NULL, ERR a coercion failure (the message is not matched).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

import pytest

from rmq.kernel.hookspecs.filtering import FilterExpressionError, MessageFilter
from rmq.plugins.filters.sql92 import (
    MAX_DEPTH,
    Sql92Error,
    Sql92EvaluationError,
    Sql92Filter,
    Sql92FilterPlugin,
    compile_sql92,
)
from rmq.testing.filtering import MessageFilterContract

T, F, N, ERR = True, False, None, "ERR"


class TestSql92FilterContract(MessageFilterContract):
    expression_type = "SQL92"
    valid_expressions = (
        "a > 5 AND b = 'x'",
        "TAGS IN ('TagA', 'TagB') AND a BETWEEN 0 AND 3",
        "a IS NULL OR c > 1.5",
        "NOT (a BETWEEN 1 AND 3) AND b <> 'y'",
        "a = 10 OR TRUE",
        "TAGS = 'TagA'",
    )
    invalid_expressions = ("a >", "a LIKE 'x'", "a = NULL", "", "NOT a = 1", "a > 'x'")

    def make_filter(self, expression_type: str, expression: str) -> MessageFilter | None:
        return Sql92FilterPlugin({}).rmq_filter_make_filter(expression_type, expression)


CASES: list[tuple[str, Mapping[str, str], object]] = [
    # string equality and Java's asymmetric NULL rule for '='
    ("a = 'x'", {"a": "x"}, T),
    ("a = 'x'", {"a": "y"}, F),
    ("a = 'x'", {}, N),  # left NULL -> NULL
    ("'x' = a", {}, F),  # right NULL -> FALSE
    ("a <> 'x'", {"a": "y"}, T),
    ("a <> 'x'", {}, N),
    ("'x' <> a", {}, T),  # NOT FALSE
    ("a = b", {}, T),  # both NULL: equal objects
    ("a = b", {"b": "1"}, N),
    ("a = b", {"a": "1"}, F),
    ("a = b", {"a": "1", "b": "1"}, T),
    ("a = b", {"a": "1", "b": "1.0"}, F),  # two strings compare as strings
    ("a = ''", {"a": ""}, T),
    ("a = 'it''s'", {"a": "it's"}, T),
    # numeric coercion: the property parsed as the literal's Java type
    ("a = 10", {"a": "10"}, T),
    ("a = 10", {"a": "010"}, T),  # Integer.valueOf("010") is 10
    ("a = 10", {"a": "+10"}, T),
    ("a = 10", {"a": "10.0"}, ERR),
    ("a = 10", {"a": " 10"}, ERR),  # Integer.valueOf does not trim
    ("a = 10", {"a": "abc"}, ERR),
    ("10 = a", {"a": "10"}, T),
    ("a = 10.0", {"a": "10"}, T),  # Double.valueOf("10")
    ("a = 10.0", {"a": " 10 "}, T),  # Double.valueOf trims
    ("a = 1e1", {"a": "10d"}, T),
    ("a = 1.5", {"a": "1.5f"}, T),
    ("a = 8.0", {"a": "0x1p3"}, T),  # hexadecimal floating point
    ("a = 3000000000", {"a": "3000000000"}, T),  # a Long literal parses the property as a long
    ("a = 5", {"a": "3000000000"}, ERR),  # beyond Integer
    ("a = 10L", {"a": "10"}, T),
    ("a = -5", {"a": "-5"}, T),
    ("a = +5", {"a": "5"}, T),
    ("a = 0", {"a": "-0"}, T),
    ("a = 0.0", {"a": "-0.0"}, F),  # Double.compareTo tells the zeros apart
    ("a = 0.5", {"a": "NaN"}, F),
    # ordering
    ("a > 5", {"a": "6"}, T),
    ("a > 5", {"a": "5"}, F),
    ("a >= 5", {"a": "5"}, T),
    ("a < 5", {"a": "-7"}, T),
    ("a <= -5", {"a": "-5"}, T),
    ("a > 5", {}, N),
    ("a > 5", {"a": "x"}, ERR),
    ("a > 5", {"a": "5.5"}, ERR),  # parsed as an Integer
    ("a > 5.5", {"a": "5.6"}, T),
    ("a > 5.5", {"a": "NaN"}, T),  # NaN sorts above everything
    ("a < 5.5", {"a": "NaN"}, F),
    ("a > b", {"a": "10", "b": "9"}, T),  # two properties: both doubles ("10" < "9" as text)
    ("a > b", {"a": "x", "b": "1"}, ERR),
    ("a > b", {"a": "1"}, N),
    ("5 < a", {"a": "6"}, T),
    ("a > .5", {"a": "0.6"}, T),
    ("a > 5.", {"a": "5.1"}, T),
    ("a > 5E-1", {"a": "0.6"}, T),
    ("a >= 9223372036854775807", {"a": "9223372036854775807"}, T),
    ("a > 1", {"a": "1.0e0"}, ERR),
    # BETWEEN
    ("a BETWEEN 1 AND 3", {"a": "1"}, T),
    ("a BETWEEN 1 AND 3", {"a": "3"}, T),
    ("a BETWEEN 1 AND 3", {"a": "4"}, F),
    ("a BETWEEN 1 AND 3", {}, N),
    ("a NOT BETWEEN 1 AND 3", {"a": "4"}, T),
    ("a NOT BETWEEN 1 AND 3", {"a": "2"}, F),
    ("a NOT BETWEEN 1 AND 3", {}, N),
    ("a BETWEEN -1.5 AND 1.5", {"a": "0"}, T),  # double bounds: Double.valueOf("0")
    ("a BETWEEN -1.5 AND 1.5", {"a": "-1.5e0"}, T),
    ("a BETWEEN -1 AND 1", {"a": "0.0"}, ERR),  # integer bounds: Integer.valueOf("0.0") fails
    ("a BETWEEN 1 AND 1", {"a": "1"}, T),
    ("a BETWEEN 1 AND 3 AND b = 'x'", {"a": "2", "b": "x"}, T),
    # IN
    ("a IN ('x', 'y')", {"a": "y"}, T),
    ("a IN ('x', 'y')", {"a": "z"}, F),
    ("a IN ('x')", {}, N),
    ("a NOT IN ('x', 'y')", {"a": "z"}, T),
    ("a NOT IN ('x', 'y')", {"a": "x"}, F),
    ("a NOT IN ('x')", {}, N),
    ("a IN ('it''s')", {"a": "it's"}, T),
    ("(a) IN ('x')", {"a": "x"}, T),
    # IS [NOT] NULL never yields NULL
    ("a IS NULL", {}, T),
    ("a IS NULL", {"a": "x"}, F),
    ("a IS NOT NULL", {"a": "x"}, T),
    ("a IS NOT NULL", {}, F),
    ("(a > 1) IS NULL", {}, T),
    ("NULL IS NULL", {}, T),
    # booleans
    ("a = TRUE", {"a": "true"}, T),
    ("a = TRUE", {"a": "TRUE"}, T),
    ("a = FALSE", {"a": "yes"}, T),  # Boolean.valueOf("yes") is false
    ("a = TRUE", {}, N),
    ("TRUE = a", {"a": "True"}, T),
    ("TRUE", {}, T),
    ("FALSE", {}, F),
    ("NULL", {}, N),
    ("a", {"a": "true"}, F),  # a String is never a Boolean
    ("a", {}, N),
    ("NOT a", {"a": "x"}, T),
    ("(a > 1) = TRUE", {"a": "2"}, T),
    ("(a > 1) = 5", {"a": "2"}, F),  # Boolean vs number: unequal
    ("1 > 0", {}, T),
    ("1 = 1.0", {}, T),
    # logic and evaluation order
    ("a > 1 AND b = 'x'", {"a": "2", "b": "x"}, T),
    ("a > 1 AND b = 'x'", {"a": "2"}, N),
    ("a > 1 AND b = 'x'", {"a": "0"}, F),
    ("a > 1 OR b = 'x'", {"b": "x"}, T),
    ("a > 1 OR b = 'x'", {"a": "0"}, N),
    ("a = 1 OR b = 'x'", {"a": "abc", "b": "x"}, ERR),  # the failure aborts the evaluation
    ("b = 'x' OR a = 1", {"a": "abc", "b": "x"}, T),  # ... unless OR already decided
    ("a = 1 AND b = 2", {"a": "2", "b": "abc"}, F),  # AND decided by FALSE first
    ("NOT (a > 1)", {}, N),
    ("NOT (a > 1)", {"a": "0"}, T),
    ("NOT NOT (a > 1)", {"a": "2"}, T),
    ("(a > 1 OR b > 1) AND c IS NULL", {"a": "2"}, T),
    ("a = 1 AND b = 1 AND c = 1 AND d = 1", {"a": "1", "b": "1", "c": "1", "d": "1"}, T),
    ("a = 1 OR b = 1 OR c = 1 OR d = 1", {"d": "1"}, T),
    ("a = 1 OR b = 1 OR c = 1 OR d = 1", {"d": "2"}, N),
    ("TAGS IN ('TagA', 'TagB') AND a BETWEEN 0 AND 3", {"TAGS": "TagA", "a": "3"}, T),
    ("KEYS = 'k1' AND UNIQ_KEY IS NOT NULL", {"KEYS": "k1", "UNIQ_KEY": "u"}, T),
    # comments, case, identifiers
    ("a = 'x' -- a trailing comment", {"a": "x"}, T),
    ("a /* inline */ = 'x'", {"a": "x"}, T),
    ("a = 'x' -- first line\n AND b = 'y'", {"a": "x", "b": "y"}, T),
    ("a = '--not a comment'", {"a": "--not a comment"}, T),
    ("a = 'x' and B = 'y' Or c is not null", {"a": "x", "B": "y"}, T),
    ("a = 1 oR (b BeTwEeN 1 aNd 2)", {"b": "2"}, T),
    ("A = 'x'", {"a": "x"}, N),  # property names are case-sensitive
    ("$x_1 = 'v'", {"$x_1": "v"}, T),
    ("\ta\n=\r'x'\f", {"a": "x"}, T),
]


@pytest.mark.parametrize(("expression", "props", "expected"), CASES)
def test_table(expression: str, props: Mapping[str, str], expected: object) -> None:
    f = compile_sql92(expression)
    if expected == ERR:
        with pytest.raises(Sql92EvaluationError):
            f.evaluate(props)
    else:
        assert f.evaluate(props) is expected
    assert f.match_properties(props) is (expected is True)


def test_table_is_big_enough() -> None:
    assert len(CASES) >= 60


ERRORS: list[tuple[str, int, str]] = [
    # (expression, column, words the message must contain)
    ("", 1, "empty expression"),
    ("  -- only a comment", 1, "empty expression"),
    ("a >", 4, "expected a property name, a literal or '(' but found end of expression"),
    ("(a = 1", 7, "expected ')' but found end of expression"),
    ("(a = 1 b", 8, "expected ')' but found 'b'"),
    ("a = 1)", 6, "but found ')'"),
    ("a = 1 b", 7, "expected AND, OR, a comparison or end of expression but found 'b'"),
    ("(a = 1 AND", 11, "end of expression"),
    ("a = 1 and or b = 2", 11, "found 'or'"),  # the keyword as written
    ("a > 'x'", 5, "'>' compares numbers only, not the string literal 'x'"),
    ("'x' < a", 1, "'<' compares numbers only"),
    ("a > TRUE", 5, "not the boolean literal TRUE"),
    ("a >= NULL", 6, "not the NULL literal NULL"),
    ("(a > 1) > 2", 2, "cannot compare the condition 'a > 1'"),
    ("a = NULL", 5, "use IS NULL"),
    ("NULL <> a", 1, "use IS NULL"),
    ("TRUE = 1", 6, "TRUE cannot be compared with 1"),
    ("1 = FALSE", 3, "1 cannot be compared with FALSE"),
    ("'abc' = 5", 7, "'abc' is not a Java int"),
    ("a BETWEEN 3 AND 1", 11, "BETWEEN bounds are out of order: 3 is greater than 1"),
    ("a NOT BETWEEN 3.5 AND 1", 15, "out of order"),
    ("a BETWEEN 1 OR 3", 13, "expected AND between the bounds of BETWEEN but found 'OR'"),
    ("a BETWEEN 'a' AND 'b'", 11, "compares numbers only"),
    ("a IN ()", 7, "expected a string literal in the IN list but found ')'"),
    ("a IN (1, 2)", 7, "expected a string literal in the IN list but found '1'"),
    ("a IN ('x' 'y')", 11, "expected ',' or ')' in the IN list but found string literal 'y'"),
    ("a IN 'x'", 6, "expected '(' after IN"),
    ("'x' IN ('x')", 1, "IN needs a property name on its left, not the string literal 'x'"),
    ("(a > 1) IN ('x')", 2, "IN needs a property name"),
    ("a IS 1", 6, "expected NULL or NOT NULL after IS but found '1'"),
    ("a IS NOT 1", 10, "expected NULL but found '1'"),
    ("a NOT = 1", 7, "expected BETWEEN or IN after NOT but found '='"),
    ("a LIKE 'x%'", 3, "unsupported operator 'LIKE'"),
    ("a NOT LIKE 'x%'", 7, "unsupported operator 'LIKE'"),
    ("a like 'x%'", 3, "unsupported operator 'like'"),
    ("a CONTAINS 'x'", 3, "CONTAINS is not supported by RocketMQ 4.x"),
    ("a STARTSWITH 'x'", 3, "came with 5.x"),
    ("a ENDSWITH 'x'", 3, "came with 5.x"),
    ("a + 1 > 2", 3, "arithmetic operator '+' is not supported"),
    ("a > 1 - 2", 7, "arithmetic operator '-' is not supported"),
    ("a * 2 > 1", 3, "arithmetic operator '*' is not supported"),
    ("a / 2 > 1", 3, "arithmetic operator '/' is not supported"),
    ("a % 2 = 1", 3, "arithmetic operator '%' is not supported"),
    ("a != 1", 3, "use '<>'"),
    ("a == 1", 3, "use '='"),
    ("a = 1 && b = 2", 7, "use AND"),
    ("a = 1 || b = 2", 7, "use OR"),
    ("!a", 1, "use NOT"),
    ('a = "x"', 5, "use single quotes"),
    ("a = 'x", 5, "unterminated string literal"),
    ("a = 1 /* x", 7, "unterminated comment"),
    ("a = 012", 5, "leading zero"),
    ("a = 0x1F", 5, "hexadecimal literals are not supported"),
    ("a = 9223372036854775808", 5, "out of range of a Java long"),
    ("a = 1e400", 5, "out of range of a double"),
    ("NOT a = 1", 1, "ambiguous NOT before '='"),
    ("NOT a IS NULL", 1, "ambiguous NOT before 'IS'"),
    ("NOT a > 1", 1, "ambiguous NOT"),
    ("NOT a BETWEEN 1 AND 2", 1, "ambiguous NOT"),
    ("NOT a IN ('x')", 1, "ambiguous NOT"),
    ("NOT a NOT IN ('x')", 1, "ambiguous NOT before 'NOT'"),
    ("a = NOT b = c", 5, "ambiguous NOT"),
    ("-a > 1", 1, "unary '-' applies to numeric literals only, not to 'a'"),
    ("-'x' = a", 1, "unary '-' applies to numeric literals only"),
    ("5", 1, "the expression needs a condition, not the number '5'"),
    ("'x'", 1, "needs a condition, not the string literal 'x'"),
    ("a AND 5", 7, "AND needs a condition, not the number '5'"),
    ("5 OR a", 1, "OR needs a condition"),
    ("NOT 'x'", 5, "NOT needs a condition"),
    ("a = 1 ;", 7, "unexpected character ';'"),
    ("a = 1 # x", 7, "unexpected character '#'"),
    ("a = \u20ac", 5, "unexpected character '\u20ac'"),
    ("\u00e9 = 1", 1, "unexpected character"),  # identifiers are ASCII
    ("a = 'x' AND", 12, "end of expression"),
]


@pytest.mark.parametrize(("expression", "column", "words"), ERRORS)
def test_compile_errors(expression: str, column: int, words: str) -> None:
    with pytest.raises(Sql92Error) as info:
        compile_sql92(expression)
    err = info.value
    assert isinstance(err, FilterExpressionError) and isinstance(err, ValueError)
    assert err.column == column, str(err)
    assert words in str(err)
    assert str(err).startswith(f"SQL92 filter error at column {column}: ")


def test_error_format_example() -> None:
    # what was expected, what was found, and where: one line
    with pytest.raises(FilterExpressionError) as info:
        compile_sql92("(a = 1 OR b IN ('x' AND c = 2)")
    assert (
        str(info.value)
        == "SQL92 filter error at column 21: expected ',' or ')' in the IN list but found 'AND'"
    )


def test_errors_on_later_lines_name_the_line() -> None:
    with pytest.raises(Sql92Error) as info:
        compile_sql92("a = 1\n  AND b > 'x'")
    err = info.value
    assert (err.line, err.column, err.offset) == (2, 11, 16)
    assert str(err).startswith("SQL92 filter error at line 2, column 11: ")


def test_nesting_limit() -> None:
    deep = "(" * MAX_DEPTH + "a = 1" + ")" * MAX_DEPTH
    assert compile_sql92(deep).match_properties({"a": "1"})
    with pytest.raises(Sql92Error, match="nested too deeply"):
        compile_sql92("(" + deep + ")")
    with pytest.raises(Sql92Error, match="nested too deeply"):
        compile_sql92("NOT " * (MAX_DEPTH + 1) + "a")
    with pytest.raises(Sql92Error, match="nested too deeply"):
        compile_sql92("a = 1" + " = TRUE" * (MAX_DEPTH + 1))
    wide = " AND ".join(f"p{i} = 'v'" for i in range(2000))  # long chains are flat, not deep
    assert compile_sql92(wide).match_properties({f"p{i}": "v" for i in range(2000)})


def test_non_string_expression() -> None:
    with pytest.raises(FilterExpressionError, match="must be a string"):
        compile_sql92(None)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# three-valued logic, exhaustively: x and y are conditions that are TRUE, FALSE or NULL on demand

_SET = {T: "1", F: "2", N: None}  # x := (a = 1): a="1" TRUE, a="2" FALSE, absent NULL


def _props(x: object, y: object) -> dict[str, str]:
    out = {}
    if _SET[x] is not None:
        out["a"] = _SET[x]
    if _SET[y] is not None:
        out["b"] = _SET[y]
    return out  # type: ignore[return-value]


AND_TABLE = {
    (T, T): T, (T, F): F, (T, N): N,
    (F, T): F, (F, F): F, (F, N): F,
    (N, T): N, (N, F): F, (N, N): N,
}  # fmt: skip
OR_TABLE = {
    (T, T): T, (T, F): T, (T, N): T,
    (F, T): T, (F, F): F, (F, N): N,
    (N, T): T, (N, F): N, (N, N): N,
}  # fmt: skip
NOT_TABLE = {T: F, F: T, N: N}


@pytest.mark.parametrize(("x", "y"), list(itertools.product((T, F, N), repeat=2)))
def test_and_or_truth_tables(x: object, y: object) -> None:
    props = _props(x, y)
    assert compile_sql92("a = 1 AND b = 1").evaluate(props) is AND_TABLE[x, y]
    assert compile_sql92("a = 1 OR b = 1").evaluate(props) is OR_TABLE[x, y]
    # the n-ary form (flattened chains) agrees with the nested binary one
    assert compile_sql92("a = 1 AND b = 1 AND TRUE").evaluate(props) is AND_TABLE[x, y]
    assert compile_sql92("(a = 1 AND b = 1) AND TRUE").evaluate(props) is AND_TABLE[x, y]
    assert compile_sql92("a = 1 OR b = 1 OR FALSE").evaluate(props) is OR_TABLE[x, y]


@pytest.mark.parametrize("x", [T, F, N])
def test_not_truth_table(x: object) -> None:
    assert compile_sql92("NOT (a = 1)").evaluate(_props(x, N)) is NOT_TABLE[x]
    assert compile_sql92("a <> 1").evaluate(_props(x, N)) is NOT_TABLE[x]


@pytest.mark.parametrize(("x", "y"), list(itertools.product((T, F, N), repeat=2)))
def test_literal_logic(x: object, y: object) -> None:
    lit = {T: "TRUE", F: "FALSE", N: "NULL"}
    assert compile_sql92(f"{lit[x]} AND {lit[y]}").evaluate({}) is AND_TABLE[x, y]
    assert compile_sql92(f"{lit[x]} OR {lit[y]}").evaluate({}) is OR_TABLE[x, y]
    assert compile_sql92(f"NOT {lit[x]}").evaluate({}) is NOT_TABLE[x]


# ---------------------------------------------------------------------------------------------------
# the filter object and the plugin


def test_filter_object() -> None:
    f = compile_sql92("a > 5 AND TAGS = 'x' OR b IS NULL")
    assert isinstance(f, Sql92Filter) and isinstance(f, MessageFilter)
    assert f.expression_type == "SQL92" and f.needs_properties is True
    assert f.expression == "a > 5 AND TAGS = 'x' OR b IS NULL"
    assert f.property_names == {"a", "TAGS", "b"}
    assert all(f.match_tags_code(c) for c in (0, 42, -1))
    assert repr(f) == "Sql92Filter(\"a > 5 AND TAGS = 'x' OR b IS NULL\")"
    assert compile_sql92("1 > 0").property_names == frozenset()


def test_evaluation_error_says_why() -> None:
    with pytest.raises(Sql92EvaluationError, match=r"'abc' is not a Java int"):
        compile_sql92("a = 1").evaluate({"a": "abc"})
    with pytest.raises(Sql92EvaluationError, match=r"out of range of a Java int"):
        compile_sql92("a = 1").evaluate({"a": "9" * 5000})  # no int() digit-limit error either
    with pytest.raises(Sql92EvaluationError, match=r"not a Java double"):
        compile_sql92("a > b").evaluate({"a": "1", "b": "1,5"})


@pytest.mark.parametrize("expression_type", ["SQL92", "sql92", "Sql92"])
def test_plugin_claims_sql92(expression_type: str) -> None:
    f = Sql92FilterPlugin({}).rmq_filter_make_filter(expression_type, "a = 1")
    assert isinstance(f, Sql92Filter)


@pytest.mark.parametrize("expression_type", ["TAG", "", None, "SQL", "CLASS"])
def test_plugin_declines_other_types(expression_type: str | None) -> None:
    assert Sql92FilterPlugin({}).rmq_filter_make_filter(expression_type, "a = 1") is None  # type: ignore[arg-type]


def test_plugin_raises_for_its_own_bad_expressions() -> None:
    with pytest.raises(FilterExpressionError, match="column 3"):
        Sql92FilterPlugin({}).rmq_filter_make_filter("SQL92", "a LIKE 'x'")


def test_plugin_options() -> None:
    with pytest.raises(ValueError, match=r"rmq\.filters:sql92: unknown option 'cache'; known options: none"):
        Sql92FilterPlugin({"cache": 10})
