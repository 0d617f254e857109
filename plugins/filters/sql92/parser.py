"""SQL92 grammar: a hand-written recursive-descent parser that compiles as it parses.

Each rule returns a ``Node`` whose evaluator is already built (see ``semantics``),
so nothing is interpreted per message. The parser's own job is the shape checks
the Java parser makes, each reported with its column, and a depth guard that
keeps hostile input from exhausting the Python stack.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from rmq.plugins.filters.sql92.lexer import (
    COMPARISON_OPS,
    COMPARISON_WORDS,
    UNSUPPORTED_WORDS,
    Sql92Error,
    Tok,
    describe,
    tokenize,
)
from rmq.plugins.filters.sql92.semantics import (
    NUMERIC,
    ORDER_OPS,
    Evaluator,
    Node,
    Sql92EvaluationError,
    constant,
    equality,
    kind_name,
    kleene_logic,
    kleene_not,
    literal,
    membership,
    null_test,
    ordering,
    property_condition,
    property_node,
)

MAX_DEPTH = 64  # parentheses/unary nesting and operator-tree depth, each


class Parser:
    def __init__(self, src: str) -> None:
        self.src = src
        self.toks = tokenize(src)
        self.i = 0
        self.nesting = 0

    # -- token helpers
    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def take(self) -> Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def at(self, kind: str, value: str | None = None) -> bool:
        t = self.toks[self.i]
        return t.kind == kind and (value is None or t.value == value)

    def error(self, pos: int, reason: str) -> Sql92Error:
        return Sql92Error(self.src, pos, reason)

    def expect(self, kind: str, value: str, what: str) -> Tok:
        if not self.at(kind, value):
            raise self.error(self.tok.pos, f"expected {what} but found {describe(self.tok)}")
        return self.take()

    def text(self, node: Node) -> str:
        return self.src[node.pos : node.end]

    def quoted(self, node: Node) -> str:
        """The node's source for a message: string literals already carry their quotes."""
        text = self.text(node)
        return text if node.const and node.typ == "str" else f"'{text}'"

    def node(self, fn: Evaluator, typ: str, children: tuple[Node, ...], pos: int, end: int) -> Node:
        depth = 1 + max(c.depth for c in children)
        if depth > MAX_DEPTH:
            raise self.error(pos, f"expression nested too deeply (more than {MAX_DEPTH} operator levels)")
        props = frozenset().union(*(c.props for c in children))
        return Node(fn, typ, pos, end, depth=depth, boolean=typ == "bool", props=props)

    def enter(self, pos: int) -> None:
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise self.error(pos, f"expression nested too deeply (more than {MAX_DEPTH} levels)")

    # -- grammar
    def parse(self) -> Node:
        if self.at("eof"):
            raise self.error(0, "empty expression")
        node = self.or_expr()
        if not self.at("eof"):
            t = self.tok
            self._unsupported_operator(t)
            raise self.error(
                t.pos, f"expected AND, OR, a comparison or end of expression but found {describe(t)}"
            )
        return self.as_condition(node, "the expression")

    def or_expr(self) -> Node:
        return self.chain("OR", self.and_expr)

    def and_expr(self) -> Node:
        return self.chain("AND", self.eq_expr)

    def chain(self, word: str, operand: Callable[[], Node]) -> Node:
        """``operand (word operand)*`` as one flat AND/OR node; a lone operand is returned as is."""
        first = operand()
        if not self.at("kw", word):
            return first
        nodes = [self.as_condition(first, word)]
        while self.at("kw", word):
            self.take()
            nodes.append(self.as_condition(operand(), word))
        return self.logic(nodes, is_and=word == "AND")

    def eq_expr(self) -> Node:
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

    def cmp_expr(self) -> Node:
        left = self.unary()
        while True:
            t = self.tok
            if t.kind == "op" and t.text in ORDER_OPS:
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
                    raise self.error(nxt.pos, f"expected BETWEEN or IN after NOT but found {describe(nxt)}")
            else:
                self._unsupported_operator(t)
                return left

    def _not_in_or_between(self, t: Tok) -> bool:
        """Is ``t`` the NOT of ``NOT IN`` / ``NOT BETWEEN`` (t is the current token)?"""
        nxt = self.peek()
        return t.value == "NOT" and nxt.kind == "kw" and nxt.value in ("IN", "BETWEEN")

    def _unsupported_operator(self, t: Tok) -> None:
        """Name LIKE, CONTAINS, arithmetic... where an operator was expected, instead of a vague error."""
        if t.kind == "id" and t.text.upper() in UNSUPPORTED_WORDS:
            raise self.error(t.pos, f"unsupported operator '{t.text}': {UNSUPPORTED_WORDS[t.text.upper()]}")
        if t.kind == "op" and t.text in ("+", "-"):
            raise self.error(t.pos, f"arithmetic operator '{t.text}' is not supported")

    def unary(self) -> Node:
        t = self.tok
        if t.kind == "op" and t.text in ("+", "-"):
            self.take()
            self.enter(t.pos)
            operand = self.unary()
            self.nesting -= 1
            if t.text == "+":
                return operand
            if not (operand.const and operand.typ in NUMERIC):
                raise self.error(
                    t.pos,
                    f"unary '-' applies to numeric literals only, not to {self.quoted(operand)} "
                    "(RocketMQ evaluates it to NULL, which never matches)",
                )
            return constant(-operand.value, operand.typ, t.pos, operand.end)  # type: ignore[operator]
        if t.kind == "kw" and t.value == "NOT":
            self.take()
            self.enter(t.pos)
            operand = self.as_condition(self.unary(), "NOT")
            self.nesting -= 1
            nxt = self.tok
            if (nxt.kind == "op" and nxt.text in COMPARISON_OPS) or (
                nxt.kind == "kw" and (nxt.value in COMPARISON_WORDS or self._not_in_or_between(nxt))
            ):
                raise self.error(
                    t.pos,
                    f"ambiguous NOT before {describe(nxt)}: RocketMQ applies NOT to "
                    f"{self.quoted(operand)} alone; write NOT (...) around the comparison, "
                    "or (NOT x) if that is what you mean",
                )
            return self.negation(operand, t.pos)
        return self.primary()

    def primary(self) -> Node:
        t = self.tok
        if t.kind == "str":
            self.take()
            return constant(t.value, "str", t.pos, t.end)
        if t.kind in ("int", "long", "float"):
            self.take()
            return constant(t.value, "double" if t.kind == "float" else t.kind, t.pos, t.end)
        if t.kind == "kw" and t.value in ("TRUE", "FALSE"):
            self.take()
            return constant(t.value == "TRUE", "bool", t.pos, t.end, boolean=True)
        if t.kind == "kw" and t.value == "NULL":
            self.take()
            return constant(None, "null", t.pos, t.end, boolean=True)
        if t.kind == "id":
            self.take()
            return property_node(t.text, t.pos, t.end)
        if t.kind == "op" and t.text == "(":
            self.take()
            self.enter(t.pos)
            inner = self.or_expr()
            self.nesting -= 1
            self.expect("op", ")", "')'")
            return inner
        raise self.error(t.pos, f"expected a property name, a literal or '(' but found {describe(t)}")

    # -- checks the Java parser makes
    def as_condition(self, node: Node, where: str) -> Node:
        if node.boolean:
            return node
        if node.prop is not None:
            fn = property_condition(node.fn)
            return Node(fn, "bool", node.pos, node.end, depth=node.depth, boolean=True, props=node.props)
        raise self.error(
            node.pos, f"{where} needs a condition, not the {kind_name(node)} {self.quoted(node)}"
        )

    def check_orderable(self, node: Node, op: str, op_pos: int) -> None:
        if node.const and node.typ not in NUMERIC:
            raise self.error(
                node.pos,
                f"'{op}' compares numbers only, not the {kind_name(node)} {self.text(node)} "
                "(use = or <> for strings)",
            )
        if node.boolean:
            raise self.error(node.pos, f"'{op}' cannot compare the condition {self.quoted(node)}")

    # -- builders
    def logic(self, nodes: list[Node], *, is_and: bool) -> Node:
        fn = kleene_logic(tuple(n.fn for n in nodes), is_and=is_and)
        return self.node(fn, "bool", tuple(nodes), nodes[0].pos, nodes[-1].end)

    def negation(self, operand: Node, pos: int) -> Node:
        return self.node(kleene_not(operand.fn), "bool", (operand,), pos, operand.end)

    def is_null(self, operand: Node, negate: bool, pos: int, end: int) -> Node:
        return self.node(null_test(operand.fn, negate=negate), "bool", (operand,), operand.pos, end)

    def equal(self, left: Node, right: Node, op: Tok, *, negate: bool) -> Node:
        for side in (left, right):
            if side.const and side.typ == "null":
                raise self.error(
                    side.pos, f"NULL cannot be compared with '{op.text}'; use IS NULL / IS NOT NULL"
                )
        if left.const and right.const and (left.typ == "bool") != (right.typ == "bool"):
            raise self.error(op.pos, f"{self.text(left)} cannot be compared with {self.text(right)}")
        fn = self.folded(equality(left, right), left, right, op.pos)
        node = self.node(fn, "bool", (left, right), left.pos, right.end)
        return self.negation(node, left.pos) if negate else node

    def folded(self, fn: Evaluator, left: Node, right: Node, op_pos: int) -> Evaluator:
        """Literal-only comparisons are decided now; one that cannot be decided is a compile error."""
        if not (left.const and right.const):
            return fn
        try:
            value = fn({})
        except Sql92EvaluationError as e:
            raise self.error(
                op_pos, f"{self.text(left)} cannot be compared with {self.text(right)}: {e}"
            ) from None
        return literal(value)

    def order(self, left: Node, right: Node, op: str, op_pos: int) -> Node:
        self.check_orderable(left, op, op_pos)
        self.check_orderable(right, op, op_pos)
        return self.comparison(left, right, ORDER_OPS[op], op_pos)

    def comparison(self, left: Node, right: Node, op: Callable[[Any, Any], bool], op_pos: int) -> Node:
        """An ordering node, folded when both sides are literals."""
        fn = self.folded(ordering(left, right, op), left, right, op_pos)
        return self.node(fn, "bool", (left, right), left.pos, right.end)

    def between(self, value: Node, *, negate: bool, pos: int) -> Node:
        low = self.unary()
        self.expect("kw", "AND", "AND between the bounds of BETWEEN")
        high = self.unary()
        for side in (value, low, high):
            self.check_orderable(side, "BETWEEN", pos)
        if low.const and high.const and ordering(low, high, operator.gt)({}):
            raise self.error(
                low.pos,
                f"BETWEEN bounds are out of order: {self.text(low)} is greater than {self.text(high)}",
            )
        below, above = (operator.lt, operator.gt) if negate else (operator.ge, operator.le)
        halves = [self.comparison(value, low, below, pos), self.comparison(value, high, above, pos)]
        return self.logic(halves, is_and=not negate)

    def in_list(self, left: Node, *, negate: bool, pos: int) -> Node:
        if left.prop is None:
            raise self.error(
                left.pos,
                f"IN needs a property name on its left, not the {kind_name(left)} {self.quoted(left)}",
            )
        self.expect("op", "(", "'(' after IN")
        items = []
        while True:
            t = self.tok
            if t.kind != "str":
                raise self.error(t.pos, f"expected a string literal in the IN list but found {describe(t)}")
            items.append(t.value)
            self.take()
            if self.at("op", ","):
                self.take()
                continue
            end = self.expect("op", ")", "',' or ')' in the IN list").end
            break
        return self.node(
            membership(left.prop, frozenset(items), negate=negate), "bool", (left,), left.pos, end
        )
