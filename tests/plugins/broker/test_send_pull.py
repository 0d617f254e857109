"""Send and pull processors over TCP against an in-process broker (memory store)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.common import encode_properties
from rmq.protocol.message import decode_message, decode_messages, decode_offset_msg_id, encode_batch

pytestmark = pytest.mark.anyio


async def test_send_response_fields_and_view_by_id(broker_env: Any) -> None:
    async with broker_env() as env:
        r = await env.send("T1", b"hello", tags="TagA", keys="k1 k2", props={"u": "v"}, queue_id=2)
        assert r.code == ResponseCode.SUCCESS, r.remark
        # every value a string; the fields C++ needs all present
        assert set(r.ext) >= {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"}
        assert all(isinstance(v, str) for v in r.ext.values())
        assert r.ext["queueId"] == "2" and r.ext["queueOffset"] == "0"
        assert r.ext["MSG_REGION"] == "DefaultRegion" and r.ext["TRACE_ON"] == "true"
        ip, port, phys = decode_offset_msg_id(r.ext["msgId"])
        assert (ip, port) == ("127.0.0.1", env.broker.port)
        v = await env.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys})
        assert v.code == 0
        msg = decode_message(v.body)
        assert msg.body == b"hello" and msg.topic == "T1" and msg.queue_id == 2
        assert msg.properties["TAGS"] == "TagA" and msg.properties["u"] == "v"
        assert msg.offset_msg_id == r.ext["msgId"] and msg.store_host == env.addr
        miss = await env.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": 10**9})
        assert miss.code == ResponseCode.SYSTEM_ERROR


async def test_send_v2_and_batches(broker_env: Any) -> None:
    async with broker_env() as env:
        r = await env.send("T2", b"v2", code=RequestCode.SEND_MESSAGE_V2, tags="x")
        assert r.code == 0 and r.ext["queueOffset"] == "0"
        items = [(f"b{i}".encode(), 0, encode_properties({"UNIQ_KEY": f"U{i}", "TAGS": "t"})) for i in range(3)]
        r = await env.send("T2", encode_batch(items), code=RequestCode.SEND_BATCH_MESSAGE)
        assert r.code == 0, r.remark
        ids = r.ext["msgId"].split(",")
        assert len(ids) == 3 and r.ext["queueOffset"] == "1"
        # C++ 1.2.3: code 10 with batch "1"
        r = await env.send("T2", encode_batch(items), batch="1")
        assert r.code == 0 and len(r.ext["msgId"].split(",")) == 3 and r.ext["queueOffset"] == "4"
        p = await env.pull("T2", 0, 0)
        msgs = decode_messages(p.body)
        assert [m.body for m in msgs] == [b"v2", b"b0", b"b1", b"b2", b"b0", b"b1", b"b2"]
        assert [m.queue_offset for m in msgs] == list(range(7))
        assert msgs[2].properties["UNIQ_KEY"] == "U1"
        # a batch's own properties (MessageBatch's WAIT=true) stay on every member as 4.9 stores them (its
        # batch encoder appends them whole); a single message's WAIT=true is dropped (9 bytes saved)
        r = await env.send("T2", encode_batch(items), code=RequestCode.SEND_BATCH_MESSAGE, props={"WAIT": "true"})
        one = await env.send("T2", b"one", props={"WAIT": "true"})
        assert r.code == one.code == 0
        kept = decode_messages((await env.pull("T2", 0, 7)).body)
        assert [m.properties.get("WAIT") for m in kept] == ["true", "true", "true", None]
        # so do a delayed message's and a half message's: 4.9 encodes their properties again after the fact
        r = await env.send("T2", b"later", props={"WAIT": "true", "DELAY": "1"})
        assert r.code == 0
        held = decode_messages((await env.pull("SCHEDULE_TOPIC_XXXX", 0, 0)).body)
        assert [m.properties.get("WAIT") for m in held] == ["true"]
        bad = await env.send("T2", b"\x00\x00\x00\x30garbage", batch="1")
        assert bad.code == ResponseCode.MESSAGE_ILLEGAL


async def test_send_validation(broker_env: Any) -> None:
    async with broker_env() as env:
        r = await env.send("T3", b"x" * (4 * 1024 * 1024 + 1))
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "body size" in r.remark
        r = await env.send("T" * 200, b"x")  # 4.9's TopicValidator: SYSTEM_ERROR
        assert r.code == ResponseCode.SYSTEM_ERROR and "127" in r.remark
        r = await env.send("bad topic!", b"x")
        assert r.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in r.remark
        r = await env.send("T3", b"x", props={"big": "y" * 33000})
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "properties" in r.remark
        r = await env.send("T3", b"x", queue_id=4)
        assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[4]" in r.remark
        r = await env.send("SCHEDULE_TOPIC_XXXX", b"x")
        assert r.code == ResponseCode.NO_PERMISSION
        r = await env.send("T3", b"x", props={"TRAN_MSG": "true"})
        assert r.code == ResponseCode.NO_PERMISSION and "transaction" in r.remark
        r = await env.call(RequestCode.SEND_MESSAGE, {"topic": "T3"})
        assert r.code == ResponseCode.SYSTEM_ERROR and "queueId" in r.remark
        r = await env.send("T3", b"ok")
        assert r.code == 0


async def test_missing_topic_without_auto_create(broker_env: Any) -> None:
    async with broker_env(autoCreateTopicEnable=False) as env:
        r = await env.send("NoSuchTopic", b"x")
        assert r.code == ResponseCode.TOPIC_NOT_EXIST and "NoSuchTopic" in r.remark
        assert "TBW102" not in env.broker.topics.table
        assert (await env.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": "Made", "defaultTopic": "TBW102", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6,
            "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})).code == 0
        assert (await env.send("Made", b"x", queue_id=1)).code == 0
        route = await env.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Made"}, addr=env.ns_addr)
        assert route.code == 0 and b'"readQueueNums":2' in route.body


async def test_pull_status_table(broker_env: Any) -> None:
    async with broker_env() as env:
        assert (await env.send("P", b"first")).code == 0  # creates P with 4 queues
        # unknown/empty queue: offset 0 -> 19 (next 0), other offsets -> 21 with next 0
        r = await env.pull("P", 1, 0)
        assert r.code == ResponseCode.PULL_NOT_FOUND and r.ext["nextBeginOffset"] == "0"
        r = await env.pull("P", 1, 5)
        assert r.code == ResponseCode.PULL_OFFSET_MOVED and r.ext["nextBeginOffset"] == "0"
        for i in range(2):
            await env.send("P", f"m{i}".encode())
        r = await env.pull("P", 0, 0)
        assert r.code == 0 and r.ext["nextBeginOffset"] == "3" and r.ext["maxOffset"] == "3"
        assert r.ext["minOffset"] == "0" and r.ext["suggestWhichBrokerId"] == "0"
        assert len(decode_messages(r.body)) == 3
        r = await env.pull("P", 0, 3)  # offset == max
        assert r.code == ResponseCode.PULL_NOT_FOUND and r.ext["nextBeginOffset"] == "3"
        r = await env.pull("P", 0, 9)  # offset > max: a DIFFERENT next offset
        assert r.code == ResponseCode.PULL_OFFSET_MOVED and r.ext["nextBeginOffset"] == "3"
        r = await env.pull("P", 0, 1, max_nums=1)
        assert r.code == 0 and r.ext["nextBeginOffset"] == "2"
        r = await env.pull("P", 9, 0)
        assert r.code == ResponseCode.SYSTEM_ERROR and "queueId[9]" in r.remark
        r = await env.pull("Nope", 0, 0)
        assert r.code == ResponseCode.TOPIC_NOT_EXIST


async def test_pull_tag_filter_and_subscription_from_heartbeat(broker_env: Any) -> None:
    async with broker_env() as env:
        for tag in ("TagA", "TagB", "TagA", "TagC"):
            await env.send("F", tag.encode(), tags=tag)
        r = await env.pull("F", 0, 0, sub="TagA || TagC")
        assert [m.body for m in decode_messages(r.body)] == [b"TagA", b"TagA", b"TagC"]
        r = await env.pull("F", 0, 0, sub="TagZ")
        assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY and r.ext["nextBeginOffset"] == "4"
        # no SUBSCRIPTION flag and no heartbeat: 24
        r = await env.pull("F", 0, 0, group="G2", sub=None)
        assert r.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
        # C++-style heartbeat: integer enums, string subVersion, bogus codeSet, omitted arrays
        hb = ('{"clientID":"1-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,'
              '"groupName":"G2","messageModel":1,"subscriptionDataSet":[{"codeSet":[0],"subString":"TagB",'
              '"subVersion":"1700000000000","tagsSet":["TagB"],"topic":"F"}]}]}')
        assert (await env.call(RequestCode.HEART_BEAT, body=hb.encode())).code == 0
        r = await env.pull("F", 0, 0, group="G2", sub=None)
        assert [m.body for m in decode_messages(r.body)] == [b"TagB"]
        r = await env.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G2"})
        assert r.code == 0 and b"1-127.0.0.1@DEFAULT" in r.body
        assert "%RETRY%G2" in env.broker.topics.table
        r = await env.pull("F", 0, 0, sub="a = 1", expression_type="SQL92")
        assert r.code == ResponseCode.SYSTEM_ERROR and "SQL92" in r.remark


async def test_sql92_filter_when_enabled(broker_env: Any) -> None:
    async with broker_env(enablePropertyFilter=True) as env:
        for i in range(4):
            await env.send("S", str(i).encode(), props={"n": str(i)})
        r = await env.pull("S", 0, 0, sub="n >= 2", expression_type="SQL92")
        assert [m.body for m in decode_messages(r.body)] == [b"2", b"3"]
        r = await env.pull("S", 0, 0, sub="n >>> 2", expression_type="SQL92")
        assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


async def until_held(env: Any) -> None:
    """Give a just-started long poll up to a second to be parked by the broker."""
    for _ in range(100):
        if env.broker.hold.held:
            return
        await anyio.sleep(0.01)


async def test_long_polling_wakes_on_arrival_and_times_out(broker_env: Any) -> None:
    async with broker_env() as env:
        await env.send("L", b"0")
        result: dict[str, Any] = {}

        async def held() -> None:
            t0 = time.monotonic()
            result["resp"] = await env.pull("L", 0, 1, suspend_ms=10_000)
            result["t"] = time.monotonic() - t0

        async with anyio.create_task_group() as tg:
            tg.start_soon(held)
            await until_held(env)
            assert env.broker.hold.held == 1
            # a message to another queue or a non-matching filter does not wake it
            await env.send("L", b"other-queue", queue_id=1)
            await anyio.sleep(0.1)
            assert "resp" not in result
            t_put = time.monotonic()
            await env.send("L", b"1")
        assert result["resp"].code == 0
        assert [m.body for m in decode_messages(result["resp"].body)] == [b"1"]
        assert time.monotonic() - t_put < 0.5
        # hold expires: 19 after about the requested time, offset unchanged
        t0 = time.monotonic()
        r = await env.pull("L", 0, 2, suspend_ms=300)
        assert r.code == ResponseCode.PULL_NOT_FOUND and r.ext["nextBeginOffset"] == "2"
        assert 0.25 < time.monotonic() - t0 < 2
        assert env.broker.hold.held == 0


async def test_long_poll_filter_does_not_wake_on_other_tags(broker_env: Any) -> None:
    async with broker_env() as env:
        await env.send("LF", b"a", tags="A")
        result: dict[str, Any] = {}

        async def held() -> None:
            result["resp"] = await env.pull("LF", 0, 1, suspend_ms=10_000, sub="B")

        async with anyio.create_task_group() as tg:
            tg.start_soon(held)
            await until_held(env)
            await env.send("LF", b"a2", tags="A")
            await anyio.sleep(0.1)
            assert "resp" not in result
            await env.send("LF", b"b", tags="B")
        assert [m.body for m in decode_messages(result["resp"].body)] == [b"b"]


async def test_commit_offset_flag_and_offset_queries(broker_env: Any) -> None:
    async with broker_env() as env:
        for i in range(3):
            await env.send("O", str(i).encode())
        # fresh group, fresh queue: SUCCESS 0 (not QUERY_NOT_FOUND)
        r = await env.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "O", "queueId": 0})
        assert r.code == 0 and r.ext["offset"] == "0"
        await env.pull("O", 0, 2, group="G", commit=2)
        r = await env.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "O", "queueId": 0})
        assert r.ext["offset"] == "2"
        assert (await env.call(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": "G", "topic": "O", "queueId": 0, "commitOffset": 3})).code == 0
        r = await env.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G", "topic": "O", "queueId": 0})
        assert r.ext["offset"] == "3"
        assert (await env.call(RequestCode.GET_MAX_OFFSET, {"topic": "O", "queueId": 0})).ext["offset"] == "3"
        assert (await env.call(RequestCode.GET_MIN_OFFSET, {"topic": "O", "queueId": 0})).ext["offset"] == "0"
        r = await env.call(RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": "O", "queueId": 0})
        assert abs(int(r.ext["timestamp"]) - time.time() * 1000) < 60_000
        r = await env.call(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "O", "queueId": 0, "timestamp": 0})
        assert r.code == 0 and r.ext["offset"] == "0"
        r = await env.call(RequestCode.GET_ALL_CONSUMER_OFFSET)
        assert b'"O@G":{0:3}' in r.body


async def test_store_full_and_busy_answers(broker_env: Any) -> None:
    async with broker_env(store="mmap") as env:
        assert (await env.send("Full", b"x")).code == 0
        store = env.broker.store
        store.disk_usage_probe = lambda: 0.99  # the mmap store refuses puts past diskSpaceWarningLevelRatio
        store.check_disk()
        r = await env.send("Full", b"x")
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk" in r.remark
        store.disk_usage_probe = lambda: 0.10
        store.check_disk()
        assert (await env.send("Full", b"x")).code == 0
    async with broker_env(sendThreadPoolQueueCapacity=0) as env:
        r = await env.send("Busy", b"x")
        assert r.code == ResponseCode.SYSTEM_BUSY and "flow control" in r.remark


async def test_short_polling_when_long_polling_disabled(broker_env: Any) -> None:
    async with broker_env(longPollingEnable=False, shortPollingTimeMills=200) as env:
        await env.send("SP", b"0")
        t0 = time.monotonic()
        r = await env.pull("SP", 0, 1, suspend_ms=10_000)
        assert r.code == ResponseCode.PULL_NOT_FOUND and 0.15 < time.monotonic() - t0 < 2


class SlaveDouble:
    """A third-party replication plugin as the hookspec describes it (a test double, not the SUT)."""

    def __init__(self) -> None:
        self.available = False
        self.acked = True
        self.waited: list[int] = []
        self.entered = False

    def rmq_replication_make_service(self, kernel: Any, store: Any) -> Any:
        return self

    async def __aenter__(self) -> SlaveDouble:
        self.entered = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.entered = False

    @property
    def slave_available(self) -> bool:
        return self.available

    async def wait_replicated(self, end_offset: int) -> bool:
        self.waited.append(end_offset)
        return self.acked

    port = 0

    def update_master_address(self, addr: str | None) -> None:
        pass

    def set_role(self, role: str, master_address: str = "", broker_id: int = -1) -> None:
        pass

    def in_sync(self, max_lag_ms: int, epoch_start: int) -> set[int]:
        return set()

    async def wait_acked_by(self, broker_ids: set[int], end_offset: int) -> bool:
        return True

    def stats(self) -> dict[str, object]:
        return {"double": True}


async def test_sync_master_waits_for_the_slave(tmp_path: Any) -> None:
    from rmq.kernel.markers import hookimpl

    class Plugin(SlaveDouble):
        rmq_replication_make_service = hookimpl(SlaveDouble.rmq_replication_make_service)

    from rmq.kernel.hookspecs.remoting import RemotingConfig
    from rmq.plugins.broker import BrokerPlugin
    from rmq.plugins.memory import MemoryStoragePlugin
    from rmq.plugins.remoting_tcp import TcpRemotingClient, TcpRemotingPlugin
    from rmq.protocol.command import RemotingCommand
    from rmq.testing import make_kernel

    slave = Plugin()
    conf = {"broker": {"listenHost": "127.0.0.1", "listenPort": 0, "brokerIP1": "127.0.0.1",
                       "storePathRootDir": str(tmp_path), "brokerRole": "SYNC_MASTER"}}
    kernel = make_kernel([TcpRemotingPlugin({}), MemoryStoragePlugin({}), slave, BrokerPlugin({})], conf)
    async with kernel, TcpRemotingClient(RemotingConfig(name="t")) as client:
        b = kernel.services["broker"]
        assert slave.entered and b.replication is slave
        ext = {"producerGroup": "PG", "topic": "Rep", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
               "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": ""}

        async def send() -> RemotingCommand:
            return await client.invoke(b.broker_addr, RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, b"x"), 5)

        r = await send()
        assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE and r.ext["msgId"]  # stored, answered like Java
        slave.available, slave.acked = True, False
        r = await send()
        assert r.code == ResponseCode.FLUSH_SLAVE_TIMEOUT and r.ext["queueOffset"] == "1"
        slave.acked = True
        r = await send()
        assert r.code == 0 and slave.waited[-1] > slave.waited[0]
    assert not slave.entered


async def test_slave_and_read_only_brokers_refuse_writes(broker_env: Any) -> None:
    async with broker_env(brokerRole="SLAVE", brokerId=1) as env:
        r = await env.send("S", b"x")
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in r.remark
        assert not any(type(p).__name__ == "SchedulePlugin" and p.service for p in env.kernel.pm.get_plugins())
    async with broker_env(brokerPermission=4) as env:
        # 4.9's msgCheck: a read-only broker refuses order topics only (routes keep other writers away);
        # its send-back refuses every retry
        r = await env.send("S", b"x")
        assert r.code == 0, r.remark
        r = await env.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": 0, "group": "G", "delayLevel": 0})
        assert r.code == ResponseCode.NO_PERMISSION
