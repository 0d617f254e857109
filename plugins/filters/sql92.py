"""SQL92 subscriptions over message properties, as RocketMQ 4.x evaluates them (reference §10.2).

An expression is tokenized and parsed once (hand-written recursive descent) and
compiled to a tree of closures specialised by the operands' static types, so an
evaluation is a few Python calls with no interpretation overhead. Values follow
Java's: NULL (None), Boolean, String (property values are always strings),
Integer/Long (Python int, the static type remembers which) and Double.

Semantics (three-valued; a message matches only when the result is exactly TRUE):

* ``a = b``: both NULL -> TRUE; only the left NULL -> NULL; only the right NULL ->
  FALSE; otherwise equal after coercion. ``<>`` is NOT(=). ``IS [NOT] NULL``
  never yields NULL.
* ``>`` ``>=`` ``<`` ``<=``: any NULL operand -> NULL. Literal strings, booleans
  and NULL are compile errors here; so are conditions.
* Coercion: a string compared with a number constant is parsed as the constant's
  Java type (``Integer.valueOf``, ``Long.valueOf``, ``Double.valueOf``); two
  strings in ``<``... are both parsed as doubles; a string compared with a
  boolean is true iff it equals ``true`` ignoring case. A failed parse is a
  runtime error: the whole evaluation stops and the message is not matched
  (``OR`` does not rescue it, exactly as the Java broker's exception does).
  Doubles compare with ``Double.compareTo`` (NaN above everything, -0.0 < 0.0).
* ``x [NOT] IN ('a', ...)``: ``x`` must be a property; NULL property -> NULL.
* ``x [NOT] BETWEEN a AND b`` is ``x >= a AND x <= b`` (``x < a OR x > b``).
* ``NOT``/``AND``/``OR`` are Kleene logic; a bare property used as a condition
  is NULL when absent and FALSE otherwise (a string is never a Boolean).

Deliberate differences from the Java parser, all turning a silent surprise into
a compile error or accepting a harmless form:

* ``NOT`` binds tighter than comparisons in RocketMQ, so ``NOT a = 1`` means
  ``(NOT a) = 1`` there (never TRUE) and ``NOT a IS NULL`` means ``a IS NULL``.
  We reject ``NOT <operand>`` followed by a comparison and ask for parentheses.
* Unary minus applies to numeric literals only (RocketMQ silently evaluates
  ``-property`` to NULL).
* ``NOT BETWEEN`` checks constant bounds too; a float literal ``0.0`` is accepted
  (RocketMQ's range check rejects it); a ``--`` comment may end the input
  without a newline; ``TRUE = x`` coerces like ``x = TRUE`` (Java throws).
* Literal-only comparisons are decided at compile time: ``1 > 0`` folds to TRUE and
  ``'abc' = 5`` (which would fail on every message) is a compile error.
* Expressions nested deeper than ``MAX_DEPTH`` are refused (a Python stack guard).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from rmq.kernel.hookspecs.filtering import FilterExpressionError, MessageFilter
from rmq.kernel.markers import hookimpl
from rmq.plugins.filters._options import check_no_options

EXPRESSION_TYPE = "SQL92"
MAX_DEPTH = 64  # parentheses/unary nesting and operator-tree depth, each

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1

Props = Mapping[str, str]
Value = bool | str | int | float | None
Evaluator = Callable[[Props], Value]


class Sql92Error(FilterExpressionError):
    """A compile error with its place: ``offset`` (0-based), ``line`` and ``column`` (1-based)."""

    def __init__(self, expression: str, offset: int, reason: str) -> None:
        self.expression = expression
        self.offset = offset
        self.reason = reason
        self.line = expression.count("\n", 0, offset) + 1
        self.column = offset - (expression.rfind("\n", 0, offset) + 1) + 1
        where = f"column {self.column}" if self.line == 1 else f"line {self.line}, column {self.column}"
        super().__init__(f"SQL92 filter error at {where}: {reason}")


class Sql92EvaluationError(Exception):
    """A runtime coercion failure (e.g. property ``'abc'`` compared with ``5``): the message does not match."""


# ---------------------------------------------------------------------------------------------------
# Java value semantics


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
    return _java_long_like(s, _INT_MIN, _INT_MAX, "int")


def _java_long(s: str) -> int:
    return _java_long_like(s, _LONG_MIN, _LONG_MAX, "long")


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


_NUMERIC = ("int", "long", "double")
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
    if lt in _NUMERIC and rt in _NUMERIC:
        if "double" in (lt, rt):
            return float, float, True
        return _ident, _ident, False
    if lt == "str" and rt in _NUMERIC:
        return _PARSERS[rt], _ident, rt == "double"
    if rt == "str" and lt in _NUMERIC:
        return _ident, _PARSERS[lt], lt == "double"
    if lt == "str" and rt == "bool":
        return _java_bool, _ident, False
    if lt == "bool" and rt == "str":
        return _ident, _java_bool, False
    return None  # Boolean vs number: Java's compare gives "unequal"


# digits a plain non-negative property may have to skip the full Java parse (stays in int/long range)
_FAST_DIGITS = {"int": 9, "long": 18}


# ---------------------------------------------------------------------------------------------------
# Tokens

_KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "IS", "TRUE", "FALSE", "NULL"})
_UNSUPPORTED_WORDS = {
    "LIKE": "LIKE is not supported by RocketMQ 4.x SQL92 filters",
    "ESCAPE": "LIKE ... ESCAPE is not supported by RocketMQ 4.x SQL92 filters",
    "CONTAINS": "CONTAINS is not supported by RocketMQ 4.x SQL92 filters (it came with 5.x)",
    "STARTSWITH": "STARTSWITH is not supported by RocketMQ 4.x SQL92 filters (it came with 5.x)",
    "ENDSWITH": "ENDSWITH is not supported by RocketMQ 4.x SQL92 filters (it came with 5.x)",
}
_WHITESPACE = " \t\n\r\f"
_ID_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
_ID_PART = _ID_START | frozenset("0123456789")
_DIGITS = frozenset("0123456789")
_NUMBER = re.compile(
    r"(?P<float>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)"
    r"|(?P<int>[0-9]+)(?P<suffix>[lL]?)"
)
_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "(", ")", ",", "+", "-")
_BAD_OPERATORS = {
    "!=": "'!=' is not SQL92; use '<>'",
    "==": "'==' is not SQL92; use '='",
    "||": "'||' is not SQL92 logic; use OR",
    "&&": "'&&' is not SQL92 logic; use AND",
    "!": "'!' is not SQL92; use NOT",
    "*": "arithmetic operator '*' is not supported",
    "/": "arithmetic operator '/' is not supported",
    "%": "arithmetic operator '%' is not supported",
    '"': "double quotes do not delimit strings; use single quotes ('text')",
}
_COMPARISON_WORDS = frozenset({"IS", "IN", "BETWEEN"})
_COMPARISON_OPS = frozenset({"=", "<>", "<", "<=", ">", ">="})


class _Tok(NamedTuple):
    kind: str  # id kw str int long float op eof
    text: str  # source text, for messages
    value: Any  # keywords upper-cased, operators as is, literals decoded
    pos: int
    end: int


def _tokenize(src: str) -> list[_Tok]:
    toks: list[_Tok] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c in _WHITESPACE:
            i += 1
            continue
        if src.startswith("--", i):
            nl = min((p for p in (src.find("\n", i), src.find("\r", i)) if p >= 0), default=n)
            i = nl
            continue
        if src.startswith("/*", i):
            close = src.find("*/", i + 2)
            if close < 0:
                raise Sql92Error(src, i, "unterminated comment: '/*' has no closing '*/'")
            i = close + 2
            continue
        if c in _ID_START:
            j = i + 1
            while j < n and src[j] in _ID_PART:
                j += 1
            word = src[i:j]
            upper = word.upper()
            if upper in _KEYWORDS:
                toks.append(_Tok("kw", word, upper, i, j))
            else:
                toks.append(_Tok("id", word, word, i, j))
            i = j
            continue
        if c in _DIGITS or (c == "." and i + 1 < n and src[i + 1] in _DIGITS):
            toks.append(_number(src, i))
            i = toks[-1].end
            continue
        if c == "'":
            toks.append(_string(src, i))
            i = toks[-1].end
            continue
        for bad, why in _BAD_OPERATORS.items():
            if src.startswith(bad, i):
                raise Sql92Error(src, i, why)
        for op in _OPERATORS:
            if src.startswith(op, i):
                toks.append(_Tok("op", op, op, i, i + len(op)))
                i += len(op)
                break
        else:
            raise Sql92Error(src, i, f"unexpected character {c!r}")
    toks.append(_Tok("eof", "", None, n, n))
    return toks


def _number(src: str, i: int) -> _Tok:
    m = _NUMBER.match(src, i)
    assert m is not None  # the caller saw a digit or '.digit'
    text = m.group()
    if m["float"] is not None:
        value = float(text)
        if math.isinf(value):
            raise Sql92Error(src, i, f"float literal {text} is out of range of a double")
        return _Tok("float", text, value, i, m.end())
    digits = m["int"]
    if digits == "0" and src[m.end() : m.end() + 1] in ("x", "X"):
        raise Sql92Error(src, i, "hexadecimal literals are not supported")
    if len(digits) > 1 and digits[0] == "0":
        raise Sql92Error(
            src, i, f"integer literal {text} has a leading zero (octal literals are not supported)"
        )
    if len(digits) > 19 or int(digits) > _LONG_MAX:
        raise Sql92Error(src, i, f"integer literal {text} is out of range of a Java long")
    value = int(digits)
    return _Tok("int" if value <= _INT_MAX else "long", text, value, i, m.end())


def _string(src: str, i: int) -> _Tok:
    parts = []
    j = i + 1
    while True:
        q = src.find("'", j)
        if q < 0:
            raise Sql92Error(src, i, "unterminated string literal")
        parts.append(src[j:q])
        if src.startswith("''", q):
            parts.append("'")
            j = q + 2
            continue
        return _Tok("str", src[i : q + 1], "".join(parts), i, q + 1)


def _describe(tok: _Tok) -> str:
    if tok.kind == "eof":
        return "end of expression"
    if tok.kind == "str":
        return f"string literal {tok.text}"
    return f"'{tok.text}'"


# ---------------------------------------------------------------------------------------------------
# Compiled nodes


class _Node:
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


def _constant(value: Value, typ: str, pos: int, end: int, *, boolean: bool = False) -> _Node:
    def const(p: Props) -> Value:
        return value

    return _Node(const, typ, pos, end, const=True, value=value, boolean=boolean)


def _property(name: str, tok: _Tok) -> _Node:
    def prop(p: Props) -> Value:
        return p.get(name)

    return _Node(prop, "str", tok.pos, tok.end, prop=name, props=frozenset((name,)))


_ORDER_OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


class _Parser:
    def __init__(self, src: str) -> None:
        self.src = src
        self.toks = _tokenize(src)
        self.i = 0
        self.nesting = 0

    # -- token helpers
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def take(self) -> _Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def at(self, kind: str, value: str | None = None) -> bool:
        t = self.toks[self.i]
        return t.kind == kind and (value is None or t.value == value)

    def error(self, pos: int, reason: str) -> Sql92Error:
        return Sql92Error(self.src, pos, reason)

    def expect(self, kind: str, value: str, what: str) -> _Tok:
        if not self.at(kind, value):
            raise self.error(self.tok.pos, f"expected {what} but found {_describe(self.tok)}")
        return self.take()

    def text(self, node: _Node) -> str:
        return self.src[node.pos : node.end]

    def quoted(self, node: _Node) -> str:
        """The node's source for a message: string literals already carry their quotes."""
        text = self.text(node)
        return text if node.const and node.typ == "str" else f"'{text}'"

    def node(self, fn: Evaluator, typ: str, children: tuple[_Node, ...], pos: int, end: int) -> _Node:
        depth = 1 + max(c.depth for c in children)
        if depth > MAX_DEPTH:
            raise self.error(pos, f"expression nested too deeply (more than {MAX_DEPTH} operator levels)")
        props = frozenset().union(*(c.props for c in children))
        return _Node(fn, typ, pos, end, depth=depth, boolean=typ == "bool", props=props)

    def enter(self, pos: int) -> None:
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise self.error(pos, f"expression nested too deeply (more than {MAX_DEPTH} levels)")

    # -- grammar
    def parse(self) -> _Node:
        if self.at("eof"):
            raise self.error(0, "empty expression")
        node = self.or_expr()
        if not self.at("eof"):
            t = self.tok
            self._unsupported_operator(t)
            raise self.error(
                t.pos, f"expected AND, OR, a comparison or end of expression but found {_describe(t)}"
            )
        return self.as_condition(node, "the expression")

    def or_expr(self) -> _Node:
        first = self.and_expr()
        if not self.at("kw", "OR"):
            return first
        nodes = [self.as_condition(first, "OR")]
        while self.at("kw", "OR"):
            self.take()
            nodes.append(self.as_condition(self.and_expr(), "OR"))
        return self.logic(nodes, is_and=False)

    def and_expr(self) -> _Node:
        first = self.eq_expr()
        if not self.at("kw", "AND"):
            return first
        nodes = [self.as_condition(first, "AND")]
        while self.at("kw", "AND"):
            self.take()
            nodes.append(self.as_condition(self.eq_expr(), "AND"))
        return self.logic(nodes, is_and=True)

    def eq_expr(self) -> _Node:
        left = self.cmp_expr()
        while True:
            t = self.tok
            if t.kind == "op" and t.text in ("=", "<>"):
                self.take()
                left = self.equal(left, self.cmp_expr(), t, negate=t.text == "<>")
            elif t.kind == "kw" and t.value == "IS":
                self.take()
                negate = self.at("kw", "NOT")
                if negate:
                    self.take()
                end = self.expect("kw", "NULL", "NULL or NOT NULL after IS" if not negate else "NULL").end
                left = self.is_null(left, negate, t.pos, end)
            else:
                return left

    def cmp_expr(self) -> _Node:
        left = self.unary()
        while True:
            t = self.tok
            if t.kind == "op" and t.text in _ORDER_OPS:
                self.take()
                left = self.order(left, self.unary(), t.text, t.pos)
            elif t.kind == "kw" and t.value == "BETWEEN":
                self.take()
                left = self.between(left, negate=False, pos=t.pos)
            elif t.kind == "kw" and t.value == "IN":
                self.take()
                left = self.in_list(left, negate=False, pos=t.pos)
            elif t.kind == "kw" and t.value == "NOT":
                nxt = self.peek()
                if nxt.kind == "kw" and nxt.value == "BETWEEN":
                    self.i += 2
                    left = self.between(left, negate=True, pos=t.pos)
                elif nxt.kind == "kw" and nxt.value == "IN":
                    self.i += 2
                    left = self.in_list(left, negate=True, pos=t.pos)
                else:
                    self._unsupported_operator(nxt)
                    raise self.error(nxt.pos, f"expected BETWEEN or IN after NOT but found {_describe(nxt)}")
            else:
                self._unsupported_operator(t)
                return left

    def _not_in_or_between(self, t: _Tok) -> bool:
        """Is ``t`` the NOT of ``NOT IN`` / ``NOT BETWEEN`` (t is the current token)?"""
        nxt = self.peek()
        return t.value == "NOT" and nxt.kind == "kw" and nxt.value in ("IN", "BETWEEN")

    def _unsupported_operator(self, t: _Tok) -> None:
        """Name LIKE, CONTAINS, arithmetic... where an operator was expected, instead of a vague error."""
        if t.kind == "id" and t.text.upper() in _UNSUPPORTED_WORDS:
            raise self.error(t.pos, f"unsupported operator '{t.text}': {_UNSUPPORTED_WORDS[t.text.upper()]}")
        if t.kind == "op" and t.text in ("+", "-"):
            raise self.error(t.pos, f"arithmetic operator '{t.text}' is not supported")

    def unary(self) -> _Node:
        t = self.tok
        if t.kind == "op" and t.text in ("+", "-"):
            self.take()
            self.enter(t.pos)
            operand = self.unary()
            self.nesting -= 1
            if t.text == "+":
                return operand
            if not (operand.const and operand.typ in _NUMERIC):
                raise self.error(
                    t.pos,
                    f"unary '-' applies to numeric literals only, not to {self.quoted(operand)} "
                    "(RocketMQ evaluates it to NULL, which never matches)",
                )
            return _constant(-operand.value, operand.typ, t.pos, operand.end)  # type: ignore[operator]
        if t.kind == "kw" and t.value == "NOT":
            self.take()
            self.enter(t.pos)
            operand = self.as_condition(self.unary(), "NOT")
            self.nesting -= 1
            nxt = self.tok
            if (nxt.kind == "op" and nxt.text in _COMPARISON_OPS) or (
                nxt.kind == "kw" and (nxt.value in _COMPARISON_WORDS or self._not_in_or_between(nxt))
            ):
                raise self.error(
                    t.pos,
                    f"ambiguous NOT before {_describe(nxt)}: RocketMQ applies NOT to "
                    f"{self.quoted(operand)} alone; write NOT (...) around the comparison, "
                    "or (NOT x) if that is what you mean",
                )
            return self.negation(operand, t.pos)
        return self.primary()

    def primary(self) -> _Node:
        t = self.tok
        if t.kind == "str":
            self.take()
            return _constant(t.value, "str", t.pos, t.end)
        if t.kind in ("int", "long", "float"):
            self.take()
            return _constant(t.value, "double" if t.kind == "float" else t.kind, t.pos, t.end)
        if t.kind == "kw" and t.value in ("TRUE", "FALSE"):
            self.take()
            return _constant(t.value == "TRUE", "bool", t.pos, t.end, boolean=True)
        if t.kind == "kw" and t.value == "NULL":
            self.take()
            return _constant(None, "null", t.pos, t.end, boolean=True)
        if t.kind == "id":
            self.take()
            return _property(t.text, t)
        if t.kind == "op" and t.text == "(":
            self.take()
            self.enter(t.pos)
            inner = self.or_expr()
            self.nesting -= 1
            self.expect("op", ")", "')'")
            return inner
        raise self.error(t.pos, f"expected a property name, a literal or '(' but found {_describe(t)}")

    # -- checks the Java parser makes
    def as_condition(self, node: _Node, where: str) -> _Node:
        if node.boolean:
            return node
        if node.prop is not None:
            fn = node.fn

            def cast(p: Props) -> Value:  # a String is never a Boolean
                return None if fn(p) is None else False

            return _Node(cast, "bool", node.pos, node.end, depth=node.depth, boolean=True, props=node.props)
        raise self.error(
            node.pos, f"{where} needs a condition, not the {_kind_name(node)} {self.quoted(node)}"
        )

    def check_orderable(self, node: _Node, op: str, op_pos: int) -> None:
        if node.const and node.typ not in _NUMERIC:
            raise self.error(
                node.pos,
                f"'{op}' compares numbers only, not the {_kind_name(node)} {self.text(node)} "
                "(use = or <> for strings)",
            )
        if node.boolean:
            raise self.error(node.pos, f"'{op}' cannot compare the condition {self.quoted(node)}")

    # -- builders
    def logic(self, nodes: list[_Node], *, is_and: bool) -> _Node:
        fns = tuple(n.fn for n in nodes)
        stop = not is_and  # the value that decides: FALSE for AND, TRUE for OR
        if len(fns) == 2:
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

            fn: Evaluator = logic2
        else:

            def logic_n(p: Props) -> Value:
                result: Value = not stop
                for f in fns:
                    v = f(p)
                    if v is stop:
                        return stop
                    if v is None:
                        result = None
                return result

            fn = logic_n
        return self.node(fn, "bool", tuple(nodes), nodes[0].pos, nodes[-1].end)

    def negation(self, operand: _Node, pos: int) -> _Node:
        f = operand.fn

        def not_(p: Props) -> Value:
            v = f(p)
            return None if v is None else not v

        return self.node(not_, "bool", (operand,), pos, operand.end)

    def is_null(self, operand: _Node, negate: bool, pos: int, end: int) -> _Node:
        f = operand.fn
        if negate:

            def is_not_null(p: Props) -> Value:
                return f(p) is not None

            fn: Evaluator = is_not_null
        else:

            def is_null(p: Props) -> Value:
                return f(p) is None

            fn = is_null
        return self.node(fn, "bool", (operand,), operand.pos, end)

    def equal(self, left: _Node, right: _Node, op: _Tok, *, negate: bool) -> _Node:
        for side in (left, right):
            if side.const and side.typ == "null":
                raise self.error(
                    side.pos, f"NULL cannot be compared with '{op.text}'; use IS NULL / IS NOT NULL"
                )
        if left.const and right.const and (left.typ == "bool") != (right.typ == "bool"):
            raise self.error(op.pos, f"{self.text(left)} cannot be compared with {self.text(right)}")
        fn = self.folded(_equality(left, right), left, right, op.pos)
        node = self.node(fn, "bool", (left, right), left.pos, right.end)
        return self.negation(node, left.pos) if negate else node

    def folded(self, fn: Evaluator, left: _Node, right: _Node, op_pos: int) -> Evaluator:
        """Literal-only comparisons are decided now; one that cannot be decided is a compile error."""
        if not (left.const and right.const):
            return fn
        try:
            value = fn({})
        except Sql92EvaluationError as e:
            raise self.error(
                op_pos, f"{self.text(left)} cannot be compared with {self.text(right)}: {e}"
            ) from None

        def literal_comparison(p: Props) -> Value:
            return value

        return literal_comparison

    def order(self, left: _Node, right: _Node, op: str, op_pos: int) -> _Node:
        self.check_orderable(left, op, op_pos)
        self.check_orderable(right, op, op_pos)
        fn = self.folded(_ordering(left, right, _ORDER_OPS[op]), left, right, op_pos)
        return self.node(fn, "bool", (left, right), left.pos, right.end)

    def between(self, value: _Node, *, negate: bool, pos: int) -> _Node:
        low = self.unary()
        self.expect("kw", "AND", "AND between the bounds of BETWEEN")
        high = self.unary()
        for side in (value, low, high):
            self.check_orderable(side, "BETWEEN", pos)
        if low.const and high.const and _ordering(low, high, operator.gt)({}):
            raise self.error(
                low.pos,
                f"BETWEEN bounds are out of order: {self.text(low)} is greater than {self.text(high)}",
            )
        below, above = (operator.lt, operator.gt) if negate else (operator.ge, operator.le)
        halves = [
            self.node(
                self.folded(_ordering(value, low, below), value, low, pos),
                "bool",
                (value, low),
                value.pos,
                low.end,
            ),
            self.node(
                self.folded(_ordering(value, high, above), value, high, pos),
                "bool",
                (value, high),
                value.pos,
                high.end,
            ),
        ]
        return self.logic(halves, is_and=not negate)

    def in_list(self, left: _Node, *, negate: bool, pos: int) -> _Node:
        if left.prop is None:
            raise self.error(
                left.pos,
                f"IN needs a property name on its left, not the {_kind_name(left)} {self.quoted(left)}",
            )
        self.expect("op", "(", "'(' after IN")
        items = []
        while True:
            t = self.tok
            if t.kind != "str":
                raise self.error(t.pos, f"expected a string literal in the IN list but found {_describe(t)}")
            items.append(t.value)
            self.take()
            if self.at("op", ","):
                self.take()
                continue
            end = self.expect("op", ")", "',' or ')' in the IN list").end
            break
        values = frozenset(items)
        name = left.prop

        def in_(p: Props) -> Value:
            v = p.get(name)
            if v is None:
                return None
            return (v in values) is not negate

        return self.node(in_, "bool", (left,), left.pos, end)


def _kind_name(node: _Node) -> str:
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


def _equality(left: _Node, right: _Node) -> Evaluator:
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


def _ordering(left: _Node, right: _Node, op: Callable[[Any, Any], bool]) -> Evaluator:
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


# ---------------------------------------------------------------------------------------------------
# Public API


class Sql92Filter:
    """A compiled SQL92 subscription: immutable and thread-safe; ``match_properties`` is the hot call."""

    __slots__ = ("expression", "property_names", "_fn")

    expression_type: str = EXPRESSION_TYPE
    needs_properties: bool = True

    expression: str
    property_names: frozenset[str]

    def __init__(self, expression: str, fn: Evaluator, property_names: frozenset[str]) -> None:
        self.expression = expression
        self.property_names = property_names  # which properties the expression reads
        self._fn = fn

    def match_tags_code(self, tags_code: int) -> bool:
        """Always True: SQL92 decides at the commitlog stage (``TAGS`` is just another property)."""
        return True

    def match_properties(self, properties: Props) -> bool:
        """True only when the expression is exactly TRUE; NULL, FALSE and coercion failures do not match."""
        try:
            return self._fn(properties) is True
        except Sql92EvaluationError:
            return False

    def evaluate(self, properties: Props) -> bool | None:
        """The three-valued result (None = NULL); raises ``Sql92EvaluationError`` on a coercion failure."""
        return self._fn(properties)  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"Sql92Filter({self.expression!r})"


def compile_sql92(expression: str) -> Sql92Filter:
    """Compile an expression; ``Sql92Error`` (a ``FilterExpressionError``) says what and where."""
    if not isinstance(expression, str):
        raise FilterExpressionError(
            f"SQL92 filter error: expression must be a string, got {type(expression).__name__}"
        )
    node = _Parser(expression).parse()
    return Sql92Filter(expression, node.fn, node.props)


class Sql92FilterPlugin:
    """Entry point ``rmq.filters:sql92``: claims ``SQL92`` (any case)."""

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        check_no_options(options, "rmq.filters:sql92")

    @hookimpl(trylast=True)
    def rmq_filter_make_filter(self, expression_type: str, expression: str) -> MessageFilter | None:
        if not expression_type or expression_type.upper() != EXPRESSION_TYPE:
            return None
        return compile_sql92(expression)
