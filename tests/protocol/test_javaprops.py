"""The Java properties reader and editor (``rmq.protocol.javaprops``): java.util.Properties' grammar on
examples, and fuzzed — any text reads to entries or one PropertiesError; what ``escape`` writes reads back
as written; ``edit`` sets exactly the keys it is given and keeps every other entry. (Against Java's own
Properties: tests/compat/java/test_rocketmq_conf_java.py.)"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.protocol.javaprops import Entry, PropertiesError, edit, escape, parse, split_lines
from rmq.testing.fuzz import fuzz_settings


def kv(text: str) -> dict[str, str]:
    return {e.key: e.value for e in parse(text)}


def test_separators_comments_and_white_space() -> None:
    text = ("# a comment\n  ! another\n\n brokerClusterName = DefaultCluster\nbrokerId:0\n"
            "brokerName broker-a\ndeleteWhen\t=\t04  \nflag\nk==v\nk2 : = v\n\f#not\\\nk3=x")
    assert parse(text) == [
        Entry("brokerClusterName", "DefaultCluster", 4, 4), Entry("brokerId", "0", 5, 5),
        Entry("brokerName", "broker-a", 6, 6), Entry("deleteWhen", "04  ", 7, 7), Entry("flag", "", 8, 8),
        Entry("k", "=v", 9, 9), Entry("k2", "= v", 10, 10), Entry("k3", "x", 12, 12),
    ]  # a comment never continues (line 11), the value keeps trailing white space (Java does)


def test_continuations_and_line_numbers() -> None:
    text = "a=one \\\n    two\\\\\nb = x\\\n\\\n  y\nc=\\\n\nd=e\\"
    assert parse(text) == [Entry("a", "one two\\", 1, 2), Entry("b", "xy", 3, 5), Entry("c", "", 6, 7),
                           Entry("d", "e", 8, 8)]
    assert [e.line for e in parse("x=1\r\ny=2\rz=3\n")] == [1, 2, 3]  # CRLF, CR and LF each end one line
    assert [e.line for e in parse("x=1\x0by=2\u2028z=3\x85w")] == [1]  # nothing else ends a line
    assert parse("#c\\\n  k = v") == [Entry("k", "v", 2, 2)]
    assert parse("a\\\n#k=v") == [Entry("a#k", "v", 1, 2)]  # a continued line is no comment...
    assert parse("\\\n#k=v\n\\\n\n k=v") == [Entry("k", "v", 5, 5)]  # ...unless nothing came before the backslash
    assert parse("x=1\n\\") == parse("x=1\n\\\n") == [Entry("x", "1", 1, 1), Entry("", "", 2, 2)]  # Java's EOF quirk
    assert parse("x=1\n\\\r\n") == [Entry("x", "1", 1, 1)]


def test_escapes() -> None:
    assert kv(r"a\ b\:c\=d = \u0041\t\n\r\f\x\\\#") == {"a b:c=d": "A\t\n\r\fx\\#"}
    assert kv(r"smile=\uD83D\uDE00 \u00e9") == {"smile": "\U0001F600 é"}  # UTF-16 pairs join
    for bad in (r"k=\u12", r"k=\uZZZZ", "x=1\n\n" + r"k\u00g0=1"):
        with pytest.raises(PropertiesError, match=r"^line \d+: malformed \\uxxxx escape") as e:
            parse(bad)
        assert e.value.line == (3 if bad.startswith("x") else 1)


def test_escape_writes_what_reads_back() -> None:
    for key, value in (("a b", " lead"), ("k:=#!", "v=:#!\\"), ("é", "\U0001F600\t\n"), ("", "")):
        assert kv(f"{escape(key, key=True)}={escape(value)}") == {key: value}
    assert escape("/tmp/store") == "/tmp/store" and escape("a;b") == "a;b"


def test_edit_keeps_every_other_line() -> None:
    text = "# broker\r\nbrokerName = broker-a\r\n  brokerPermission=\\\n   6\r\n! end\r\n"
    out = edit(text, {"brokerPermission": "4", "traceOn": "false"})
    assert out == "# broker\r\nbrokerName = broker-a\r\n  brokerPermission=4\r\n! end\r\ntraceOn=false\n"
    assert edit("a=1", {"b": "2"}) == "a=1\nb=2\n"
    assert kv(edit("a=1\\", {"b": "2"})) == {"a": "1", "b": "2"}  # the continuation does not swallow it
    assert kv(edit("a=1\\\n", {"b": "2"})) == {"a": "1", "b": "2"}
    assert edit("", {"k": "v"}) == "k=v\n"


# ---------------------------------------------------------------- fuzz

ALPHABET = st.sampled_from(list("ab=: \t\f\\#!\r\nu0Fé") + ["\\u0041", "\\uD83D", "\\\n", "\r\n", "\x85"])
TEXTS = st.lists(ALPHABET, max_size=60).map("".join) | st.text(max_size=80)
STRINGS = st.text(max_size=12)


@fuzz_settings()
@given(TEXTS)
def test_any_text_reads_to_entries_or_one_error(text: str) -> None:
    try:
        entries = parse(text)
    except PropertiesError as e:
        assert 1 <= e.line <= max(1, len(split_lines(text)))
        return
    n = len(split_lines(text))
    for e in entries:
        assert 1 <= e.line <= e.end <= max(1, n)


@fuzz_settings()
@given(st.dictionaries(STRINGS, STRINGS, max_size=6), st.sampled_from(["=", ":", " ", " = ", "\t:"]))
def test_escaped_entries_read_back(entries: dict[str, str], sep: str) -> None:
    # an empty key needs a real separator: " value" alone is a line that starts with its key
    text = "".join(f"{escape(k, key=True)}{sep if k or sep.strip() else '='}{escape(v)}\n" for k, v in entries.items())
    assert kv(text) == entries
    assert [e.line for e in parse(text)] == list(range(1, len(entries) + 1))


@fuzz_settings()
@given(TEXTS, st.dictionaries(STRINGS, STRINGS, min_size=1, max_size=3))
def test_edit_sets_exactly_the_changes(text: str, changes: dict[str, str]) -> None:
    try:
        before = kv(text)
    except PropertiesError:
        return
    try:
        after = edit(text, changes)
    except ValueError:  # refused to write rather than write something else: must be rare, never wrong
        return
    assert kv(after) == {**before, **changes}
