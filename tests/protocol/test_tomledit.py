"""Runtime config changes written back into the user's TOML: only the changed lines move, the rest
(comments, order, other tables) stays; what cannot be edited safely is refused and left unchanged.
The text edit is ``rmq.protocol.tomledit``; the file is rewritten by ``rmq.kernel.ConfigFile.edit``."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.kernel import ConfigFile
from rmq.protocol.tomledit import TomlEditError, edit, render

TEXT = """# my broker
[namesrv]
listenPort = 9876

[broker]
brokerName = "b1"   # the name
traceOn = true
# a comment in the table

[log]
level = "INFO"
"""


def test_changed_lines_only(tmp_path: Path) -> None:
    f = tmp_path / "rmqd.toml"
    f.write_text(TEXT)
    ConfigFile(f).edit(lambda text: edit(text, "broker", {"traceOn": False, "maxMessageSize": 1024,
                                                          "regionId": 'quo"te'}))
    out = f.read_text()
    assert (tmp_path / "rmqd.toml.bak").read_text() == TEXT  # RocketMQ's persist protocol keeps the old file
    assert out.startswith("# my broker\n[namesrv]") and "# a comment in the table" in out
    assert 'brokerName = "b1"   # the name' in out and "traceOn = false" in out
    doc = tomllib.loads(out)
    assert doc["broker"] == {"brokerName": "b1", "traceOn": False, "maxMessageSize": 1024, "regionId": 'quo"te'}
    assert doc["log"] == {"level": "INFO"}
    assert out.index("maxMessageSize") < out.index("[log]")


def test_new_table_and_refusals(tmp_path: Path) -> None:
    assert tomllib.loads(edit("[namesrv]\nlistenPort = 1\n", "broker", {"traceOn": True}))["broker"] == {
        "traceOn": True}
    with pytest.raises(TomlEditError, match="left unchanged"):
        edit('broker = { brokerName = "x" }\n', "broker", {"traceOn": True})
    g = tmp_path / "b.toml"
    g.write_text('broker = { brokerName = "x" }\n')
    with pytest.raises(TomlEditError):
        ConfigFile(g).edit(lambda text: edit(text, "broker", {"traceOn": True}))
    assert g.read_text() == 'broker = { brokerName = "x" }\n' and not (tmp_path / "b.toml.tmp").exists()
    with pytest.raises(FileNotFoundError):
        ConfigFile(tmp_path / "missing.toml").edit(lambda text: edit(text, "broker", {"traceOn": True}))
    assert not (tmp_path / "missing.toml").exists()


values = st.one_of(st.booleans(), st.integers(-(2**62), 2**62), st.text(max_size=20))
keys = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,12}", fullmatch=True)


@given(st.dictionaries(keys, values, max_size=5), st.dictionaries(keys, values, min_size=1, max_size=5))
def test_any_values_round_trip(before: dict[str, object], changes: dict[str, object]) -> None:
    text = render("[namesrv]\nlistenPort = 9876\n", "broker", before)
    out = render(text, "broker", changes)
    assert tomllib.loads(out)["broker"] == {**before, **changes}
