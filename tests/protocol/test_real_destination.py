"""Where the delay and timer services re-put a parked message, and which parked messages they drop."""

from __future__ import annotations

import pytest

from rmq.protocol.common import Prop, real_destination
from rmq.protocol.names import TIMER_TOPIC, TRANS_HALF_TOPIC

PARKING = (TIMER_TOPIC, TRANS_HALF_TOPIC)


def test_a_parked_message_goes_back_to_its_topic_and_queue() -> None:
    assert real_destination({Prop.REAL_TOPIC: "T", Prop.REAL_QID: "3"}, PARKING) == ("T", 3)


@pytest.mark.parametrize(
    "props",
    [
        {},
        {Prop.REAL_TOPIC: "T"},
        {Prop.REAL_QID: "1"},
        {Prop.REAL_TOPIC: "", Prop.REAL_QID: "1"},
        {Prop.REAL_TOPIC: "T", Prop.REAL_QID: "x"},
        {Prop.REAL_TOPIC: "T", Prop.REAL_QID: "-1"},
        {Prop.REAL_TOPIC: TIMER_TOPIC, Prop.REAL_QID: "0"},
        {Prop.REAL_TOPIC: TRANS_HALF_TOPIC, Prop.REAL_QID: "0"},
    ],
)
def test_no_destination_or_a_parking_one_is_none(props: dict[str, str]) -> None:
    assert real_destination(props, PARKING) is None
