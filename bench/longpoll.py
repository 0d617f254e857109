"""rmqd CPU and store reads per empty long poll: per-read compiled pulls against a task per request.

    python bench/longpoll.py [--polls N] [--pullers P] [--hold-ms H] [--runs R]

A fresh rmqd (mmap store, no store read by the clock: the timer wheel off, the delay levels' poll an hour
apart) per run and path, alternated: compiled (the pulls decoded and planned per read; a long poll's plan
handed to the task that holds it) and per-task (RMQ_PURE_PULL_REQUESTS=1). P pullers, one connection each,
issue N long polls in all (SUSPEND, suspendTimeoutMillis H) on queues that never hold a message: each is
held H ms and answered PULL_NOT_FOUND. Printed: polls/s, rmqd CPU per poll (/proc, 10 ms ticks: poll
enough for a few hundred), and the store's gets per poll (GET_BROKER_RUNTIME_INFO; 2 on RocketMQ's path:
the read before the hold, the one after).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import anyio

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.testing.daemon import RmqdProcess

TOPIC, GROUP = "PollBench", "poll-bench"
QUIET = {"plugin": {"processors": {"schedule": {"poll_interval_ms": 3_600_000}}}}


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by ``pid`` (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def gets(admin: TcpRemotingClient, addr: str) -> int:
    """The store's reads so far (GET_BROKER_RUNTIME_INFO's store.gets)."""
    r = await admin.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 10)
    return int(json.loads(r.body)["table"]["store.gets"])


async def setup(admin: TcpRemotingClient, addr: str, queues: int) -> None:
    """The topic (a queue per puller, never written) and the subscription group."""
    ext = {"topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
           "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
    r = await admin.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext), 10)
    assert r.code == 0, r
    body = json.dumps({"groupName": GROUP, "consumeEnable": True, "retryQueueNums": 1, "brokerId": 0})
    r = await admin.invoke(addr, RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                                                         body.encode()), 10)
    assert r.code == 0, r


async def drive(addr: str, args: argparse.Namespace, pid: int) -> tuple[float, float, float]:
    """(polls/s, rmqd CPU µs per poll, store gets per poll) of ``args.polls`` long polls."""
    async with TcpRemotingClient(RemotingConfig(name="poll-admin")) as admin:
        await setup(admin, addr, args.pullers)
        return await polls(admin, addr, args, pid)


async def polls(admin: TcpRemotingClient, addr: str, args: argparse.Namespace, pid: int) -> tuple[float, float, float]:
    """The warm-up, then the measured polls."""

    async def puller(q: int, n: int) -> None:
        async with TcpRemotingClient(RemotingConfig(name=f"poller-{q}")) as client:
            for _ in range(n):
                r = await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                    "consumerGroup": GROUP, "topic": TOPIC, "queueId": str(q), "queueOffset": "0",
                    "maxMsgNums": "32", "sysFlag": "6", "commitOffset": "0",
                    "suspendTimeoutMillis": str(args.hold_ms), "subscription": "*"}), 30)
                assert r.code == 19, r  # PULL_NOT_FOUND

    async def all_polls(each: int) -> None:
        async with anyio.create_task_group() as tg:
            for q in range(args.pullers):
                tg.start_soon(puller, q, each)

    await all_polls(5)  # warm-up: connections made, each one's compiled half installed
    gets0 = await gets(admin, addr)
    cpu0, t0 = process_cpu(pid), time.perf_counter()
    each = args.polls // args.pullers
    await all_polls(each)
    n = each * args.pullers
    wall, cpu = time.perf_counter() - t0, process_cpu(pid) - cpu0
    return n / wall, cpu / n * 1e6, (await gets(admin, addr) - gets0) / n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--polls", type=int, default=20_000)
    p.add_argument("--pullers", type=int, default=8)
    p.add_argument("--hold-ms", type=int, default=1)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    print(f"rmqd long-poll bench: {args.polls} polls held {args.hold_ms} ms on empty queues, {args.pullers} pullers, "
          f"{args.runs} alternated runs, {os.cpu_count()} CPUs")
    for run in range(args.runs):
        for path, env in (("compiled", {"RMQ_PURE_PULL_REQUESTS": ""}), ("per-task", {"RMQ_PURE_PULL_REQUESTS": "1"})):
            with tempfile.TemporaryDirectory(prefix="rmq-bench-") as tmp:
                proc = RmqdProcess(Path(tmp), env=env, proxy=False, extra=QUIET, broker_conf={
                    "flushDiskType": "ASYNC_FLUSH", "timerWheelEnable": False})
                proc.start(120)
                try:
                    assert proc.proc is not None
                    rate, cpu, gets = anyio.run(drive, proc.broker_addr, args, proc.proc.pid, backend="asyncio",
                                                backend_options={"use_uvloop": True})
                finally:
                    proc.stop()
            print(f"  run {run + 1} {path:<9} {rate:>8,.0f} polls/s  rmqd CPU {cpu:6.1f} µs/poll  "
                  f"store gets {gets:.2f}/poll")


if __name__ == "__main__":
    main()
