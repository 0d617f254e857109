"""How a broker's check of an exactly-once half is answered from the commit log (no processes):
the rules that make discarded attempts, replays and dead drivers come out exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from rmq.connectors.spark._exactly_once import BATCH_PROP, LOG_PROP, TxLog, decide  # noqa: E402


def half(log: Path, batch: int, uniq: str) -> dict[str, str]:
    return {LOG_PROP: str(log), BATCH_PROP: str(batch), "UNIQ_KEY": uniq}


def test_no_record_waits_while_the_batch_runs_and_rolls_back_once_a_later_batch_logged(tmp_path: Path) -> None:
    log = TxLog(str(tmp_path))
    assert decide(half(tmp_path, 3, "a"), 60) is None  # no log at all yet
    log.write_commit(2, ["x"])
    assert decide(half(tmp_path, 3, "a"), 60) is None  # batch 3 is still running
    log.write_commit(4, ["y"])
    assert decide(half(tmp_path, 3, "a"), 60) is False  # batch 3 was abandoned: Spark went past it


def test_listed_halves_commit_unlisted_roll_back(tmp_path: Path) -> None:
    log = TxLog(str(tmp_path))
    log.write_commit(5, ["a", "b"])
    log.write_ended(5, ["a"])
    assert decide(half(tmp_path, 5, "c"), 60) is False  # a discarded attempt / a replay's duplicate
    assert decide(half(tmp_path, 5, "b"), 60) is True  # its END was not acknowledged: the check commits it
    assert decide(half(tmp_path, 5, "a"), 60) is False  # committed by the driver: the check's copy goes


def test_a_fresh_commit_without_ended_is_left_to_its_driver_until_the_grace(tmp_path: Path) -> None:
    log = TxLog(str(tmp_path))
    log.write_commit(1, ["a"])
    assert decide(half(tmp_path, 1, "a"), 60) is None  # the driver may be ending it right now
    assert decide(half(tmp_path, 1, "a"), 0) is True  # past the grace: the driver died after logging


def test_records_are_whole_and_the_test_hook_fires_once(tmp_path: Path) -> None:
    log = TxLog(str(tmp_path / "nested" / "log"))
    assert log.latest() == -1 and log.commit_record(0) is None
    log.write_commit(0, ["m1"])
    assert log.commit_record(0)["halves"] == ["m1"] and log.latest() == 0
    assert not [p for p in (tmp_path / "nested" / "log").iterdir() if p.name.endswith(".tmp")]
    assert log.fail_once(0, "beforeLog") and not log.fail_once(0, "beforeLog")
    assert log.latest() == 0  # the marker is no record


def test_unparseable_properties_ask_again(tmp_path: Path) -> None:
    assert decide({}, 60) is None
    assert decide({LOG_PROP: str(tmp_path), BATCH_PROP: "x", "UNIQ_KEY": "a"}, 60) is None
