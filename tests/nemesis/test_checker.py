"""The chaos checker's queue-order judgement (rmq.testing.chaos.reorderings) on hand-made histories: a
later id first delivered before an earlier one of the same queue and producer is a reordering, unless
the earlier id is one whose place is not promised (a failed C++/Java send: ``skip``)."""

from __future__ import annotations

from rmq.testing.chaos import SECOND_FIRST, reorderings


def _d(i: int, queue: int = 0) -> dict[str, object]:
    return {"ev": "recv", "id": f"T-{i}", "queue": queue}


def test_in_order_and_redeliveries_are_not_reorderings() -> None:
    assert reorderings([_d(1), _d(2), _d(1), _d(3), _d(SECOND_FIRST + 1), _d(0, queue=1)]) == []


def test_an_earlier_id_after_a_later_one_of_its_queue_and_producer() -> None:
    assert reorderings([_d(1), _d(5), _d(3)]) == [(0, "T-3", "T-5")]
    assert reorderings([_d(SECOND_FIRST + 5), _d(3)]) == []  # another producer's ids


def test_skipped_ids_neither_count_nor_raise_the_bar() -> None:
    dels = [_d(1), _d(5), _d(3), _d(4)]
    assert reorderings(dels, skip={"T-5"}) == []
    assert reorderings(dels, skip={"T-3"}) == [(0, "T-4", "T-5")]
