"""Contract tests every ``MessageFilter`` plugin must pass; subclass to run them against yours.

    from rmq.testing.filtering import MessageFilterContract

    class TestMyFilter(MessageFilterContract):
        expression_type = "MYTYPE"
        valid_expressions = ("x", "y")
        invalid_expressions = ("(",)

        def make_filter(self, expression_type, expression):
            return MyFilterPlugin({}).rmq_filter_make_filter(expression_type, expression)

``make_filter`` may be a method (as above) or a pytest fixture of that name that
returns such a callable. The checks are the Protocol's promises: the attributes,
the claim/decline rule of the hook, purity (same answer for the same input, in any
order, from any thread, without touching the properties) and the two-stage rule
(the consume-queue stage may over-match the exact decision, never under-match it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar

import pytest

from rmq.kernel.hookspecs.filtering import FilterExpressionError, MessageFilter
from rmq.protocol.common import Prop, tags_code
from rmq.testing._factory import fixture_or_method

MakeFilter = Callable[[str, str], "MessageFilter | None"]

DEFAULT_PROPERTIES: tuple[Mapping[str, str], ...] = (
    {},
    {Prop.TAGS: "TagA"},
    {Prop.TAGS: "TagB", "a": "10"},
    {Prop.TAGS: "TagC", "a": "5", "b": "x"},
    {"a": "abc", "b": "y"},
    {Prop.TAGS: "TagA", Prop.KEYS: "k1 k2", "a": "-1", "b": "x", "c": "3.5"},
    {"a": "1e3", "c": "NaN"},
    {Prop.TAGS: "*", "a": "2147483648"},
    {Prop.TAGS: "Tag A", "b": "it's"},
)
DEFAULT_TAGS_CODES: tuple[int, ...] = (0, 1, -1, 42, 2598919, 2**31 - 1, -(2**31))


class MessageFilterContract:
    """Base class (no ``Test`` prefix, so pytest collects only your subclass)."""

    #: the expression type the plugin claims
    expression_type: ClassVar[str] = ""
    #: expressions that must compile; every check runs over each
    valid_expressions: ClassVar[Sequence[str]] = ()
    #: expressions that must raise FilterExpressionError
    invalid_expressions: ClassVar[Sequence[str]] = ()
    #: a type no plugin claims; the plugin must return None for it
    foreign_expression_type: ClassVar[str] = "NO-SUCH-EXPRESSION-TYPE"
    sample_properties: ClassVar[Sequence[Mapping[str, str]]] = DEFAULT_PROPERTIES
    sample_tags_codes: ClassVar[Sequence[int]] = DEFAULT_TAGS_CODES

    def make_filter(self, expression_type: str, expression: str) -> MessageFilter | None:
        raise NotImplementedError(
            "subclass MessageFilterContract and provide make_filter (method or fixture)"
        )

    @pytest.fixture
    def filter_factory(self, request: pytest.FixtureRequest) -> MakeFilter:
        return fixture_or_method(request, "make_filter", self.make_filter)  # type: ignore[no-any-return]

    # -- helpers
    def compiled(self, factory: MakeFilter, expression: str) -> MessageFilter:
        f = factory(self.expression_type, expression)
        assert f is not None, f"plugin declined its own type {self.expression_type!r} for {expression!r}"
        return f

    def decisions(self, f: MessageFilter) -> tuple[tuple[bool, ...], tuple[bool, ...]]:
        props = tuple(f.match_properties(p) for p in self.sample_properties)
        codes = tuple(f.match_tags_code(c) for c in self.sample_tags_codes)
        return props, codes

    # -- the contract
    def test_contract_is_configured(self) -> None:
        assert self.expression_type, "set expression_type"
        assert self.valid_expressions, "set valid_expressions (at least one)"

    def test_satisfies_protocol(self, filter_factory: MakeFilter) -> None:
        for expression in self.valid_expressions:
            f = self.compiled(filter_factory, expression)
            assert isinstance(f, MessageFilter)
            assert isinstance(f.expression_type, str)
            assert f.expression_type.upper() == self.expression_type.upper()
            assert isinstance(f.expression, str)
            assert type(f.needs_properties) is bool

    def test_expression_type_is_case_insensitive(self, filter_factory: MakeFilter) -> None:
        for expression in self.valid_expressions:
            base = self.decisions(self.compiled(filter_factory, expression))
            for spelling in (self.expression_type.lower(), self.expression_type.upper()):
                f = filter_factory(spelling, expression)
                assert f is not None, f"{spelling!r} not claimed"
                assert self.decisions(f) == base

    def test_declines_foreign_types(self, filter_factory: MakeFilter) -> None:
        for expression in self.valid_expressions:
            assert filter_factory(self.foreign_expression_type, expression) is None

    def test_answers_are_plain_bools(self, filter_factory: MakeFilter) -> None:
        for expression in self.valid_expressions:
            f = self.compiled(filter_factory, expression)
            for p in self.sample_properties:
                assert type(f.match_properties(p)) is bool
            for c in self.sample_tags_codes:
                assert type(f.match_tags_code(c)) is bool

    def test_deterministic_and_order_independent(self, filter_factory: MakeFilter) -> None:
        for expression in self.valid_expressions:
            f = self.compiled(filter_factory, expression)
            first = self.decisions(f)
            assert self.decisions(self.compiled(filter_factory, expression)) == first  # recompiled
            assert self.decisions(f) == first  # asked again
            backwards = tuple(f.match_properties(p) for p in reversed(self.sample_properties))
            assert backwards[::-1] == first[0]

    def test_does_not_touch_properties(self, filter_factory: MakeFilter) -> None:
        for expression in self.valid_expressions:
            f = self.compiled(filter_factory, expression)
            for p in self.sample_properties:
                snapshot = dict(p)
                assert f.match_properties(MappingProxyType(dict(p))) == f.match_properties(p)
                assert dict(p) == snapshot

    def test_tags_stage_is_permissive_when_properties_are_needed(self, filter_factory: MakeFilter) -> None:
        for expression in self.valid_expressions:
            f = self.compiled(filter_factory, expression)
            if f.needs_properties:
                assert all(f.match_tags_code(c) for c in self.sample_tags_codes)

    def test_tags_stage_never_under_matches(self, filter_factory: MakeFilter) -> None:
        for expression in self.valid_expressions:
            f = self.compiled(filter_factory, expression)
            for p in self.sample_properties:
                if f.match_properties(p):
                    assert f.match_tags_code(tags_code(p.get(Prop.TAGS))), (expression, p)

    def test_thread_safe(self, filter_factory: MakeFilter) -> None:
        filters = [self.compiled(filter_factory, e) for e in self.valid_expressions]
        expected = [self.decisions(f) for f in filters]
        results: list[Any] = []

        def work() -> None:
            for _ in range(20):
                results.append([self.decisions(f) for f in filters])

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 80
        assert all(r == expected for r in results)

    def test_invalid_expressions_raise(self, filter_factory: MakeFilter) -> None:
        for expression in self.invalid_expressions:
            with pytest.raises(FilterExpressionError) as info:
                filter_factory(self.expression_type, expression)
            assert str(info.value), f"empty error message for {expression!r}"
