"""SQL92 tokens: the lexer and the compile error every stage raises.

Literals are decoded and range-checked here, so the parser sees Java-typed
values (int, long, double) and an error points at the literal's own column.
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

from rmq.kernel import FilterExpressionError
from rmq.plugins.filters.sql92.semantics import INT_MAX, LONG_MAX


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


_KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "IS", "TRUE", "FALSE", "NULL"})
UNSUPPORTED_WORDS = {
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
COMPARISON_WORDS = frozenset({"IS", "IN", "BETWEEN"})
COMPARISON_OPS = frozenset({"=", "<>", "<", "<=", ">", ">="})


class Tok(NamedTuple):
    kind: str  # id kw str int long float op eof
    text: str  # source text, for messages
    value: Any  # keywords upper-cased, operators as is, literals decoded
    pos: int
    end: int


def tokenize(src: str) -> list[Tok]:
    toks: list[Tok] = []
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
                toks.append(Tok("kw", word, upper, i, j))
            else:
                toks.append(Tok("id", word, word, i, j))
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
                toks.append(Tok("op", op, op, i, i + len(op)))
                i += len(op)
                break
        else:
            raise Sql92Error(src, i, f"unexpected character {c!r}")
    toks.append(Tok("eof", "", None, n, n))
    return toks


def _number(src: str, i: int) -> Tok:
    m = _NUMBER.match(src, i)
    assert m is not None  # the caller saw a digit or '.digit'
    text = m.group()
    if m["float"] is not None:
        value = float(text)
        if math.isinf(value):
            raise Sql92Error(src, i, f"float literal {text} is out of range of a double")
        return Tok("float", text, value, i, m.end())
    digits = m["int"]
    if digits == "0" and src[m.end() : m.end() + 1] in ("x", "X"):
        raise Sql92Error(src, i, "hexadecimal literals are not supported")
    if len(digits) > 1 and digits[0] == "0":
        raise Sql92Error(
            src, i, f"integer literal {text} has a leading zero (octal literals are not supported)"
        )
    if len(digits) > 19 or int(digits) > LONG_MAX:
        raise Sql92Error(src, i, f"integer literal {text} is out of range of a Java long")
    value = int(digits)
    return Tok("int" if value <= INT_MAX else "long", text, value, i, m.end())


def _string(src: str, i: int) -> Tok:
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
        return Tok("str", src[i : q + 1], "".join(parts), i, q + 1)


def describe(tok: Tok) -> str:
    if tok.kind == "eof":
        return "end of expression"
    if tok.kind == "str":
        return f"string literal {tok.text}"
    return f"'{tok.text}'"


# ---------------------------------------------------------------------------------------------------
