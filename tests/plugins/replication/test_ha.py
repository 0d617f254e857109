"""Master/slave replication between real rmqd processes on loopback (a name server, a master, slaves).

Byte-identical commitlogs, SYNC_MASTER acknowledgements that survive a SIGKILL of the
master, SLAVE_NOT_AVAILABLE and FLUSH_SLAVE_TIMEOUT, a corrupted frame, a slave restart,
a diverged slave, metadata sync and reads from a slave.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import anyio

from rmq.client import Admin, MessageQueue, PullConsumer, PullStatus
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.message import decode_offset_msg_id
from rmq.testing.daemon import call, eventually, runtime_info

from .conftest import commitlog, send, send_ext


def connection_count(master: Any) -> int:
    return int(runtime_info(master.broker_addr).get("haConnectionCount", 0))


def slave_count(master: Any) -> int:
    """Slaves connected and reported (what SYNC_MASTER needs before a send can succeed)."""
    info = runtime_info(master.broker_addr)
    slaves = info.get("haSlaves") or []
    if isinstance(slaves, str):
        slaves = json.loads(slaves)
    return sum(1 for s in slaves if int(s.get("slaveAckOffset", -1)) >= 0)


def caught_up(master: Any, slave: Any) -> bool:
    m = int(runtime_info(master.broker_addr)["commitLogMaxOffset"])
    return m > 0 and int(runtime_info(slave.broker_addr)["commitLogMaxOffset"]) == m


def test_sync_master_acks_survive_a_master_crash(ha: Any) -> None:
    master = ha.master()
    slave = ha.slave()
    eventually(lambda: slave_count(master) == 1, 20, "slave connected")
    acked: list[int] = []
    codes: dict[int, int] = {}
    stop = threading.Event()

    async def storm() -> None:
        async with TcpRemotingClient(RemotingConfig(name="storm")) as c:
            async def one(k: int) -> None:
                i = 0
                while not stop.is_set():
                    body = f"m{k}-{i}-".encode() * 20
                    i += 1
                    try:
                        r = await c.invoke(master.broker_addr,
                                           RemotingCommand.request(RequestCode.SEND_MESSAGE, send_ext("Storm", k % 4),
                                                                   body), 3)
                    except Exception:
                        return  # the master is gone
                    codes[r.code] = codes.get(r.code, 0) + 1
                    if r.code == 0:
                        acked.append(decode_offset_msg_id(r.ext["msgId"])[2])

            async with anyio.create_task_group() as tg:
                for k in range(8):
                    tg.start_soon(one, k)

    t = threading.Thread(target=anyio.run, args=(storm,))
    t.start()
    eventually(lambda: len(acked) >= 300, 30, "messages acknowledged during the storm")
    master.kill()  # SIGKILL mid-storm
    stop.set()
    t.join(30)
    assert acked and codes.get(0) == len(acked)
    end = int(runtime_info(slave.broker_addr)["commitLogMaxOffset"])
    assert max(acked) < end  # every acknowledged record starts below the slave's end ...
    m, s = commitlog(master), commitlog(slave)
    assert s[:end] == m[:end]  # ... and the slave's log is the master's, byte for byte
    # the slave serves them: the first and the last acknowledged record by offset
    for off in (min(acked), max(acked)):
        r = call(slave.broker_addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": off})
        assert r.code == 0 and r.body == m[off : off + len(r.body)]


def test_slave_not_available_timeout_and_a_corrupt_frame(ha: Any) -> None:
    master = ha.master(slaveTimeout=800)
    r = send(master.broker_addr, "Sync", b"lonely")
    assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE and r.ext["msgId"]  # stored, no slave holds it
    proxy = ha.proxy(master.broker_port + 1)
    slave = ha.slave(haMasterAddress=proxy.addr)
    eventually(lambda: slave_count(master) == 1, 20, "slave connected through the proxy")
    eventually(lambda: send(master.broker_addr, "Sync", b"x").code == 0, 20, "a send acknowledged by the slave")
    proxy.paused.set()
    r = send(master.broker_addr, "Sync", b"stalled")
    assert r.code == ResponseCode.FLUSH_SLAVE_TIMEOUT and r.ext["msgId"]
    proxy.paused.clear()
    eventually(lambda: caught_up(master, slave), 20, "slave caught up after the stall")

    before = int(runtime_info(slave.broker_addr)["commitLogMaxOffset"])
    proxy.corrupt_next.set()
    r = send(master.broker_addr, "Sync", b"y" * 2000)
    assert r.code in (0, ResponseCode.FLUSH_SLAVE_TIMEOUT)
    assert proxy.corrupted == 1
    eventually(lambda: any("refused data from the master" in ln for ln in slave.log_lines()), 10,
               "the slave refused the corrupt frame")
    assert any("fails its body CRC" in ln for ln in slave.log_lines())
    eventually(lambda: caught_up(master, slave), 30, "slave caught up after reconnecting")
    assert int(runtime_info(slave.broker_addr)["commitLogMaxOffset"]) > before
    end = int(runtime_info(master.broker_addr)["commitLogMaxOffset"])
    assert commitlog(slave)[:end] == commitlog(master)[:end]  # the bad byte never reached the slave's log


def test_async_master_lag_closes_and_slave_restart_resumes(ha: Any) -> None:
    master = ha.master(brokerRole="ASYNC_MASTER")
    slave = ha.slave()
    eventually(lambda: slave_count(master) == 1, 20, "slave connected")
    lags: list[int] = []

    async def load(n: int, start: int) -> None:
        async with TcpRemotingClient(RemotingConfig(name="load")) as c:
            async def one(k: int) -> None:
                for i in range(start + k, start + n, 16):
                    r = await c.invoke(master.broker_addr, RemotingCommand.request(
                        RequestCode.SEND_MESSAGE, send_ext("Async", i % 4), b"%d" % i * 50), 5)
                    assert r.code == 0, r.remark

            async with anyio.create_task_group() as tg:
                for k in range(16):
                    tg.start_soon(one, k)

    sampler_stop = threading.Event()

    def sample() -> None:
        while not sampler_stop.is_set():
            try:
                info = runtime_info(master.broker_addr)
                lags.append(int(info.get("slaveFallBehindMuch", 0)))
            except Exception:
                pass
            time.sleep(0.05)

    th = threading.Thread(target=sample)
    th.start()
    anyio.run(load, 4000, 0)
    sampler_stop.set()
    th.join()
    assert lags and max(lags) < 8 * 1024 * 1024  # bounded while loaded
    eventually(lambda: caught_up(master, slave), 15, "lag closes once the load stops")

    end1 = int(runtime_info(slave.broker_addr)["commitLogMaxOffset"])
    slave.stop()
    anyio.run(load, 1000, 4000)  # written while the slave is away
    slave.start()
    eventually(lambda: caught_up(master, slave), 20, "restarted slave caught up")
    assert any(f"this log ends at {end1}" in ln for ln in slave.log_lines())  # resumed from its own offset
    end = int(runtime_info(master.broker_addr)["commitLogMaxOffset"])
    assert commitlog(slave)[:end] == commitlog(master)[:end]
    # the slave built its own queues: the same max offsets per queue
    for q in range(4):
        ext = {"topic": "Async", "queueId": q}
        assert call(slave.broker_addr, RequestCode.GET_MAX_OFFSET, ext).ext["offset"] == \
            call(master.broker_addr, RequestCode.GET_MAX_OFFSET, ext).ext["offset"]


def test_a_diverged_slave_refuses_to_apply(ha: Any, rmqd_factory: Any) -> None:
    master = ha.master(brokerRole="ASYNC_MASTER")
    # a store with more bytes than the master: written by a broker of another name, then made a slave
    other = ha.broker(brokerName="other")
    for _ in range(50):
        assert send(other.broker_addr, "Mine", b"z" * 500).code == 0
    other.stop()
    before = commitlog(other)
    from rmq.testing.daemon import RmqdProcess

    conf = {"brokerRole": "SLAVE", "brokerId": 1, "haMasterAddress": f"127.0.0.1:{master.broker_port + 1}"}
    diverged = RmqdProcess(other.workdir, namesrv=False, broker_port=other.broker_port, broker_conf={
        "namesrvAddr": ha.namesrv().namesrv_addr, "mappedFileSizeCommitLog": 1024 * 1024, **conf})
    diverged.start()
    try:
        eventually(lambda: "diverged" in runtime_info(diverged.broker_addr), 20, "the slave says its log diverged")
        assert any("diverged log" in ln for ln in diverged.log_lines())
        assert any("diverged log" in ln for ln in master.log_lines())
        assert commitlog(diverged) == before  # nothing applied
    finally:
        diverged.stop()


def test_slave_syncs_metadata_and_serves_reads(ha: Any) -> None:
    master = ha.master(brokerRole="ASYNC_MASTER", slaveReadEnable=True)
    slave = ha.slave()
    for i in range(20):
        assert send(master.broker_addr, "Meta", b"%d" % i, queue_id=1).code == 0
    r = call(master.broker_addr, RequestCode.UPDATE_CONSUMER_OFFSET,
             {"consumerGroup": "CG", "topic": "Meta", "queueId": 1, "commitOffset": 7})
    assert r.code == 0
    eventually(lambda: caught_up(master, slave), 20, "slave caught up")

    def slave_offset() -> int:
        r = call(slave.broker_addr, RequestCode.QUERY_CONSUMER_OFFSET,
                 {"consumerGroup": "CG", "topic": "Meta", "queueId": 1})
        return int(r.ext.get("offset", -1)) if r.code == 0 else -1

    eventually(lambda: slave_offset() == 7, 20, "consumer offset synced to the slave")
    assert "Meta" in json.loads(call(slave.broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG).body)["topicConfigTable"]
    pull = {"consumerGroup": "CG", "topic": "Meta", "queueId": 1, "queueOffset": 7, "maxMsgNums": 32,
            "sysFlag": 4, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0,
            "expressionType": "TAG"}
    r = call(slave.broker_addr, RequestCode.PULL_MESSAGE, pull)
    assert r.code == 0 and r.ext["nextBeginOffset"] == "20"
    r = call(master.broker_addr, RequestCode.PULL_MESSAGE, pull)
    assert r.code == 0 and r.ext["suggestWhichBrokerId"] == "0"  # not lagging: stay on the master
    # the route lists master and slave with their ids
    route = json.loads(call(ha.namesrv().namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Meta"}).body)
    addrs = route["brokerDatas"][0]["brokerAddrs"]
    assert addrs == {"0": master.broker_addr, "1": slave.broker_addr}
    # a slave refuses writes with RocketMQ's code and says why
    r = send(slave.broker_addr, "Meta", b"no")
    assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in (r.remark or "")
    info = runtime_info(slave.broker_addr)
    assert info["brokerRole"] == "SLAVE" and info["masterAddr"] == f"127.0.0.1:{master.broker_port + 1}"
    minfo = runtime_info(master.broker_addr)
    slaves = json.loads(minfo["haSlaves"])

    async def via_admin() -> dict[str, str]:
        async with Admin(ha.namesrv().namesrv_addr) as admin:
            return await admin.broker_runtime_info(master.broker_addr)

    assert json.loads(anyio.run(via_admin)["haSlaves"])[0]["addr"] == slaves[0]["addr"]
    assert len(slaves) == 1 and slaves[0]["lagBytes"] == 0 and minfo["slaveFallBehindMuch"] == "0"


def test_rmq_client_follows_suggestions_and_reads_from_the_slave(ha: Any) -> None:
    """Our PullConsumer: a lagging read goes where the master suggests (the slave), and reads go on
    from the slave once the master is gone."""
    # ratio 0: every read counts as lagging, so the master suggests whichBrokerWhenConsumeSlowly (1)
    master = ha.master(brokerRole="SYNC_MASTER", slaveReadEnable=True, accessMessageInMemoryMaxRatio=0)
    slave = ha.slave()
    eventually(lambda: slave_count(master) == 1, 20, "slave connected")
    for i in range(40):
        assert send(master.broker_addr, "Follow", b"%d" % i, queue_id=0).code == 0
    eventually(lambda: "Follow" in json.loads(call(slave.broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG).body)[
        "topicConfigTable"], 20, "topic synced to the slave")

    async def go() -> None:
        async with PullConsumer("CG_FOLLOW", ha.namesrv().namesrv_addr, route_interval=1.0) as pc:
            mq = MessageQueue("Follow", "broker-a", 0)
            r = await pc.pull(mq, 0, 10)
            assert r.status is PullStatus.FOUND and r.suggest_broker_id == 1
            inst = pc.instance  # the next pull goes to the broker the master suggested
            assert inst.pull_addr("broker-a", inst.pull_from[mq]) == slave.broker_addr
            r = await pc.pull(mq, r.next_begin_offset, 10)
            assert r.status is PullStatus.FOUND and [m.body for m in r.messages] == [b"%d" % i for i in range(10, 20)]
            master.kill()
            got: list[bytes] = []
            offset = r.next_begin_offset
            with anyio.fail_after(30):
                while len(got) < 20:
                    try:
                        r = await pc.pull(mq, offset, 10)
                    except Exception:
                        await anyio.sleep(0.5)
                        continue
                    got += [m.body for m in r.messages]
                    offset = r.next_begin_offset
            assert got == [b"%d" % i for i in range(20, 40)]

    anyio.run(go)


def test_a_stalled_slave_holds_up_neither_the_master_nor_the_other_slave(ha: Any) -> None:
    # the stalled slave hears nothing, not even heartbeats: after haHousekeepingInterval it would reconnect
    # (as RocketMQ's does) and drop out of the master's list; on a busy machine the 200 sends can take that long
    quiet = {"haHousekeepingInterval": 120000}
    master = ha.master(slaveTimeout=3000, **quiet)
    proxy = ha.proxy(master.broker_port + 1)
    fast = ha.slave(brokerId=1)
    slow = ha.slave(brokerId=2, haMasterAddress=proxy.addr, **quiet)
    eventually(lambda: slave_count(master) == 2, 20, "two slaves connected")
    proxy.paused.set()  # the second slave stops taking data
    t0 = time.monotonic()
    for i in range(200):
        assert send(master.broker_addr, "Two", b"%d" % i * 100).code == 0  # the other slave acknowledges
    assert time.monotonic() - t0 < 60
    eventually(lambda: caught_up(master, fast), 10, "the fast slave kept up")
    end = int(runtime_info(master.broker_addr)["commitLogMaxOffset"])
    assert int(runtime_info(slow.broker_addr)["commitLogMaxOffset"]) < end
    lags = {s["lagBytes"] for s in json.loads(runtime_info(master.broker_addr)["haSlaves"])}
    assert 0 in lags and max(lags) > 0  # the master reports each slave's lag
    proxy.paused.clear()
    eventually(lambda: caught_up(master, slow), 20, "the stalled slave caught up once released")
    assert commitlog(slow)[:end] == commitlog(fast)[:end] == commitlog(master)[:end]


def test_the_ha_port_survives_strangers_and_drops_silent_peers(ha: Any) -> None:
    import os
    import socket

    master = ha.master(brokerRole="ASYNC_MASTER", haHousekeepingInterval=1000)
    assert send(master.broker_addr, "Strange", b"x").code == 0
    port = master.broker_port + 1
    silent = socket.create_connection(("127.0.0.1", port), timeout=5)  # connects, never reports
    eventually(lambda: connection_count(master) == 1, 5, "silent peer counted")
    eventually(lambda: connection_count(master) == 0, 10, "silent peer dropped after haHousekeepingInterval")
    silent.close()
    for payload in (os.urandom(5000), b"\xff" * 8, b"\x00" * 7, (2**62).to_bytes(8, "big") * 3):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(payload)
            s.settimeout(3)
            try:
                while s.recv(65536):
                    pass
            except (TimeoutError, OSError):
                pass
    # still serving, and a real slave still follows
    assert send(master.broker_addr, "Strange", b"y").code == 0
    slave = ha.slave()
    eventually(lambda: caught_up(master, slave), 20, "a real slave after the strangers")
    assert any("beyond this master's end" in ln or "diverged" in ln for ln in master.log_lines())


def test_the_slaves_two_reporters_never_write_at_once(ha: Any) -> None:
    """A slave reports its offset from a heartbeat task and after each chunk it applied, on one stream. Two
    sends at once raised anyio's BusyResourceError and dropped the connection: on a busy machine a
    SYNC_MASTER lost its slave mid-run (tests/compat/test_cpp_ha: 1996 of 3000 sends). A 1 ms heartbeat
    makes the overlap all but certain while data flows."""
    master = ha.master(brokerRole="ASYNC_MASTER")
    slave = ha.slave(haSendHeartbeatInterval=1)
    eventually(lambda: slave_count(master) == 1, 20, "slave connected")

    async def load() -> None:
        async with TcpRemotingClient(RemotingConfig(name="load")) as c:
            for i in range(400):
                r = await c.invoke(master.broker_addr, RemotingCommand.request(
                    RequestCode.SEND_MESSAGE, send_ext("Beat", i % 4), b"b" * 200), 5)
                assert r.code == 0, r.remark

    anyio.run(load)
    eventually(lambda: caught_up(master, slave), 20, "slave caught up")
    lost = [ln for ln in slave.log_lines() if "lost or refused" in ln]
    assert not lost, lost
