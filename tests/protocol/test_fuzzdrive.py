"""The mutation driver behind ``make fuzz-long`` (rmq.testing.fuzzdrive), kept from rotting: 20k inputs of it
against the installed build of the extensions, its targets' reference checks on their seeds, and its
crash bookkeeping (a breach comes back with the input; the last input survives in the shared file).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from rmq.protocol import frame, storepath
from rmq.testing.fuzz import compiler_present
from rmq.testing.fuzzdrive import Breach, Target, _LastInput, fuzz, main, save_crash
from rmq.testing.fuzztargets import make_targets, target_names

pytestmark = pytest.mark.skipif(
    frame.compiled_codec() is None and storepath.compiled_store() is None and not compiler_present(),
    reason="no C compiler: pure path only")


def test_every_entry_point_takes_its_share_without_a_breach() -> None:
    targets = make_targets()
    assert [t.name for t in targets] == target_names()
    res = fuzz(targets, 20_000, seed=30, sample=8)
    assert "breach" not in res, res.get("breach")
    assert sum(res["counts"].values()) == 20_000
    for t in targets:  # every entry point ran, and mutations reached more than one outcome of each
        assert res["counts"][t.name] >= 20_000 * t.weight // sum(x.weight for x in targets)
        assert res["outcomes"][t.name] > 1, t.name


@pytest.mark.parametrize("name", target_names())
def test_seeds_agree_with_the_reference(name: str) -> None:
    (target,) = make_targets([name])
    for data in target.seeds():
        target.run(data)
        target.check(data)


class _Trap(Target):
    """Breaks on inputs holding 0xAB 0xCD: what the driver must find, report and hand back."""

    name = "trap"
    tokens = (b"\xab\xcd",)

    def seeds(self) -> list[bytes]:
        return [b"plain input"]

    def run(self, data: bytes) -> Any:
        if b"\xab\xcd" in data:
            raise Breach("trapped")
        return len(data) % 3


def test_a_breach_comes_back_with_its_input(tmp_path: Path) -> None:
    last = tmp_path / "last"
    res = fuzz([_Trap()], 200_000, seed=1, last=last)
    name, data, err = res["breach"]
    assert (name, err) == ("trap", "Breach: trapped") and b"\xab\xcd" in data
    assert sum(res["counts"].values()) < 200_000
    assert _LastInput.read(last) == (0, data)  # what the supervisor reads after a sanitizer abort
    path = save_crash(tmp_path / "crashes", name, data)
    assert path.read_bytes() == data and path.name.startswith("trap-")


def test_a_saved_input_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (split,) = make_targets(["split"])
    path = save_crash(tmp_path, "split", split.seeds()[0])
    assert main(["--replay", str(path)]) == 0
    assert "replay: split" in capsys.readouterr().out


def test_scan_of_a_unit_in_the_last_representable_segment() -> None:
    """Found by make fuzz-long: a consume-queue unit whose offset lies in the last segment an int64 can
    number made the compiled scan compute the next segment's start past INT64_MAX (UBSan: signed
    overflow; the plain build then returned a record the pure loop skips). A corrupt queue file is
    enough to get there; the compiled scan now skips the rest as the pure loop does."""
    (scan,) = make_targets(["scan"])
    for phys in (0x7FFFFFFFFFFFF800, 0x7FFFFFFFFFFFFFFF, 0x7FFFFFFFFFFFF000):
        units = struct.pack(">qiq", phys, 100, 0) + struct.pack(">qiq", 0, 120, 0) + struct.pack(">qiq", 120, 300, 1)
        for config in (0x00, 0x0C, 0x40):  # first segment index, count, byte limit, tag filter
            assert scan.run(bytes([config]) + units) is not None
            scan.check(bytes([config]) + units)  # the pure loop's answer: nothing after that unit
