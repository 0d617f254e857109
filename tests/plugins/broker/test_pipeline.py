"""The put pipeline: stages from plugins re-route deferred messages; unclaimed deferrals are refused."""

from __future__ import annotations

from typing import Any

import pytest

from rmq.kernel.markers import hookimpl
from rmq.kernel.model import MessageRecord, PutResult, PutStatus
from rmq.kernel.plugin_manager import PluginError
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.common import encode_properties, prop_value, set_props
from rmq.protocol.message import decode_messages, encode_batch

pytestmark = pytest.mark.anyio


class StageTimers:
    """A third-party stage: TIMER_DELIVER_MS messages go to a staging topic, "never" is refused."""

    trigger = "TIMER_DELIVER_MS"
    priority = 200

    def route(self, rec: MessageRecord) -> PutResult | None:
        if prop_value(rec.properties, "TIMER_DELIVER_MS") == "never":
            return PutResult(PutStatus.MESSAGE_ILLEGAL, remark="never is not a time")
        rec.properties = set_props(rec.properties, {"REAL_TOPIC": rec.topic})
        rec.topic = "Staged"
        rec.queue_id = 0
        return None


class TimerPlugin:
    def __init__(self, stage: Any = None) -> None:
        self.stage = stage or StageTimers()

    @hookimpl
    def rmq_broker_put_stages(self, kernel: Any, broker: Any) -> list[Any]:
        return [self.stage]


async def test_unclaimed_deferrals_are_refused_and_consume_nothing(broker_env: Any) -> None:
    async with broker_env(schedule=False, store="mmap") as env:
        assert (await env.send("D", b"first")).ext["queueOffset"] == "0"
        r = await env.send("D", b"later", props={"DELAY": "3"})
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "no plugin handles DELAY" in r.remark
        r = await env.send("D", b"later", props={"TIMER_DELIVER_MS": "1999999999999"})
        assert r.code == ResponseCode.SYSTEM_ERROR and "timer message is not enabled" in r.remark
        r = await env.send("D", b"now", props={"DELAY": "0"})  # level 0: not deferred
        assert r.code == 0 and r.ext["queueOffset"] == "1"
        r = await env.send("D", b"tx", props={"TRAN_MSG": "true"})
        assert r.code == ResponseCode.NO_PERMISSION and "transaction" in r.remark


async def test_a_plugin_stage_reroutes_and_refuses(broker_env: Any) -> None:
    async with broker_env(extra_plugins=(TimerPlugin(),)) as env:
        r = await env.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "Staged", "readQueueNums": 1, "writeQueueNums": 1})
        assert r.code == 0
        r = await env.send("T", b"timed", props={"TIMER_DELIVER_MS": "1999999999999"})
        assert r.code == 0, r
        msgs = decode_messages((await env.pull("Staged", 0, 0)).body)
        assert [m.body for m in msgs] == [b"timed"] and msgs[0].properties["REAL_TOPIC"] == "T"
        r = await env.send("T", b"x", props={"TIMER_DELIVER_MS": "never"})
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "never is not a time" in r.remark
        # the schedule plugin's stage still parks DELAY messages
        r = await env.send("T", b"delayed", props={"DELAY": "2"})
        assert r.code == 0 and (await env.pull("SCHEDULE_TOPIC_XXXX", 1, 0)).code == 0
        batch = encode_batch([(b"a", 0, encode_properties({"DELAY": "2"}))])
        r = await env.send("T", batch, batch="1")
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "delayed messages cannot be batched" in r.remark


async def test_two_stages_claiming_one_property_refuse_start(broker_env: Any) -> None:
    class Clash(StageTimers):
        pass

    with pytest.raises(PluginError, match="both claim property 'TIMER_DELIVER_MS'"):
        async with broker_env(extra_plugins=(TimerPlugin(), TimerPlugin(Clash()))):
            pass
