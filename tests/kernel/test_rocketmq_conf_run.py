"""A RocketMQ deployment's own files start real rmqd processes unchanged, and messages go round.

The files: the namesrv.conf / broker.conf ``/work/shared/java/run-java-broker.sh`` writes for the Java
4.9.8 broker, and the keys of 4.9.8's ``distribution/conf/broker.conf``, ``2m-noslave/broker-b.properties``
and ``2m-2s-sync/broker-a{,-s}.properties`` as they stand there. What the tests add is on the command line,
as ``mqbroker -n`` would be: loopback listeners, free ports, small segments (``--set``), the store
($RMQ_HOME). ``rmqd config --format toml`` of such a file prints TOML that loads back to the same
configuration."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import anyio
import pytest

from rmq.client import Message, MessageExt, Producer, PushConsumer
from rmq.client.testing import FAST
from rmq.kernel.config import load_config
from rmq.protocol.codes import RequestCode
from rmq.testing.daemon import RmqdProcess, call, eventually, free_port, runtime_info

pytestmark = pytest.mark.integration  # rmqd processes started from files, not through the rmqd fixtures

RUN_NAMESRV = "listenPort={port}\nkvConfigPath={d}/home/namesrv/kvConfig.json\nconfigStorePath={d}/home/namesrv/namesrv.properties\n"
RUN_BROKER = """brokerClusterName=DefaultCluster
brokerName=broker-a
brokerId=0
brokerRole=ASYNC_MASTER
namesrvAddr=127.0.0.1:{ns}
listenPort={port}
brokerIP1=127.0.0.1
storePathRootDir={d}/store
storePathCommitLog={d}/store/commitlog
flushDiskType=ASYNC_FLUSH
autoCreateTopicEnable=true
autoCreateSubscriptionGroup=true
deleteWhen=04
fileReservedTime=48
"""
DIST = {  # 4.9.8's distribution/conf files' keys (their license headers left out)
    "broker.conf": "brokerClusterName = DefaultCluster\nbrokerName = broker-a\nbrokerId = 0\ndeleteWhen = 04\n"
                   "fileReservedTime = 48\nbrokerRole = ASYNC_MASTER\nflushDiskType = ASYNC_FLUSH\n",
    "broker-b.properties": "brokerClusterName=DefaultCluster\nbrokerName=broker-b\nbrokerId=0\ndeleteWhen=04\n"
                           "fileReservedTime=48\nbrokerRole=ASYNC_MASTER\nflushDiskType=ASYNC_FLUSH\n",
    "broker-a.properties": "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=0\ndeleteWhen=04\n"
                           "fileReservedTime=48\nbrokerRole=SYNC_MASTER\nflushDiskType=ASYNC_FLUSH\n",
    "broker-a-s.properties": "brokerClusterName=DefaultCluster\nbrokerName=broker-a\nbrokerId=1\ndeleteWhen=04\n"
                             "fileReservedTime=48\nbrokerRole=SLAVE\nflushDiskType=ASYNC_FLUSH\n",
}
#: a laptop's segment sizes and loopback only; everything else is the file's
SMALL = ["broker.mappedFileSizeCommitLog=16777216", "broker.maxHashSlotNum=50000", "broker.maxIndexNum=200000",
         "broker.listenHost=127.0.0.1"]


def from_file(workdir: Path, conf: Path, *overrides: str, namesrv_port: int | None = None,
              broker_port: int | None = None) -> RmqdProcess:
    """An rmqd started with ``--config conf`` (and ``--set`` overrides), its store under ``workdir``."""
    d = RmqdProcess(workdir, namesrv=namesrv_port is not None, broker=broker_port is not None, proxy=False,
                    namesrv_port=namesrv_port, broker_port=broker_port, env={"RMQ_HOME": str(workdir / "home")})
    d.config_path = conf
    args = [a for o in overrides for a in ("--set", o)]
    d.command = lambda extra_args=(): [sys.executable, "-m", "rmq.kernel.daemon", "--config", str(conf),  # type: ignore[method-assign]
                                       *args, *extra_args]
    return d.start(timeout=90)


def namesrv(tmp_path: Path) -> tuple[RmqdProcess, int]:
    port = free_port()
    conf = tmp_path / "ns" / "namesrv.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(RUN_NAMESRV.format(port=port, d=tmp_path / "ns"))
    return from_file(tmp_path / "ns", conf, "namesrv.listenHost=127.0.0.1", namesrv_port=port), port


def round_trip(ns: str, topic: str, n: int = 20) -> None:
    """``n`` sends acknowledged SEND_OK, then a push consumer from the first offset reads every body."""
    async def go() -> set[bytes]:
        sent = {b"conf-%d" % i for i in range(n)}
        async with Producer("P_CONF", ns) as p:
            for body in sorted(sent):
                r = await p.send(Message(topic, body))
                assert r.status.name == "SEND_OK", r
        got: set[bytes] = set()
        done = anyio.Event()

        async def listener(msg: MessageExt) -> None:
            got.add(msg.body)
            if got >= sent:
                done.set()

        async with PushConsumer("C_CONF", ns, listener=listener, consume_from_where="FIRST_OFFSET", **FAST) as c:
            c.subscribe(topic)
            with anyio.move_on_after(60):
                await done.wait()
        assert got == sent
        return got

    anyio.run(go)


@pytest.mark.parametrize("name", ["run-java-broker", "broker.conf", "broker-b.properties"])
def test_a_rocketmq_broker_file_starts_rmqd_and_serves(tmp_path: Path, name: str) -> None:
    ns, ns_port = namesrv(tmp_path)
    try:
        port = free_port()
        conf = tmp_path / "b" / ("broker.conf" if name == "run-java-broker" else name)
        conf.parent.mkdir()
        if name == "run-java-broker":  # the file names its name server, port and store: nothing to add
            conf.write_text(RUN_BROKER.format(ns=ns_port, port=port, d=tmp_path / "b"))
            b = from_file(tmp_path / "b", conf, *SMALL, broker_port=port)
            assert (tmp_path / "b" / "store" / "commitlog").is_dir()
        else:
            conf.write_text(DIST[name])
            b = from_file(tmp_path / "b", conf, *SMALL, f"broker.listenPort={port}", "broker.brokerIP1=127.0.0.1",
                          f"broker.namesrvAddr={ns.namesrv_addr}", broker_port=port)
            assert (tmp_path / "b" / "home" / "commitlog").is_dir()  # storePathRootDir: $RMQ_HOME
        try:
            eventually(lambda: runtime_info(b.broker_addr).get("brokerRole") is not None, 30, "broker answers")
            round_trip(ns.namesrv_addr, f"ConfT_{name.split('.')[0].replace('-', '_')}")
            # updateBrokerConfig persists into the file, as a properties line, the rest as it was
            before = conf.read_text()
            r = call(b.broker_addr, RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=4\n")
            assert r.code == 0 and r.remark in (None, ""), r.remark
            assert conf.read_text() == before + "brokerPermission=4\n"
            assert load_config(conf).broker.brokerPermission == 4
        finally:
            b.stop()
    finally:
        ns.stop()


def test_2m_2s_sync_files_replicate(tmp_path: Path) -> None:
    """broker-a.properties (SYNC_MASTER) and broker-a-s.properties (SLAVE): a send is SEND_OK only once the
    slave has it, so the round trip proves the pair replicates."""
    ns, _ = namesrv(tmp_path)
    procs = []
    try:
        for name in ("broker-a.properties", "broker-a-s.properties"):
            port = free_port()
            work = tmp_path / name.split(".")[0]
            work.mkdir()
            conf = work / name
            conf.write_text(DIST[name])
            procs.append(from_file(work, conf, *SMALL, f"broker.listenPort={port}", "broker.brokerIP1=127.0.0.1",
                                   f"broker.namesrvAddr={ns.namesrv_addr}", "broker.registerNameServerPeriod=2000",
                                   broker_port=port))
        master, slave = procs
        eventually(lambda: int(runtime_info(master.broker_addr).get("haConnectionCount", 0)) == 1, 60,
                   "the slave connected to its master")
        round_trip(ns.namesrv_addr, "ConfT_sync")
        eventually(lambda: runtime_info(slave.broker_addr).get("commitLogMaxOffset")
                   == runtime_info(master.broker_addr).get("commitLogMaxOffset"), 30, "the slave caught up")
    finally:
        for p in reversed(procs):
            p.stop()
        ns.stop()


def test_config_format_toml_prints_the_toml_equivalent(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(DIST["broker.conf"] + "sendMessageThreadPoolNums=16\nbrokerIP1=10.0.0.7\n")
    env = {**os.environ, "RMQ_HOME": str(tmp_path / "home")}

    def config(*args: str) -> str:
        res = subprocess.run([sys.executable, "-m", "rmq.kernel.daemon", "config", "--format", "toml", *args],
                             cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
        assert res.returncode == 0, res.stderr
        return res.stdout

    text = config("-c", str(conf), "--set", "broker.listenPort=30911")
    assert "# ignored: broker.sendMessageThreadPoolNums sizes a Java thread pool" in text
    doc = tomllib.loads(text)
    assert doc["broker"]["brokerIP1"] == "10.0.0.7" and doc["broker"]["listenPort"] == 30911
    assert doc["broker"]["fileReservedTime"] == 48 and "namesrv" not in doc
    printed = tmp_path / "printed.toml"
    printed.write_text(text)
    before, after = load_config(conf, ["broker.listenPort=30911"]), load_config(printed)
    assert after.tables == before.tables and after.selected() == before.selected() and after.log == before.log
    body = [ln for ln in text.splitlines() if not ln.startswith("# ")]
    assert [ln for ln in config("-c", str(printed)).splitlines() if not ln.startswith("# ")] == body
