"""A role's runtime config change written back into the rmqd file it started from (rmq.roles.runtime)."""

from __future__ import annotations

from pathlib import Path

import anyio

from rmq.kernel.config import load_config
from rmq.roles.runtime import persist_changes

TOML = """# operator's comment
[namesrv]
listenPort = 9876  # kept
scanNotActiveBrokerInterval = 10000
"""


def test_changed_keys_are_written_into_the_roles_table_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "rmqd.toml"
    path.write_text(TOML)
    changes = {"scanNotActiveBrokerInterval": 5000, "orderMessageEnable": True}
    assert anyio.run(persist_changes, "namesrv", changes, str(path), "UPDATE_NAMESRV_CONFIG", "127.0.0.1") is None
    text = path.read_text()
    assert "# operator's comment" in text and "listenPort = 9876  # kept" in text
    ns = load_config(path).namesrv
    assert (ns.scanNotActiveBrokerInterval, ns.orderMessageEnable) == (5000, True)


def test_a_file_that_cannot_be_written_is_a_remark_not_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "gone" / "rmqd.toml"
    remark = anyio.run(persist_changes, "broker", {"traceOn": False}, str(missing), "UPDATE_BROKER_CONFIG", "::1")
    assert remark is not None and remark.startswith("applied, not persisted: ")
    assert not missing.exists()


def test_no_file_or_no_change_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "rmqd.toml"
    path.write_text(TOML)
    assert anyio.run(persist_changes, "namesrv", {}, str(path), "UPDATE_NAMESRV_CONFIG", "127.0.0.1") is None
    assert anyio.run(persist_changes, "namesrv", {"orderMessageEnable": True}, None, "UPDATE_NAMESRV_CONFIG",
                     "127.0.0.1") is None
    assert path.read_text() == TOML
