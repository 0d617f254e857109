"""``MappedFileQueue``: the segment stream shared by the commitlog and the consume queues."""

from __future__ import annotations

from pathlib import Path

from rmq.plugins.storage_mmap.file_queue import MappedFileQueue
from rmq.plugins.storage_mmap.mapped_file import offset_name

SIZE = 8192


def test_grow_find_cut_delete_and_reload(tmp_path: Path) -> None:
    q = MappedFileQueue(tmp_path / "q", SIZE)
    for start in (0, SIZE, 2 * SIZE):
        f = q.open_new(start, reserve=SIZE)
        f.mm[0:SIZE] = b"x" * SIZE
        f.wrote = SIZE
    assert (q.start_offset, q.end_offset) == (0, 3 * SIZE)
    assert q.file_for(SIZE + 5) is q.files[1] and q.file_for(3 * SIZE) is None
    q.cut(SIZE + 100)  # the third segment goes, the second is zeroed from byte 100
    assert len(q.files) == 2 and q.end_offset == SIZE + 100
    assert bytes(q.files[1].mm[100:SIZE]) == bytes(SIZE - 100)
    q.flush_files(0)
    assert all(f.flushed == f.wrote for f in q.files)
    q.delete_first()
    assert q.start_offset == SIZE and not (tmp_path / "q" / offset_name(0)).exists()
    q.close()

    again = MappedFileQueue(tmp_path / "q", SIZE)
    assert again.load_segments(reserve=0, fix_size=False, size_name="size") == ("", [])
    assert [f.start for f in again.files] == [SIZE]
    again.close()


def test_load_stops_at_the_first_segment_out_of_sequence(tmp_path: Path) -> None:
    d = tmp_path / "q"
    d.mkdir()
    for start in (0, SIZE, 3 * SIZE):  # 2*SIZE is missing
        (d / offset_name(start)).write_bytes(bytes(SIZE))
    (d / offset_name(4 * SIZE)).write_bytes(bytes(SIZE - 1))
    q = MappedFileQueue(d, SIZE)
    problem, rest = q.load_segments(reserve=0, fix_size=False, size_name="size")
    assert "is missing before it" in problem and [p.name for p in rest] == [
        offset_name(3 * SIZE),
        offset_name(4 * SIZE),
    ]
    assert [f.start for f in q.files] == [0, SIZE]
    q.close()
