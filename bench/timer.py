"""Timer-message and transaction figures against one real rmqd (embedded namesrv + broker).

    python bench/timer.py [--timers 100000] [--spread 60] [--tx 2000]

* timers: N messages with TIMER_DELIVER_MS spread evenly over the next ``spread`` seconds
  (after the send phase), 32 sends in flight, 256 B. Lateness = the delivered copy's store
  time - the requested time (the broker's own clock, so the consumer's speed does not count),
  p50 / p99 / max, plus "early" (must be 0). Timer CPU = rmqd's CPU seconds over the delivery
  window (re-puts, the timer's loops, and serving the pulls that count the deliveries) per
  message, and the idle rmqd's CPU over the same time for comparison.
* transactions: sequential send_in_transaction (commit) vs sequential plain sends, msgs/s.

Figures only: it exits non-zero only when a message is missing or early.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio

from rmq.client import LocalTransactionState, Message, Producer, PullConsumer, PullStatus, TransactionProducer
from rmq.testing.daemon import RmqdProcess

TOPIC = "BenchTimer"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


async def send_timers(ns: str, n: int, spread: float, lead: float) -> tuple[dict[str, int], float]:
    """Send n timer messages due in [start+lead, start+lead+spread]; (msg id -> due ms, send seconds)."""
    due: dict[str, int] = {}
    base = time.time_ns() // 1_000_000 + int(lead * 1000)
    body = b"t" * 256
    async with Producer("BENCH_TIMER_P", ns) as p:
        await p.send(Message(TOPIC, b"warm-up"))
        counter = iter(range(n))
        t0 = time.perf_counter()

        async def worker() -> None:
            for i in counter:
                at = base + int(i * spread * 1000 / n)
                r = await p.send(Message(TOPIC, body, deliver_at=at))
                due[r.msg_id] = at

        async with anyio.create_task_group() as tg:
            for _ in range(32):
                tg.start_soon(worker)
        return due, time.perf_counter() - t0


async def collect(ns: str, due: dict[str, int], timeout: float) -> list[float]:
    """Pull until every timer arrived; lateness in ms per delivered message (duplicates counted once)."""
    late: dict[str, float] = {}
    async with PullConsumer("BENCH_TIMER_C", ns) as pc:
        mqs = await pc.fetch_queues(TOPIC)
        offsets = dict.fromkeys(mqs, 0)
        with anyio.move_on_after(timeout):
            while len(late) < len(due):
                found = False
                for mq in mqs:
                    r = await pc.pull(mq, offsets[mq], 32)
                    if r.status is PullStatus.FOUND:
                        found = True
                        offsets[mq] = r.next_begin_offset
                        for m in r.messages:
                            at = due.get(m.msg_id)
                            if at is not None:
                                late.setdefault(m.msg_id, m.store_timestamp - at)
                if not found:
                    await anyio.sleep(0.05)
    return list(late.values())


async def tx_vs_plain(ns: str, n: int) -> tuple[float, float]:
    body = b"x" * 256
    async with Producer("BENCH_PLAIN_P", ns) as p:
        await p.send(Message("BenchTx", b"warm-up"))
        t0 = time.perf_counter()
        for _ in range(n):
            await p.send(Message("BenchTx", body))
        plain = n / (time.perf_counter() - t0)
    async with TransactionProducer("BENCH_TX_P", ns) as tp:
        t0 = time.perf_counter()
        for _ in range(n):
            await tp.send_in_transaction(Message("BenchTx", body), lambda m, a: LocalTransactionState.COMMIT_MESSAGE)
        tx = n / (time.perf_counter() - t0)
    return plain, tx


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timers", type=int, default=100_000)
    ap.add_argument("--spread", type=float, default=60.0)
    ap.add_argument("--lead", type=float, default=0.0, help="seconds after the send phase the first is due")
    ap.add_argument("--precision", type=int, default=1000)
    ap.add_argument("--tx", type=int, default=2000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rmq-bench-timer-"))
    proc = RmqdProcess(work, broker_conf={"timerPrecisionMs": args.precision, "mappedFileSizeCommitLog": 256 << 20})
    try:
        proc.start()
        assert proc.proc is not None
        pid = proc.proc.pid
        # the send phase is timed first (no timers) to know how far ahead the first must be due
        probe = max(2000, args.timers // 50)
        _, probe_s = anyio.run(send_timers, proc.namesrv_addr, probe, 1.0, 3600.0)
        lead = args.lead or probe_s * args.timers / probe * 1.3 + 3
        t_send = time.time()
        due, send_s = anyio.run(send_timers, proc.namesrv_addr, args.timers, args.spread, lead)
        print(f"timers: sent {len(due)} in {send_s:.1f} s ({len(due) / send_s:,.0f}/s), first due "
              f"{lead - (time.time() - t_send):.1f} s after the send phase, spread over {args.spread:.0f} s")
        start_wait = lead - (time.time() - t_send)
        idle0 = cpu_seconds(pid)
        time.sleep(max(0.0, min(start_wait, 5.0)))
        idle_rate = (cpu_seconds(pid) - idle0) / max(0.001, min(start_wait, 5.0))
        time.sleep(max(0.0, start_wait - 5.0))
        cpu0 = cpu_seconds(pid)
        t0 = time.time()
        late = anyio.run(collect, proc.namesrv_addr, due, args.spread + 60)
        window = time.time() - t0
        cpu = cpu_seconds(pid) - cpu0
        early = sum(1 for v in late if v < 0)
        print(f"timers: delivered {len(late)}/{len(due)}; lateness p50 {pct(late, .5):.0f} ms, p99 "
              f"{pct(late, .99):.0f} ms, max {max(late):.0f} ms, early {early} (precision {args.precision} ms)")
        print(f"timers: rmqd CPU {cpu:.1f} s over a {window:.0f} s delivery window = "
              f"{cpu / max(1, len(late)) * 1e6:.0f} us per timer message (deliver + serve the pulls); "
              f"idle rmqd with {len(due)} waiting: {idle_rate * 100:.1f} % of a core")
        if args.tx:
            plain, tx = anyio.run(tx_vs_plain, proc.namesrv_addr, args.tx)
            print(f"transactions: sequential send {plain:,.0f} msg/s, send_in_transaction (commit) {tx:,.0f} msg/s "
                  f"= {tx / plain:.2f}x")
        return 0 if len(late) == len(due) and early == 0 else 1
    finally:
        proc.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
