"""The send side of timer messages: the put stage, slot rounding and recall handles.

Facts are RocketMQ 5's (reference: rocketmq-timer-tx-acl.md §1.2, §1.7): a message carrying
``TIMER_DELAY_SEC`` > ``TIMER_DELAY_MS`` > ``TIMER_DELIVER_MS`` (that precedence) and due
later than now is parked in ``rmq_sys_wheel_timer`` queue 0 with its slot in
``TIMER_OUT_MS`` and its destination in ``REAL_TOPIC``/``REAL_QID``; one due now or earlier
is stored as sent. The slot is the last precision boundary strictly below the requested
time, and the slot fires at the next boundary, so a message is never early.
"""

from __future__ import annotations

import base64
import binascii
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from rmq.kernel import PutResult, PutStatus, clock
from rmq.protocol.common import Prop, SysFlag, prop_value, set_props
from rmq.protocol.names import RETRY_PREFIX, TIMER_TOPIC

if TYPE_CHECKING:
    from rmq.kernel import MessageRecord

TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
RECALL_TAG = "_RECALL_TAG_"
USER_TIMER_PROPS = (TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS)  # precedence order

_TX_BITS = SysFlag.TX_PREPARED | SysFlag.TX_COMMIT | SysFlag.TX_ROLLBACK
_OUT_KEY = TIMER_OUT_MS + "\x01"


def snap_precision(ms: int) -> int:
    """RocketMQ's setter: the largest of 100/200/500/1000 not above ``ms`` (below 200: 100)."""
    for p in (1000, 500, 200):
        if ms >= p:
            return p
    return 100


def slot_of(deliver_ms: int, precision: int) -> int:
    """The slot a time waits in: the last boundary strictly below it (fires at the next one)."""
    if deliver_ms % precision == 0:
        return deliver_ms - precision
    return deliver_ms // precision * precision


def encode_handle(topic: str, broker_name: str, ts: int, uniq_key: str) -> str:
    """A RocketMQ 5.3 recall handle: URL-safe padded Base64 of ``v1 topic broker ts uniqKey``."""
    return base64.urlsafe_b64encode(f"v1 {topic} {broker_name} {ts} {uniq_key}".encode()).decode()


def decode_handle(handle: str) -> tuple[str, str, int, str]:
    """(topic, brokerName, timestamp ms, UNIQ_KEY) of a recall handle; ValueError when it is not one."""
    try:
        text = base64.urlsafe_b64decode(handle.encode("ascii")).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError) as e:
        raise ValueError(f"not URL-safe Base64 text: {e}") from None
    parts = text.split(" ")
    if len(parts) < 5 or parts[0] != "v1":
        raise ValueError("not a v1 recall handle")
    try:
        ts = int(parts[3])
    except ValueError:
        raise ValueError(f"timestamp {parts[3][:32]!r} is not a number") from None
    return parts[1], parts[2], ts, parts[4]


class TimerStage:
    """Put stage for one of the three user TIMER_* properties (three instances, one per property).

    The first instance a message reaches applies the precedence over all three, so the others
    find nothing left to do. Runs for plain and committed transactional messages, and for the
    broker's own puts (a recall marker); a delivered copy carries ``TIMER_OUT_MS`` and passes.
    ``slot_count`` (from the running service) feeds ``timerCongestNumEachSlot`` flow control.
    """

    def __init__(self, trigger: str, priority: int, *, enabled: bool, precision: int, max_delay_ms: int,
                 congest: int, broker_name: str,
                 slot_count: Callable[[int], int] | None = None) -> None:
        self.trigger = trigger
        self.priority = priority
        self.enabled = enabled
        self.precision = precision
        self.max_delay_ms = max_delay_ms
        self.congest = congest
        self.broker_name = broker_name
        self.slot_count = slot_count

    def route(self, rec: MessageRecord) -> PutResult | None:
        if rec.sys_flag & _TX_BITS not in (0, SysFlag.TX_COMMIT) or rec.topic == TIMER_TOPIC:
            return None
        props = rec.properties
        if _OUT_KEY in props:
            return None  # a delivered copy (or a forged one: it is stored as sent, never early)
        for name in USER_TIMER_PROPS:
            raw = prop_value(props, name)
            if raw is not None:
                break
        else:
            return None
        if not self.enabled:
            return PutResult(PutStatus.WHEEL_TIMER_NOT_ENABLE,
                             remark="accurate timer message is not enabled, timerWheelEnable is false")
        now = clock.now_ms()
        try:
            value = int(raw.strip())
        except ValueError:
            return PutResult(PutStatus.WHEEL_TIMER_MSG_ILLEGAL,
                             remark=f"timer message illegal: {name} {raw[:40]!r} is not a number")
        deliver = now + value * 1000 if name == TIMER_DELAY_SEC else now + value if name == TIMER_DELAY_MS else value
        # a delete marker by property is accepted whatever recallMessageEnable says: 5.3.3 gates only
        # the RECALL_MESSAGE request on it (HookUtils.transformTimerMessage has no such check)
        delete = TIMER_DEL_UNIQKEY + "\x01" in props
        if deliver - now > self.max_delay_ms or (delete and deliver <= now):
            return PutResult(PutStatus.WHEEL_TIMER_MSG_ILLEGAL, remark=(
                f"timer message illegal, the delay time should not be bigger than the max delay {self.max_delay_ms}ms;"
                " or if set del msg, the delay time should be bigger than the current time"))
        if deliver <= now:
            return None  # due already: stored in its topic as sent
        slot = slot_of(deliver, self.precision)
        c = self.congest
        if self.slot_count is not None and c < 2**31 - 1:
            n = self.slot_count(slot)
            if n > c and (n >= 2 * c or random.random() < (n - c) / c):
                return PutResult(PutStatus.WHEEL_TIMER_FLOW_CONTROL, remark=(
                    f"timer message is under flow control, max num limit is {c} or the current value is greater "
                    f"than {c} and less than {2 * c}, trigger random flow control"))
        rec.properties = set_props(props, {TIMER_OUT_MS: str(slot), Prop.REAL_TOPIC: rec.topic,
                                           Prop.REAL_QID: str(rec.queue_id)})
        rec.topic = TIMER_TOPIC
        rec.queue_id = 0
        return None

    def response_fields(self, rec: MessageRecord) -> dict[str, str] | None:
        """A parked message's send response carries its recall handle (RocketMQ 5.3.2+)."""
        if rec.topic != TIMER_TOPIC:
            return None
        props = rec.properties
        real = prop_value(props, Prop.REAL_TOPIC)
        uniq = prop_value(props, Prop.UNIQ_KEY)
        out = prop_value(props, TIMER_OUT_MS)
        if not real or not uniq or not out or real.startswith(RETRY_PREFIX):
            return None  # a delete marker gets one too, as 5.3.3's attachRecallHandle
        return {"recallHandle": encode_handle(real, self.broker_name, int(out) + 1, uniq)}
