"""SQL92 type rules and evaluation: Java's value semantics and the closures a parsed tree compiles to.

Kept apart from the grammar so the rules that decide whether a message matches
(coercion, NULL handling, ``Double.compare``) can be read, and changed, in one
place; the parser only checks shapes and calls the builders here.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

Props = Mapping[str, str]
Value = bool | str | int | float | None
Evaluator = Callable[[Props], Value]


class Sql92EvaluationError(Exception):
    """A runtime coercion failure (e.g. property ``'abc'`` compared with ``5``): the message does not match."""


def _java_long_like(s: str, lo: int, hi: int, kind: str) -> int:
    """``Integer.valueOf``/``Long.valueOf``: optional sign, ASCII digits, in range, nothing else."""
    body = s[1:] if s[:1] in ("+", "-") else s
    if not (body.isascii() and body.isdigit()):
        raise Sql92EvaluationError(f"{s!r} is not a Java {kind}")
    digits = body.lstrip("0") or "0"
    if len(digits) > 19:  # beyond any long; also keeps int() clear of its digit limit
        raise Sql92EvaluationError(f"{s!r} is out of range of a Java {kind}")
    n = -int(digits) if s[0] == "-" else int(digits)
    if n < lo or n > hi:
        raise Sql92EvaluationError(f"{s!r} is out of range of a Java {kind}")
    return n


def _java_int(s: str) -> int:
    return _java_long_like(s, INT_MIN, INT_MAX, "int")


def _java_long(s: str) -> int:
    return _java_long_like(s, LONG_MIN, LONG_MAX, "long")


_JAVA_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity"
    r"|(?P<dec>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)[fFdD]?"
    r"|(?P<hex>0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?)"
)


def _java_double(s: str) -> float:
    """``Double.valueOf``: trims ASCII controls/space, accepts NaN, Infinity, f/d suffixes, hex floats."""
    t = s.strip("".join(map(chr, range(33))))
    m = _JAVA_DOUBLE.fullmatch(t)
    if m is None:
        raise Sql92EvaluationError(f"{s!r} is not a Java double")
    if m["hex"] is not None:
        sign = -1.0 if t[0] == "-" else 1.0
        try:
            return sign * float.fromhex(m["hex"])
        except OverflowError:
            return sign * math.inf
    if m["dec"] is not None:
        return float(t[: m.end("dec")])
    return float(t)  # [+-]NaN / [+-]Infinity


def _java_bool(s: str) -> bool:
    """``Boolean.valueOf``: true iff ``true`` ignoring case; never fails."""
    return len(s) == 4 and s.lower() == "true"


def _dcmp(a: float, b: float) -> int:
    """``Double.compare``: a total order with -0.0 < 0.0 and NaN equal to itself, above +Infinity."""
    if a < b:
        return -1
    if a > b:
        return 1
    a_nan, b_nan = a != a, b != b
    if a_nan or b_nan:
        return (a_nan > b_nan) - (a_nan < b_nan)
    if a == 0.0:
        sa, sb = math.copysign(1.0, a), math.copysign(1.0, b)
        return (sa > sb) - (sa < sb)
    return 0


NUMERIC = ("int", "long", "double")
_PARSERS: dict[str, Callable[[str], Any]] = {"int": _java_int, "long": _java_long, "double": _java_double}


def _ident(v: Any) -> Any:
    return v


Converter = Callable[[Any], Any]


def _to_comparable(lt: str, rt: str) -> tuple[Converter, Converter, bool] | None:
    """How to bring two non-null values of static types lt/rt to one type (None: never equal).

    Returns (convert_left, convert_right, as_double); ``as_double`` means compare with ``_dcmp``.
    Mirrors Java's widening: Integer/Long -> Long, anything with Double -> Double, a String
    is parsed as the other side's type.
    """
    if lt == rt:
        return _ident, _ident, lt == "double"
    if lt in NUMERIC and rt in NUMERIC:
        if "double" in (lt, rt):
            return float, float, True
        return _ident, _ident, False
    if lt == "str" and rt in NUMERIC:
        return _PARSERS[rt], _ident, rt == "double"
    if rt == "str" and lt in NUMERIC:
        return _ident, _PARSERS[lt], lt == "double"
    if lt == "str" and rt == "bool":
        return _java_bool, _ident, False
    if lt == "bool" and rt == "str":
        return _ident, _java_bool, False
    return None  # Boolean vs number: Java's compare gives "unequal"


# digits a plain non-negative property may have to skip the full Java parse (stays in int/long range)
_FAST_DIGITS = {"int": 9, "long": 18}


class Node:
    """A compiled sub-expression and the static facts the Java parser checks against.

    ``typ``: the Java type of every non-null value it yields (bool str int long double null);
    ``const``: a literal (``value`` holds it); ``prop``: a bare property's name;
    ``boolean``: a condition (Java's BooleanExpression: comparisons, logic, TRUE/FALSE/NULL).
    """

    __slots__ = ("fn", "typ", "const", "value", "prop", "boolean", "pos", "end", "depth", "props")

    def __init__(
        self,
        fn: Evaluator,
        typ: str,
        pos: int,
        end: int,
        *,
        depth: int = 1,
        const: bool = False,
        value: Value = None,
        prop: str | None = None,
        boolean: bool = False,
        props: frozenset[str] = frozenset(),
    ) -> None:
        self.fn, self.typ, self.pos, self.end, self.depth = fn, typ, pos, end, depth
        self.const, self.value, self.prop, self.boolean, self.props = const, value, prop, boolean, props


def constant(value: Value, typ: str, pos: int, end: int, *, boolean: bool = False) -> Node:
    def const(p: Props) -> Value:
        return value

    return Node(const, typ, pos, end, const=True, value=value, boolean=boolean)


def property_node(name: str, pos: int, end: int) -> Node:
    def prop(p: Props) -> Value:
        return p.get(name)

    return Node(prop, "str", pos, end, prop=name, props=frozenset((name,)))


ORDER_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


def kind_name(node: Node) -> str:
    if node.const:
        return {
            "str": "string literal",
            "bool": "boolean literal",
            "null": "NULL literal",
            "double": "number",
            "int": "number",
            "long": "number",
        }[node.typ]
    if node.prop is not None:
        return "property"
    return "condition" if node.boolean else "value"


def equality(left: Node, right: Node) -> Evaluator:
    """``=`` with Java's null rule (both NULL: TRUE; left NULL: NULL; right NULL: FALSE), then coercion."""
    conv = _to_comparable(left.typ, right.typ)
    if conv is None:

        def same(a: Any, b: Any) -> bool:
            return False

    else:
        cl, cr, as_double = conv
        if as_double:

            def same(a: Any, b: Any) -> bool:
                return _dcmp(cl(a), cr(b)) == 0

        elif cl is _ident and cr is _ident:

            def same(a: Any, b: Any) -> bool:
                return a == b

        else:

            def same(a: Any, b: Any) -> bool:
                return cl(a) == cr(b)

    if left.prop is not None and right.const and conv is not None:  # the common `prop = literal`
        return _prop_vs_const(left.prop, right.value, conv, right.typ, _eq_op)

    lf, rf = left.fn, right.fn

    def eq(p: Props) -> Value:
        a = lf(p)
        b = rf(p)
        if a is None:
            return True if b is None else None
        if b is None:
            return False
        return same(a, b)

    return eq


def _eq_op(a: Any, b: Any) -> bool:
    return a == b


def _prop_vs_const(
    name: str,
    literal: Value,
    conv: tuple[Converter, Converter, bool],
    typ: str,
    op: Callable[[Any, Any], bool],
) -> Evaluator:
    """``property <op> literal`` with the literal converted once; one dict lookup per evaluation."""
    cl, cr, as_double = conv
    c = cr(literal)
    if as_double:

        def prop_vs_double(p: Props) -> Value:
            v = p.get(name)
            return None if v is None else op(_dcmp(cl(v), c), 0)

        return prop_vs_double
    if cl is _ident:

        def prop_vs_same(p: Props) -> Value:
            v = p.get(name)
            return None if v is None else op(v, c)

        return prop_vs_same
    fast = _FAST_DIGITS.get(typ, 0)
    if fast:

        def prop_vs_integer(p: Props) -> Value:
            v = p.get(name)
            if v is None:
                return None
            if v.isdigit() and len(v) <= fast and v.isascii():  # plain digits: int() agrees with Java
                return op(int(v), c)
            return op(cl(v), c)

        return prop_vs_integer

    def prop_vs_other(p: Props) -> Value:
        v = p.get(name)
        return None if v is None else op(cl(v), c)

    return prop_vs_other


def ordering(left: Node, right: Node, op: Callable[[Any, Any], bool]) -> Evaluator:
    """``<``-family: NULL if either side is NULL; strings parsed as the other side's type (both: double)."""
    if left.typ == "str" and right.typ == "str":
        conv: tuple[Converter, Converter, bool] = (_java_double, _java_double, True)
    else:
        found = _to_comparable(left.typ, right.typ)
        assert found is not None  # operands were checked: strings and numbers only
        conv = found
    if left.prop is not None and right.const:  # the common `prop > literal`
        return _prop_vs_const(left.prop, right.value, conv, right.typ, op)

    cl, cr, as_double = conv
    lf, rf = left.fn, right.fn

    def cmp(p: Props) -> Value:
        a = lf(p)
        if a is None:
            return None
        b = rf(p)
        if b is None:
            return None
        if as_double:
            return op(_dcmp(cl(a), cr(b)), 0)
        return op(cl(a), cr(b))

    return cmp


def kleene_logic(fns: tuple[Evaluator, ...], *, is_and: bool) -> Evaluator:
    """Kleene AND/OR, stopping at the first deciding value (FALSE for AND, TRUE for OR)."""
    stop = not is_and
    if len(fns) == 2:  # the common case without a loop
        f1, f2 = fns

        def logic2(p: Props) -> Value:
            a = f1(p)
            if a is stop:
                return stop
            b = f2(p)
            if b is stop:
                return stop
            if a is None or b is None:
                return None
            return not stop

        return logic2

    def logic_n(p: Props) -> Value:
        result: Value = not stop
        for f in fns:
            v = f(p)
            if v is stop:
                return stop
            if v is None:
                result = None
        return result

    return logic_n


def kleene_not(f: Evaluator) -> Evaluator:
    """Kleene NOT: NULL stays NULL."""

    def not_(p: Props) -> Value:
        v = f(p)
        return None if v is None else not v

    return not_


def null_test(f: Evaluator, *, negate: bool) -> Evaluator:
    """``IS [NOT] NULL``: the one test that never yields NULL."""
    if negate:

        def is_not_null(p: Props) -> Value:
            return f(p) is not None

        return is_not_null

    def is_null(p: Props) -> Value:
        return f(p) is None

    return is_null


def membership(name: str, values: frozenset[str], *, negate: bool) -> Evaluator:
    """``name [NOT] IN (...)``: NULL when the property is absent."""

    def in_(p: Props) -> Value:
        v = p.get(name)
        if v is None:
            return None
        return (v in values) is not negate

    return in_


def property_condition(f: Evaluator) -> Evaluator:
    """A bare property used as a condition: NULL when absent, else FALSE (a String is never a Boolean)."""

    def cast(p: Props) -> Value:
        return None if f(p) is None else False

    return cast


def literal(value: Value) -> Evaluator:
    """A result decided at compile time."""

    def literal_comparison(p: Props) -> Value:
        return value

    return literal_comparison
