"""The operator's request codes on a real rmqd: offset resets pushed to live consumers, calls forwarded
to a consumer, per-topic and per-group statistics, who consumes what, consume queue inspection, store
maintenance and the name server's own configuration."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import pytest

from rmq.client import Admin, Message, Producer, PushConsumer
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.testing.daemon import RmqdProcess

pytestmark = pytest.mark.anyio

FAST = {"rebalance_interval": 1.0, "heartbeat_interval": 1.0, "persist_interval": 0.2, "pull_retry_delay": 0.2}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def call(addr: str, code: int, ext: dict[str, str] | None = None, body: bytes | None = None) -> RemotingCommand:
    async with TcpRemotingClient(RemotingConfig(name="ops")) as c:
        return await c.invoke(addr, RemotingCommand.request(code, ext or {}, body or b""), 10)


async def wait_for(pred: Any, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout * 10)):
        if pred() or time.monotonic() > deadline:
            break
        await anyio.sleep(0.1)
    assert pred(), what


async def test_reset_offset_reaches_live_consumers_and_stats_count(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    ns, addr = proc.namesrv_addr, proc.broker_addr
    async with Admin(ns) as a:
        await a.create_topic("OpsT", 2)
    sent_at = int(time.time() * 1000)
    async with Producer("OPS_P", ns) as p:
        ids = [(await p.send(Message("OpsT", b"m%d" % i, keys=f"k{i}"))) for i in range(10)]
    seen: list[bytes] = []

    async def listen(msg: Any) -> None:
        seen.append(msg.body)

    # nobody online: the broker says so, and the admin commits the offsets itself
    r = await call(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                   {"topic": "OpsT", "group": "OPS_G", "timestamp": str(sent_at), "isForce": "true"})
    assert r.code in (ResponseCode.CONSUMER_NOT_ONLINE, ResponseCode.SYSTEM_ERROR)
    async with PushConsumer("OPS_G", ns, listener=listen, consume_from_where="FIRST_OFFSET", **FAST) as c:
        c.subscribe("OpsT", "*")
        await wait_for(lambda: len(seen) == 10, "all ten consumed")
        async with Admin(ns) as a:
            for _ in range(50):  # committed offsets reach the broker within persist_interval
                if sum(p.committed for p in await a.consumer_progress("OPS_G", "OpsT")) == 10:
                    break
                await anyio.sleep(0.1)
            # a live member: the broker pushes RESET_CONSUMER_CLIENT_OFFSET and the consumer starts over
            table = await a.reset_offset_by_timestamp("OPS_G", "OpsT", sent_at - 1000)
            assert sorted(table.values()) == [0, 0]
            await wait_for(lambda: len(seen) == 20, "consumed again after the reset")
            assert sorted(seen[10:]) == sorted(seen[:10])
            # per-member offsets (223) and running info (307) asked of the consumer through the broker
            client_id = (await a.consumer_connection("OPS_G"))["connectionSet"][0]["clientId"]
            status = await a.consumer_status("OPS_G", "OpsT")
            assert list(status) == [client_id] and len(status[client_id]) == 2
            info = await a.consumer_running_info("OPS_G", client_id)
            assert info["properties"]["clientId"] == client_id
            # consume directly (309): the stored message handed to that member's listener
            result = await a.consume_message_directly("OPS_G", client_id, ids[3].offset_msg_id, "OpsT")
            assert result["consumeResult"] == "CR_SUCCESS"
            assert seen[-1] == b"m3"
            with pytest.raises(Exception, match="not online"):
                await a.consume_message_directly("OPS_G", "nobody@1", ids[3].offset_msg_id)
            # who consumes the topic, and how far behind in time
            assert "OPS_G" in await a.topic_consumed_by("OpsT")
            spans = await a.consume_time_span("OpsT", "OPS_G")
            assert len(spans) == 2 and all(s["maxTimeStamp"] >= s["minTimeStamp"] > 0 for s in spans)
            # statistics per topic and per topic@group (sampled once a second)
            await anyio.sleep(1.5)
            put = await a.view_broker_stats(addr, "TOPIC_PUT_NUMS", "OpsT")
            assert put["statsMinute"]["sum"] == 10 and put["statsMinute"]["tps"] > 0
            size = await a.view_broker_stats(addr, "TOPIC_PUT_SIZE", "OpsT")
            assert size["statsMinute"]["sum"] == sum(len(b"m%d" % i) for i in range(10))
            got = await a.view_broker_stats(addr, "GROUP_GET_NUMS", "OpsT@OPS_G")
            assert got["statsMinute"]["sum"] >= 20
            with pytest.raises(Exception, match="not exist"):
                await a.view_broker_stats(addr, "TOPIC_PUT_NUMS", "NoSuchTopic")
            bstats = await a.broker_consume_stats(addr)
            assert bstats["totalDiff"] == 0
            assert sum(w["consumerOffset"] for w in bstats["groups"]["OPS_G"].values()) == 10


async def test_lookups_clone_and_consume_queue(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    ns, addr = proc.namesrv_addr, proc.broker_addr
    async with Admin(ns) as a:
        await a.create_topic("OpsL", 1)
        async with Producer("OPS_LP", ns) as p:
            for i in range(5):
                await p.send(Message("OpsL", b"x%d" % i, tags="TagA" if i % 2 else "TagB"))
        r = await call(addr, RequestCode.UPDATE_CONSUMER_OFFSET,
                       {"consumerGroup": "SRC", "topic": "OpsL", "queueId": "0", "commitOffset": "3"})
        assert r.code == 0
        await a.clone_group_offset("SRC", "DEST", "OpsL")
        assert [p.committed for p in await a.consumer_progress("DEST", "OpsL")] == [3]
        # correction offset: the lowest committed offset among other groups; MAX when the compared one is behind
        r = await call(addr, RequestCode.QUERY_CORRECTION_OFFSET, {"topic": "OpsL", "filterGroups": "DEST",
                                                                   "compareGroup": "SRC"})
        assert json.loads(r.body) == {"correctionOffsets": {"0": 3}}
        cq = await a.query_consume_queue(addr, "OpsL", 0, 1, 3)
        assert cq["minQueueIndex"] == 0 and cq["maxQueueIndex"] == 5 and len(cq["queueData"]) == 3
        assert all(u["physicSize"] > 0 for u in cq["queueData"])
        bad = await a.query_consume_queue(addr, "OpsL", 0, 9, 3)
        assert "queueData" not in bad
        r = await call(addr, RequestCode.QUERY_CONSUME_QUEUE, {"topic": "OpsL", "queueId": "7", "index": "0",
                                                               "count": "1"})
        assert r.code == ResponseCode.SYSTEM_ERROR and "7@OpsL is not exist" in r.remark
        tc = await a.topic_config(addr, "OpsL")
        assert tc["topicName"] == "OpsL" and tc["readQueueNums"] == 1 and "mappingDetail" in tc
        r = await call(addr, RequestCode.GET_TOPIC_CONFIG, {"topic": "Nope"})
        assert r.code == ResponseCode.TOPIC_NOT_EXIST
        r = await call(addr, RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG, {"group": "NoGroup"})
        assert r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        await call(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                   json.dumps({"groupName": "OPS_SG", "retryMaxTimes": 5}).encode())
        assert (await a.group_config(addr, "OPS_SG"))["retryMaxTimes"] == 5
        assert "SCHEDULE_TOPIC_XXXX" in await a.system_topics_of_broker(addr)
        producers = await a.all_producer_info(addr)
        assert isinstance(producers, dict)


async def test_store_maintenance_codes(rmqd_factory: Any, tmp_path: Any) -> None:
    proc: RmqdProcess = rmqd_factory(broker_conf={"mappedFileSizeCommitLog": 64 * 1024, "fileReservedTime": 0})
    ns, addr = proc.namesrv_addr, proc.broker_addr
    async with Admin(ns) as a:
        await a.create_topic("OpsKeep", 1)
        await a.create_topic("OpsGone", 1)
        async with Producer("OPS_MP", ns) as p:
            for _ in range(4):
                await p.send(Message("OpsGone", b"g" * 1000))
            for _ in range(200):
                await p.send(Message("OpsKeep", b"k" * 1000))
    # the topic vanishes from the broker's table while its queues stay in the store
    proc.stop()
    topics = proc.workdir / "store" / "config" / "topics.json"
    doc = json.loads(topics.read_text())
    del doc["topicConfigTable"]["OpsGone"]
    topics.write_text(json.dumps(doc))
    proc.start()
    cq_dir = proc.workdir / "store" / "consumequeue"
    assert (cq_dir / "OpsGone").exists()
    assert (await call(addr, RequestCode.CLEAN_UNUSED_TOPIC)).code == 0
    assert not (cq_dir / "OpsGone").exists() and (cq_dir / "OpsKeep").exists()
    # manual delete: every segment older than fileReservedTime (0 h) but the newest goes, whatever deleteWhen
    before = await call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    min_before = int(json.loads(before.body)["table"]["commitLogMinOffset"])
    assert (await call(addr, RequestCode.DELETE_EXPIRED_COMMITLOG)).code == 0
    after = await call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    assert int(json.loads(after.body)["table"]["commitLogMinOffset"]) > min_before
    assert (await call(addr, RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE)).code == 0


async def test_namesrv_config_codes(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    ns = proc.namesrv_addr
    r = await call(ns, RequestCode.GET_NAMESRV_CONFIG)
    props = dict(ln.split("=", 1) for ln in r.body.decode().splitlines())
    assert props["orderMessageEnable"] == "false" and props["listenPort"] == str(proc.namesrv_port)
    assert (await call(ns, RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=true")).code == 0
    r = await call(ns, RequestCode.GET_NAMESRV_CONFIG)
    assert "orderMessageEnable=true" in r.body.decode()
    r = await call(ns, RequestCode.UPDATE_NAMESRV_CONFIG, body=b"listenPort=1")
    assert r.code == ResponseCode.SYSTEM_ERROR and "only at start" in r.remark
    r = await call(ns, RequestCode.UPDATE_NAMESRV_CONFIG, body=b"noSuchKey=1")
    assert r.code == ResponseCode.SYSTEM_ERROR and "unknown namesrv setting" in r.remark
    r = await call(ns, RequestCode.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=maybe")
    assert r.code == ResponseCode.SYSTEM_ERROR


async def test_runtime_info_has_rocketmqs_keys(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    async with Producer("OPS_RT", proc.namesrv_addr) as p:
        for _ in range(3):
            await p.send(Message("OpsRt", b"x" * 100))
    await anyio.sleep(1.2)
    table = json.loads((await call(proc.broker_addr, RequestCode.GET_BROKER_RUNTIME_INFO)).body)["table"]
    keys = ("brokerActive brokerVersionDesc bootTimestamp runtime putTps getTransferedTps getTransferredTps "
            "getFoundTps getMissTps getTotalTps msgPutTotalTodayNow msgGetTotalTodayNow msgPutTotalTodayMorning "
            "msgGetTotalTodayMorning msgPutTotalYesterdayMorning msgGetTotalYesterdayMorning dispatchBehindBytes "
            "pageCacheLockTimeMills earliestMessageTimeStamp startAcceptSendRequestTimeStamp commitLogDirCapacity "
            "commitLogDiskRatio consumeQueueDiskRatio commitLogMinOffset commitLogMaxOffset putMessageTimesTotal "
            "putMessageSizeTotal putMessageAverageSize remainHowManyDataToFlush sendThreadPoolQueueSize "
            "sendThreadPoolQueueCapacity pullThreadPoolQueueSize pullThreadPoolQueueCapacity "
            "EndTransactionQueueSize").split()
    missing = [k for k in keys if k not in table]
    assert not missing, missing
    assert int(table["putMessageTimesTotal"]) >= 3 and table["brokerActive"] == "true"
    assert abs(int(table["earliestMessageTimeStamp"]) - time.time() * 1000) < 600_000
    assert table["commitLogDirCapacity"].startswith("Total : ") and table["runtime"].startswith("[ 0 days")


async def test_namesrv_config_change_is_written_to_the_file(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory()
    assert (await call(proc.namesrv_addr, RequestCode.UPDATE_NAMESRV_CONFIG,
                       body=b"brokerChannelExpiredTime=90000")).code == 0
    assert "brokerChannelExpiredTime = 90000" in proc.config_path.read_text()  # noqa: ASYNC240
