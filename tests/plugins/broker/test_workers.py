"""``[broker] workers = N``: one rmqd, N broker processes under one supervisor (rmq.roles.workers).

Real processes: the supervisor (name server) and its workers, rmq.client and the C++ client against
them. The config checks and the worker's derived config need none.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from rmq.kernel.config import ConfigError, load_config
from rmq.protocol.codes import RequestCode
from rmq.roles.workers import PORT_STEP, worker_config
from rmq.testing import rmqadmin
from rmq.testing.daemon import RmqdProcess, call, eventually, runtime_info, write_toml
from rmq.testing.faults import Worker as ChildWorker

CPPWORKER = Path(__file__).parents[2] / "compat" / "cppworker.py"
FAST = {"route_interval": 1.0, "heartbeat_interval": 1.0}


async def consume_all(addr: str, group: str, topic: str, want: set[str], seen: dict[str, float], linger: float = 0) -> None:
    """Push-consume ``topic`` from its first offset into ``seen`` (body: when it arrived) until every
    body of ``want`` is in, then ``linger`` seconds more (for what must not arrive)."""
    import time

    from rmq.client import ConsumeResult, PushConsumer

    all_in = anyio.Event()

    async def listener(msg: Any) -> ConsumeResult:
        seen[msg.body.decode()] = time.time()
        if want <= seen.keys():
            all_in.set()
        return ConsumeResult.SUCCESS

    c = PushConsumer(group, addr, listener=listener, consume_from_where="FIRST_OFFSET", **FAST)
    c.subscribe(topic, "*")
    async with c:
        with anyio.fail_after(120):
            await all_in.wait()
        await anyio.sleep(linger)


# ---------------------------------------------------------------- config (no processes)


@pytest.mark.parametrize("value", [0, -1, 257])
def test_bad_worker_counts_are_config_errors_with_file_line_key(tmp_path: Path, value: int) -> None:
    path = write_toml(tmp_path / "rmqd.toml", {"broker": {"listenPort": 10911, "workers": value}})
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}:3: broker.workers: 1..256"), e.value


def test_rmqd_config_shows_workers(tmp_path: Path) -> None:
    """What ``rmqd config`` prints (``dump_config``; the command itself would set up the process's logging)."""
    from rmq.kernel.config import dump_config

    assert "\nworkers = 3\n" in dump_config(load_config(write_toml(tmp_path / "rmqd.toml", {"broker": {"workers": 3}})))
    assert "\nworkers = 1\n" in dump_config(load_config(write_toml(tmp_path / "one.toml", {"broker": {}})))


def test_worker_k_config_names_ports_store_and_namesrv(tmp_path: Path) -> None:
    root = load_config(write_toml(tmp_path / "rmqd.toml", {
        "namesrv": {"listenPort": 9000, "listenHost": "0.0.0.0"},
        "broker": {"workers": 3, "listenPort": 20000, "storePathRootDir": str(tmp_path / "s"),
                   "haMasterAddress": "10.0.0.1:20001", "brokerName": "bn"},
        "proxy": {"grpcServerPort": 8081}}))
    seen: set[int] = set()
    for k in range(3):
        w = worker_config(root, k)
        b = w.broker
        assert (b.brokerName, b.workers, b.listenPort) == (f"bn-{k}", 1, 20000 + PORT_STEP * k)
        assert b.storePathRootDir == str(tmp_path / "s" / f"worker-{k}")
        assert b.namesrvAddr == "127.0.0.1:9000" and b.haMasterAddress == f"10.0.0.1:{20001 + PORT_STEP * k}"
        assert w.proxy.grpcServerPort == 8081 + PORT_STEP * k
        assert w.namesrv is None and w.roles() == ["broker"]
        ports = {b.listenPort - 2, b.listenPort, b.listenPort + 1}  # VIP, listen, HA
        assert not ports & seen
        seen |= ports
    with pytest.raises(ValueError):
        worker_config(root, 3)


# ---------------------------------------------------------------- real processes

def cluster_brokers(proc: RmqdProcess) -> dict[str, str]:
    r = call(proc.namesrv_addr, RequestCode.GET_BROKER_CLUSTER_INFO)
    assert r.code == 0, r.remark
    table = json.loads(r.body)["brokerAddrTable"]
    return {name: v["brokerAddrs"]["0"] for name, v in table.items()}


def queue_counts(proc: RmqdProcess, topic: str) -> dict[str, int]:
    """Messages stored per worker: the sum of its queues' max offsets (rmqadmin topicStatus)."""
    out: dict[str, int] = collections.Counter()
    for row in rmqadmin.js("topicStatus", "-n", proc.namesrv_addr, "-t", topic):
        out[row["brokerName"]] += row["maxOffset"]
    return dict(out)


@pytest.fixture
def two(rmqd_factory: Any) -> RmqdProcess:
    proc: RmqdProcess = rmqd_factory(workers=2, broker_conf={"flushDiskType": "SYNC_FLUSH"})
    eventually(lambda: len(cluster_brokers(proc)) == 2, 30, "both workers registered")
    return proc


def create_topic(proc: RmqdProcess, topic: str, queues: int = 4) -> None:
    rmqadmin.run("updateTopic", "-n", proc.namesrv_addr, "-c", "DefaultCluster", "-t", topic,
                 "-r", str(queues), "-w", str(queues))
    eventually(lambda: len(rmqadmin.js("topicRoute", "-n", proc.namesrv_addr, "-t", topic)["queueDatas"]) == 2,
               30, f"{topic} routed to both workers")


@pytest.mark.grpc
def test_two_workers_register_and_a_cluster_topic_spreads(two: RmqdProcess) -> None:
    assert cluster_brokers(two) == {"broker-a-0": two.worker_addr(0), "broker-a-1": two.worker_addr(1)}
    assert two.grpc_port and runtime_info(two.worker_addr(1))  # each worker serves its own port
    ready = next(line for line in two.log_lines() if " ready: " in line)
    assert "2 broker workers" in ready and f"broker {two.worker_port(1)}" in ready, ready
    create_topic(two, "WTopic")
    route = rmqadmin.js("topicRoute", "-n", two.namesrv_addr, "-t", "WTopic")
    assert sorted((q["brokerName"], q["writeQueueNums"]) for q in route["queueDatas"]) == [
        ("broker-a-0", 4), ("broker-a-1", 4)]
    assert (Path(two.workdir) / "store" / "worker-1" / "config" / "topics.json").exists()


def test_rmq_client_moves_messages_through_both_workers_in_queue_order(two: RmqdProcess) -> None:
    from rmq.client import ConsumeResult, Message, Producer, PushConsumer

    create_topic(two, "WOrder")
    n, keys = 400, 16
    sent: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
    got: dict[tuple[str, int], list[str]] = collections.defaultdict(list)

    async def run() -> None:
        async with Producer("PG_W", two.namesrv_addr, **FAST) as p:
            for i in range(n):
                r = await p.send(Message("WOrder", f"m{i}"), sharding_key=f"k{i % keys}")
                assert r.ok, r
                sent[(r.queue.broker_name, r.queue.queue_id)].append(f"m{i}")

        all_in = anyio.Event()

        async def listener(msg: Any) -> ConsumeResult:
            got[(msg.store_host, msg.queue_id)].append(msg.body.decode())
            if sum(map(len, got.values())) >= n:
                all_in.set()
            return ConsumeResult.SUCCESS

        c = PushConsumer("CG_W", two.namesrv_addr, listener=listener, orderly=True,
                         consume_from_where="FIRST_OFFSET", **FAST)
        c.subscribe("WOrder", "*")
        async with c:
            with anyio.fail_after(120):
                await all_in.wait()

    anyio.run(run)
    assert {b for b, _ in sent} == {"broker-a-0", "broker-a-1"}
    addr = {two.worker_addr(k): f"broker-a-{k}" for k in range(2)}
    received = {(addr[str(h)] if str(h) in addr else str(h), q): bodies for (h, q), bodies in got.items()}
    assert received == dict(sent)  # every message once, each queue in send order, on the worker it went to


def test_topic_auto_created_through_tbw102_on_workers(two: RmqdProcess) -> None:
    from rmq.client import Message, Producer

    async def run() -> set[str]:
        brokers = set()
        async with Producer("PG_AUTO", two.namesrv_addr, **FAST) as p:
            for i in range(40):
                r = await p.send(Message("WAuto", f"a{i}"))
                assert r.ok, r
                brokers.add(r.queue.broker_name)
        return brokers

    brokers = anyio.run(run)
    assert brokers <= {"broker-a-0", "broker-a-1"} and brokers
    route = rmqadmin.js("topicRoute", "-n", two.namesrv_addr, "-t", "WAuto")
    assert {q["brokerName"] for q in route["queueDatas"]} == brokers


def test_transactions_and_timers_on_both_workers(two: RmqdProcess) -> None:
    """Each worker is a whole broker: half messages committed or rolled back, and timer messages held
    until due, on whichever worker the producer picked."""
    import time

    from rmq.client import LocalTransactionState, Message, TransactionProducer

    create_topic(two, "WTx")
    brokers: set[str] = set()
    due: dict[str, float] = {}
    got: dict[str, float] = {}

    async def run() -> None:
        async with TransactionProducer("PG_TX", two.namesrv_addr, **FAST) as p:
            for i in range(16):
                state = LocalTransactionState.COMMIT_MESSAGE if i % 2 == 0 else LocalTransactionState.ROLLBACK_MESSAGE
                r = (await p.send_in_transaction(Message("WTx", f"tx{i}"), lambda m, a, s=state: s)).send_result
                assert r.ok, r
                brokers.add(r.queue.broker_name)
            for i in range(8):
                msg = Message("WTx", f"timer{i}")
                msg.delay = 2.0
                due[f"timer{i}"] = time.time() + 2.0
                r = await p.send(msg)
                assert r.ok, r
                brokers.add(r.queue.broker_name)
        want = {f"tx{i}" for i in range(0, 16, 2)} | set(due)
        # a rolled-back half, had it been delivered, would be in a second after the rest
        await consume_all(two.namesrv_addr, "CG_TX", "WTx", want, got, linger=1.0)

    anyio.run(run)
    assert brokers == {"broker-a-0", "broker-a-1"}
    assert set(got) == {f"tx{i}" for i in range(0, 16, 2)} | set(due)
    # not before due, to the timer wheel's precision (timerPrecisionMs, 1 s)
    assert all(got[b] >= due[b] - 1.0 for b in due), {b: got[b] - due[b] for b in due}


def test_slave_rmqd_with_the_same_workers_pairs_worker_k_with_master_worker_k(rmqd_factory: Any) -> None:
    master: RmqdProcess = rmqd_factory(workers=2, proxy=False)
    slave: RmqdProcess = rmqd_factory(workers=2, proxy=False, namesrv=False, broker_conf={
        "brokerRole": "SLAVE", "brokerId": 1, "namesrvAddr": master.namesrv_addr})

    def paired() -> bool:
        r = call(master.namesrv_addr, RequestCode.GET_BROKER_CLUSTER_INFO)
        table = json.loads(r.body)["brokerAddrTable"]
        return all(table.get(f"broker-a-{k}", {}).get("brokerAddrs") == {"0": master.worker_addr(k),
                                                                         "1": slave.worker_addr(k)}
                   for k in range(2))

    eventually(paired, 60, "each slave worker registered beside its master worker")
    for k in range(2):
        eventually(lambda k=k: runtime_info(slave.worker_addr(k)).get("masterConnected") == "true", 60,
                   f"slave worker {k} replicating")
        assert runtime_info(slave.worker_addr(k))["masterAddr"].endswith(f":{master.worker_port(k) + 1}")


def cpp_worker(tmp_path: Path, **cfg: Any) -> ChildWorker:
    return ChildWorker([sys.executable, str(CPPWORKER), json.dumps(cfg)], tmp_path / f"cpp-{cfg['mode']}.log",
                       f"C++ {cfg['mode']} worker")


def test_cpp_client_produces_and_consumes_across_both_workers(two: RmqdProcess, tmp_path: Path) -> None:
    """librocketmq 1.2.3 with two brokers: its first sends may fail at once ("No route info", its log:
    "GetTransport ... get timed_mutex timeout") while its own heartbeat thread holds the connection table
    to connect to the other broker: a client race, not an answer of rmqd (none was sent); so failed sends
    are allowed at the start, and every acknowledged one must come back."""
    create_topic(two, "WCpp")
    n = 300
    prod = cpp_worker(tmp_path, mode="produce", namesrv=two.namesrv_addr, topic="WCpp", count=n, method="sync",
                      stop_on_error=False)
    try:
        prod.proc.wait(120)
    finally:
        prod.stop(10)
    results = [ln for ln in prod.lines if "i" in ln]
    ok = {r["i"] for r in results if r.get("status") == 0}
    failed = [r for r in results if r["i"] not in ok]
    assert len(results) == n and len(ok) >= n - 10, failed[:3]
    assert all("No route info" in r.get("error", "") for r in failed), failed[:3]
    counts = queue_counts(two, "WCpp")
    assert sum(counts.values()) == len(ok) and all(counts.values()), counts
    # a push consumer (it retries a pull that met the same race; the pull consumer skips the queue)
    push = cpp_worker(tmp_path, mode="push", namesrv=two.namesrv_addr, topic="WCpp", group="CG_WCPP")
    want = {f"body-{i}" for i in ok}
    try:
        push.wait(lambda: {ln["msg"]["body"] for ln in list(push.lines) if "msg" in ln} >= want, 120,
                  "every acknowledged message consumed")
    finally:
        push.stop(20)
    bodies = [ln["msg"]["body"] for ln in push.lines if "msg" in ln]
    assert set(bodies) == want


def test_killed_worker_is_restarted_and_serves_its_store(two: RmqdProcess) -> None:
    from rmq.client import Message, Producer

    create_topic(two, "WKill")
    acked: dict[str, set[str]] = collections.defaultdict(set)

    async def produce(first: int, count: int) -> None:
        async with Producer("PG_K", two.namesrv_addr, **FAST) as p:
            for i in range(first, first + count):
                r = await p.send(Message("WKill", f"k{i}"))
                if r.ok:
                    acked[r.queue.broker_name].add(f"k{i}")

    anyio.run(produce, 0, 200)
    assert set(acked) == {"broker-a-0", "broker-a-1"}
    before = two.worker_pids()
    os.kill(before[1], signal.SIGKILL)  # SYNC_FLUSH: every acked message is on disk
    eventually(lambda: (p := two.worker_pids().get(1)) and p != before[1], 60, "worker 1 restarted")
    eventually(lambda: runtime_info(two.worker_addr(1)), 90, "worker 1 serving again")
    assert two.worker_pids()[0] == before[0]  # the other worker was left alone
    assert any("worker 1 (broker-a-1" in line and "signal SIGKILL; restarting" in line for line in two.log_lines())
    eventually(lambda: queue_counts(two, "WKill")["broker-a-1"] == len(acked["broker-a-1"]), 60,
               "worker 1's acked messages back")
    anyio.run(produce, 200, 100)  # and it takes new ones
    anyio.run(consume_all, two.namesrv_addr, "CG_K", "WKill", set().union(*acked.values()), {})
    assert len(acked["broker-a-1"]) > 0


def test_sigterm_stops_every_worker_and_exits_0(two: RmqdProcess) -> None:
    pids = two.worker_pids()
    assert len(pids) == 2
    assert two.stop() == 0
    for pid in pids.values():
        eventually(lambda pid=pid: not Path(f"/proc/{pid}").exists() or "Z" in _state(pid), 30, f"worker {pid} gone")
    lines = two.log_lines()
    assert sum("rmq.daemon: rmqd stopped" in line for line in lines) == 3, lines[-10:]
    assert any("broker broker-a-1 stopped" in line for line in lines)


def test_supervisor_killed_takes_its_workers_with_it(rmqd_factory: Any) -> None:
    proc: RmqdProcess = rmqd_factory(workers=2, proxy=False)
    pids = proc.worker_pids()
    proc.kill()
    for pid in pids.values():
        eventually(lambda pid=pid: not Path(f"/proc/{pid}").exists() or "Z" in _state(pid), 60,
                   f"worker {pid} gone after its supervisor")


@pytest.mark.integration
def test_a_worker_that_cannot_start_fails_rmqd(tmp_path: Path) -> None:
    """Worker 1's port is taken: rmqd refuses to start (exit 2) and leaves no worker behind."""
    import socket

    proc = RmqdProcess(tmp_path / "d", workers=2, proxy=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", proc.worker_port(1)))
        s.listen()
        with pytest.raises(RuntimeError, match="exit 2"):
            proc.start(60)
    assert proc.proc is not None and proc.proc.returncode == 2
    assert any("worker 1 (broker-a-1" in line and "before it was ready" in line for line in proc.log_lines())
    assert not _processes_with(str(proc.config_path))  # worker 0, which did start, was stopped


def _processes_with(arg: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and arg.encode() in (d / "cmdline").read_bytes() and _state(int(d.name)) != "Z":
                out.append(int(d.name))
        except OSError:
            continue
    return out


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
