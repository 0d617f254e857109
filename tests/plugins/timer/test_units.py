"""The timer's pieces without a daemon: slot rounding, recall handles (a decoder, fuzzed), the timer
log's recovery from torn and garbage tails, and the checkpoint file."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq.kernel import MessageRecord, PutStatus
from rmq.plugins.timer.log import UNIT, TimerCheckpoint, TimerLog, TimerLogError
from rmq.plugins.timer.stage import TimerStage, decode_handle, encode_handle, slot_of, snap_precision
from rmq.protocol.common import encode_properties, prop_value


def test_precision_snaps_and_slots_are_strictly_below() -> None:
    assert [snap_precision(v) for v in (1, 150, 200, 499, 500, 999, 1000, 5000)] == [
        100, 100, 200, 200, 500, 500, 1000, 1000]
    assert slot_of(5000, 1000) == 4000 and slot_of(5001, 1000) == 5000 and slot_of(5999, 1000) == 5000


@given(st.integers(0, 2**62), st.sampled_from([100, 200, 500, 1000]))
def test_slot_fires_never_early(t: int, p: int) -> None:
    slot = slot_of(t, p)
    assert slot % p == 0 and slot < t <= slot + p  # fires at slot + p: at or after t, within p


def test_handle_round_trip() -> None:
    h = encode_handle("TopicA", "broker-a", 1_700_000_000_123, "AC1100")
    assert decode_handle(h) == ("TopicA", "broker-a", 1_700_000_000_123, "AC1100")


@given(st.text(max_size=200))
def test_handle_decoder_fuzz(text: str) -> None:
    try:
        topic, broker, ts, uniq = decode_handle(text)
    except ValueError:
        return
    assert isinstance(ts, int) and isinstance(topic, str) and isinstance(uniq, str)


def stage(**kw: object) -> TimerStage:
    args = dict(enabled=True, precision=1000, max_delay_ms=60_000, congest=2,
                broker_name="b", slot_count=lambda slot: 3)
    args.update(kw)
    return TimerStage("TIMER_DELAY_SEC", 400, **args)  # type: ignore[arg-type]


def test_stage_precedence_flow_control_and_passthrough() -> None:
    rec = MessageRecord("T", 2, b"x", properties=encode_properties({"TIMER_DELAY_SEC": "10", "TIMER_DELIVER_MS": "1"}))
    assert stage(congest=2**31 - 1).route(rec) is None  # DELAY_SEC wins over an overdue DELIVER_MS
    assert rec.topic == "rmq_sys_wheel_timer" and rec.queue_id == 0
    assert prop_value(rec.properties, "REAL_QID") == "2"
    again = MessageRecord("T", 0, b"x", properties=rec.properties)
    assert stage().route(again) is None and again.topic == "T"  # a delivered copy carries TIMER_OUT_MS
    hot = MessageRecord("T", 0, b"x", properties=encode_properties({"TIMER_DELAY_SEC": "10"}))
    r = stage(congest=1).route(hot)  # 3 parked >= 2 * 1: always refused
    assert r is not None and r.status is PutStatus.WHEEL_TIMER_FLOW_CONTROL
    prepared = MessageRecord("T", 0, b"x", properties=encode_properties({"TIMER_DELAY_SEC": "10"}), sys_flag=4)
    assert stage().route(prepared) is None and prepared.topic == "T"  # a half: its timer applies at commit


def write_units(log: TimerLog, n: int, start_q: int = 0) -> None:
    log.append(b"".join(UNIT.pack(1000 * i, 100 * i, 90, 1, start_q + i) for i in range(n)))
    log.sync()


def test_log_rolls_files_and_recovers_a_torn_tail(tmp_path: Path) -> None:
    log = TimerLog(tmp_path / "timerlog", 10 * UNIT.size)
    write_units(log, 25)
    assert len(log.files()) == 3 and log.end == 25 * UNIT.size
    log.close()
    last = log.files()[-1][1]
    with open(last, "ab") as f:
        f.write(b"\x00" * 7)  # a torn unit
    again = TimerLog(tmp_path / "timerlog", 10 * UNIT.size)
    units = list(again.scan())
    assert [u[4] for _, u in units] == list(range(25)) and again.end == 25 * UNIT.size
    again.truncate(12 * UNIT.size)  # the replay point: later files go, the file holding it is cut
    assert [s for s, _ in again.files()] == [0, 10 * UNIT.size] and again.end == 12 * UNIT.size
    write_units(again, 3, start_q=12)
    assert [u[4] for _, u in TimerLog(tmp_path / "timerlog", 10 * UNIT.size).scan()] == list(range(15))


@given(st.binary(max_size=400))
def test_log_scan_survives_garbage(tmp_path_factory: pytest.TempPathFactory, garbage: bytes) -> None:
    d = tmp_path_factory.mktemp("tl")
    log = TimerLog(d, 1024)
    write_units(log, 3)
    log.close()
    with open(d / f"{0:020d}", "ab") as f:
        f.write(garbage)
    units = list(TimerLog(d, 1024).scan())
    assert [u[4] for _, u in units][:3] == [0, 1, 2]


def test_checkpoint_round_trip_and_damage(tmp_path: Path) -> None:
    c = TimerCheckpoint(tmp_path / "timercheck")
    assert c.load() is False
    c.read_time, c.flush_pos, c.queue_offset, c.master_queue_offset, c.counter = 5000, 64, 2, 2, 7
    c.save()
    d = TimerCheckpoint(tmp_path / "timercheck")
    assert d.load() and (d.read_time, d.flush_pos, d.queue_offset, d.counter) == (5000, 64, 2, 7)
    (tmp_path / "timercheck").write_bytes(b"short")
    with pytest.raises(TimerLogError, match="timercheck: 5 bytes"):
        TimerCheckpoint(tmp_path / "timercheck").load()
