"""Topic and group names: RocketMQ's rule, and no accepted name can be a path trick or a forged log line."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq.protocol.names import (
    InvalidNameError,
    is_system_topic,
    printable,
    require_group,
    require_topic,
    validate_group,
    validate_topic,
)


def test_rocketmq_rule() -> None:
    assert validate_topic("Good_Topic-1%|x") is None
    assert validate_topic("a" * 127) is None and "127" in (validate_topic("a" * 128) or "")
    assert validate_group("g" * 255) is None and "255" in (validate_group("g" * 256) or "")
    for bad in ("", " ", "a b", "a/b", "..", ".", "a.b", "t\n", "é", "a\x00"):
        assert validate_topic(bad) is not None, bad
        assert validate_group(bad) is not None, bad
    assert validate_topic(None) == "The specified topic is blank."
    assert is_system_topic("SCHEDULE_TOPIC_XXXX") and is_system_topic("rmq_sys_x") and not is_system_topic("T")
    with pytest.raises(InvalidNameError) as e:
        require_topic("a/b", code=13)
    assert e.value.code == 13 and "illegal characters" in str(e.value)
    assert require_group("G") == "G"


@settings(max_examples=500)
@given(st.text(max_size=300))
def test_accepted_names_are_plain_path_components_and_reasons_are_one_printable_line(name: str) -> None:
    for check in (validate_topic, validate_group):
        reason = check(name)
        if reason is None:
            assert name not in (".", "..") and not set(name) & set("/\\\x00.\n\r") and name.isprintable()
        else:
            assert reason.isprintable() and len(reason) < 400


@given(st.text(max_size=1000), st.integers(1, 300))
def test_printable_is_one_bounded_line(text: str, limit: int) -> None:
    out = printable(text, limit)
    assert out.isprintable() and "\n" not in out
    assert len(out) <= limit * 10 + 40  # escapes may widen a character up to 10 times
