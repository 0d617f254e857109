"""The put pipeline: what happens to a message between a validated send and the store.

Stages come from plugins (``rmq_broker_put_stages``): the schedule plugin parks DELAY
messages, a timer plugin would stage TIMER_* messages, a transaction plugin half
messages. The broker itself only knows which properties defer a message, so that one
no stage claims is refused (RocketMQ 5 answers a timer message with WHEEL_TIMER_NOT_ENABLE
when its timer wheel is off) instead of being stored as if it were due now.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from rmq.kernel import PluginError, PutResult, PutStatus
from rmq.protocol.common import Prop, SysFlag, prop_value

if TYPE_CHECKING:
    from rmq.kernel import MessageRecord, PutStage

TIMER_PROPS = ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")


class PutPipeline:
    def __init__(self, stages: Iterable[PutStage]) -> None:
        ordered = sorted(stages, key=lambda s: s.priority)
        seen: dict[str, PutStage] = {}
        for stage in ordered:
            other = seen.get(stage.trigger)
            if other is not None:
                raise PluginError(
                    f"put stages {type(other).__name__} and {type(stage).__name__} both claim property {stage.trigger!r}"
                )
            seen[stage.trigger] = stage
        self.stages = ordered
        self._keys = [(s.trigger + "\x01", s) for s in ordered]
        self.claimed = frozenset(seen)
        self._answering = [s for s in ordered if callable(getattr(s, "response_fields", None))]

    @staticmethod
    def may_defer(props: str) -> bool:
        """Cheap pre-check on the hot path: could any stage (or refusal) apply to these properties?

        ``send.py`` repeats this test inline (single and batch sends): keep them alike."""
        return "DELAY\x01" in props or "TIMER_" in props or "TRAN_MSG\x01" in props

    def route(self, rec: MessageRecord) -> PutResult | None:
        """Apply the stages whose property ``rec`` carries, in priority order, until one moves it.

        A stage that leaves the message where it is (a DELAY of 0, a timer already due) lets the
        next one look at it; one that re-routes it (another topic) or refuses it ends the walk.
        A refusal is returned as a PutResult."""
        props = rec.properties
        topic = rec.topic
        for key, stage in self._keys:
            if key in props:
                refused = stage.route(rec)
                if refused is not None or rec.topic != topic:
                    return refused
                props = rec.properties
        return self._unclaimed(rec)

    def response_fields(self, rec: MessageRecord) -> dict[str, str] | None:
        """Extra send-response header fields for a message a stage re-routed (a timer's recallHandle)."""
        for stage in self._answering:
            fields = stage.response_fields(rec)
            if fields:
                return fields
        return None

    def _unclaimed(self, rec: MessageRecord) -> PutResult | None:
        props = rec.properties
        claimed = self.claimed
        if "DELAY\x01" in props and "DELAY" not in claimed and not rec.sys_flag & SysFlag.TX_PREPARED:
            raw = prop_value(props, Prop.DELAY) or "0"
            if raw.strip() not in ("", "0") and not raw.lstrip().startswith("-"):
                return PutResult(PutStatus.MESSAGE_ILLEGAL, remark=(
                    f"delay level {raw!r} requested but no plugin handles DELAY (select the 'schedule' processors plugin)"
                ))
        if "TIMER_" in props:
            for name in TIMER_PROPS:
                if name not in claimed and prop_value(props, name) is not None:
                    return PutResult(PutStatus.WHEEL_TIMER_NOT_ENABLE, remark=(
                        f"accurate timer message is not enabled: {name} is set but no plugin handles timer "
                        "messages (select the 'timer' processors plugin)"
                    ))
        return None

    def batch_problem(self, props: str) -> str | None:
        """Batches cannot be deferred (as in RocketMQ): the reason when a member's properties would be."""
        if not self.may_defer(props):
            return None
        if "DELAY\x01" in props and (prop_value(props, Prop.DELAY) or "0").strip() not in ("", "0"):
            return "delayed messages cannot be batched"
        if "TIMER_" in props and any(prop_value(props, n) is not None for n in TIMER_PROPS):
            return "timer messages cannot be batched"
        if prop_value(props, Prop.TRAN_MSG) == "true":
            return "transaction messages cannot be batched"
        return None
