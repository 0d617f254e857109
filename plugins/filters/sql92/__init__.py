"""SQL92 subscriptions over message properties, as RocketMQ 4.x evaluates them (reference §10.2).

The package is split by stage: ``lexer`` (tokens, ``Sql92Error``), ``parser`` (grammar
and shape checks) and ``semantics`` (Java value rules and the compiled evaluators);
this module holds the public API and the plugin.

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

from rmq.kernel import FilterExpressionError, MessageFilter
from rmq.plugins.filters._plugin import SingleTypeFilterPlugin
from rmq.plugins.filters.sql92.lexer import Sql92Error
from rmq.plugins.filters.sql92.parser import MAX_DEPTH, Parser
from rmq.plugins.filters.sql92.semantics import Evaluator, Props, Sql92EvaluationError

EXPRESSION_TYPE = "SQL92"

__all__ = [
    "EXPRESSION_TYPE",
    "MAX_DEPTH",
    "Sql92Error",
    "Sql92EvaluationError",
    "Sql92Filter",
    "Sql92FilterPlugin",
    "compile_sql92",
]


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
    node = Parser(expression).parse()
    return Sql92Filter(expression, node.fn, node.props)


class Sql92FilterPlugin(SingleTypeFilterPlugin):
    """Entry point ``rmq.filters:sql92``: claims ``SQL92`` (any case)."""

    expression_type = EXPRESSION_TYPE
    entry_point = "rmq.filters:sql92"

    def build(self, expression: str) -> MessageFilter:
        return compile_sql92(expression)
