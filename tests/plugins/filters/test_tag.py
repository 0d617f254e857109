"""TAG filter: RocketMQ's hash vectors, tag-set parsing, the two stages, the plugin's claim."""

from __future__ import annotations

import pytest

from rmq.kernel.hookspecs.filtering import MessageFilter
from rmq.plugins.filters.tag import TagFilter, TagFilterPlugin, parse_tags
from rmq.protocol.common import java_hash, tags_code
from rmq.testing.filtering import MessageFilterContract


class TestTagFilterContract(MessageFilterContract):
    expression_type = "TAG"
    valid_expressions = (
        "*",
        "",
        "TagA",
        "TagA || TagB",
        " TagA ||  || Tag A ",
        "   ",
        "Aa",
        "polygenelubricants",
    )

    def make_filter(self, expression_type: str, expression: str) -> MessageFilter | None:
        return TagFilterPlugin({}).rmq_filter_make_filter(expression_type, expression)


def test_hash_vectors() -> None:
    # values a Java broker stores in the consume queue: String.hashCode of the TAGS value
    assert tags_code("TagA") == java_hash("TagA") == 2598919
    assert java_hash("*") == 42
    assert java_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert java_hash("Aa") == java_hash("BB") == 2112  # the classic collision
    assert tags_code(None) == tags_code("") == 0


@pytest.mark.parametrize(
    ("expression", "tags"),
    [
        ("TagA", {"TagA"}),
        ("TagA||TagB", {"TagA", "TagB"}),
        ("TagA || TagB", {"TagA", "TagB"}),
        ("  TagA ||   || TagB ||", {"TagA", "TagB"}),
        ("||TagA", {"TagA"}),
        ("Tag A || Tag A", {"Tag A"}),  # inner spaces are part of the tag
        ("TagA | TagB", {"TagA | TagB"}),  # a single bar is not a separator
        (" * ", {"*"}),  # only the exact "*" subscribes to all, as in RocketMQ
        ("   ", set()),
        ("||", set()),
    ],
)
def test_tag_sets(expression: str, tags: set[str]) -> None:
    f = TagFilter(expression)
    assert f.tags == frozenset(tags) == parse_tags(expression)
    assert f.code_set == frozenset(java_hash(t) for t in tags)
    assert not f.subscribe_all
    assert f.expression == expression


@pytest.mark.parametrize("expression", ["*", "", None])
def test_subscribe_all(expression: str | None) -> None:
    f = TagFilter(expression)
    assert f.subscribe_all and f.expression == "*" and parse_tags(expression) is None
    assert f.tags == frozenset() and f.code_set == frozenset()
    assert all(f.match_tags_code(c) for c in (0, 1, -1, 2598919, 2**40))
    assert f.match_tag(None) and f.match_tag("anything")
    assert f.match_properties({}) and f.match_properties({"TAGS": "x"})


def test_consume_queue_stage() -> None:
    f = TagFilter("TagA || polygenelubricants")
    assert f.match_tags_code(2598919)
    assert f.match_tags_code(-(2**31))
    assert not f.match_tags_code(0)  # a message without tags
    assert not f.match_tags_code(tags_code("TagB"))
    # the broker compares (int) tagsCode: a wider stored code matches on its low 32 bits
    assert f.match_tags_code(2598919 + (1 << 32))
    assert f.match_tags_code(-(2**31) - (1 << 32))
    assert not f.match_tags_code(2598920 + (1 << 32))


def test_collisions_over_match_and_the_client_stage_removes_them() -> None:
    f = TagFilter("Aa")
    assert f.match_tags_code(tags_code("BB"))  # same hash: the broker lets it through
    assert not f.match_tag("BB")  # the client re-checks the exact string
    assert f.match_tag("Aa")
    assert not f.match_tag(None)  # no tags: dropped once a tag set exists
    assert f.match_properties({"TAGS": "Aa"}) and not f.match_properties({"TAGS": "BB"})
    assert not f.match_properties({"a": "Aa"})


def test_whitespace_only_matches_nothing() -> None:
    f = TagFilter("   ")
    assert not any(f.match_tags_code(c) for c in (0, 42, 2598919))
    assert not f.match_tag("TagA") and not f.match_tag(None)


def test_protocol_attributes() -> None:
    f = TagFilter("TagA")
    assert isinstance(f, MessageFilter)
    assert f.expression_type == "TAG" and f.needs_properties is False
    assert repr(f) == "TagFilter('TagA')"
    with pytest.raises(AttributeError):
        f.unknown = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("expression_type", ["TAG", "tag", "Tag", None, ""])
def test_plugin_claims_tag_and_the_default(expression_type: str | None) -> None:
    f = TagFilterPlugin({}).rmq_filter_make_filter(expression_type, "TagA")  # type: ignore[arg-type]
    assert isinstance(f, TagFilter) and f.tags == {"TagA"}


@pytest.mark.parametrize("expression_type", ["SQL92", "CLASS", "TAGS", "other"])
def test_plugin_declines_other_types(expression_type: str) -> None:
    assert TagFilterPlugin({}).rmq_filter_make_filter(expression_type, "TagA") is None


def test_plugin_options() -> None:
    TagFilterPlugin(None)
    TagFilterPlugin({})
    with pytest.raises(
        ValueError, match=r"rmq\.filters:tag: unknown option 'case_sensitive'; known options: none"
    ):
        TagFilterPlugin({"case_sensitive": True})
    with pytest.raises(ValueError, match="options must be a table"):
        TagFilterPlugin(["x"])  # type: ignore[arg-type]
