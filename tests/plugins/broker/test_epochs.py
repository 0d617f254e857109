"""The epoch file: RocketMQ's format, fall-back to .bak, and the common point of two histories."""

from __future__ import annotations

import zlib
from pathlib import Path

from rmq.plugins.broker.epochs import EpochFile, common_point, epoch_list


def test_format_append_rules_and_bak(tmp_path: Path) -> None:
    f = EpochFile(tmp_path / "epochFileCheckpoint")
    f.load()
    assert f.entries == [] and not f.path.exists()
    assert f.append(1, 0) and f.append(2, 1000)
    assert not f.append(2, 2000) and not f.append(3, 500)  # both must grow
    body = "1-0\n2-1000\n"
    assert f.path.read_text() == f"2\n{zlib.crc32(body.encode()) & 0x7FFFFFFF}\n{body}"
    f.append(3, 1500)
    f.path.write_text("3\n12345\n1-0\n2-1000\n3-1500\n")  # a bad CRC: the previous file is used
    g = EpochFile(f.path)
    g.load()
    assert g.entries == [(1, 0), (2, 1000)]
    g.truncate_from_offset(1000)
    assert g.entries == [(1, 0)]


def test_common_point() -> None:
    master = [(1, 0), (2, 1000), (3, 5000)]
    assert epoch_list(master, 7000)[-1] == {"epoch": 3, "startOffset": 5000, "endOffset": 7000}
    # an old master that wrote past what the new one got under epoch 2: cut at the new master's epoch-2 end
    assert common_point([(1, 0), (2, 1000)], 6500, master, 7000) == 5000
    # a slave behind the master: nothing to cut
    assert common_point([(1, 0), (2, 1000)], 3000, master, 7000) == 3000
    assert common_point([], 0, master, 7000) == 0
    assert common_point([(1, 0), (2, 900)], 3000, master, 7000) == 900  # epoch 2 started elsewhere: the shorter epoch-1 end
    assert common_point([(7, 0)], 10, master, 7000) is None
