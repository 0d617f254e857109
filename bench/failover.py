"""Automatic failover figures with real rmqd processes: a name server, three controllers, three brokers.

    python bench/failover.py [--kills N] [--messages M]

* failover time: a send stream runs against the master (re-resolved through the name server's
  route after each failure); the master is SIGKILLed, the time to the first acknowledged send on
  the new master is recorded; the killed broker is restarted (it rejoins as a slave) and the next
  kill waits until the SyncStateSet is whole again. Printed: min / median / max over N kills.
* produce rate with allAckInSyncStateSet on and off (32 in flight, 1 KiB).

Detection settings are the ones a user can lower: controllerHeartBeatTimeoutMills 3000,
brokerHeartbeatInterval 500, scanNotActiveBrokerInterval 1000. Figures only: it exits non-zero
only when something fails.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).parent))

from replication import produce  # noqa: E402

from rmq.protocol.codes import RequestCode  # noqa: E402
from rmq.testing.daemon import ControllerGroup, Daemons, call  # noqa: E402


def cluster(procs: Daemons, work: Path, all_ack: bool) -> ControllerGroup:
    """Three controllers and three brokers of one group (64 MiB segments, as a default broker)."""
    return procs.controller_group(
        work, 3, controllers=3, raft_password="bench-raft-secret", mappedFileSizeCommitLog=64 * 1024 * 1024,
        allAckInSyncStateSet=all_ack, controllerHeartBeatTimeoutMills=3000, haMaxTimeSlaveNotCatchup=5000,
        registerNameServerPeriod=2000)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--messages", type=int, default=5000)
    run(ap.parse_args())
    return 0


def run(args: argparse.Namespace) -> None:
    """The two rate runs, then the kills; every daemon and store goes at the end."""
    work = Path(tempfile.mkdtemp(prefix="rmq-bench-failover-"))
    with Daemons(scratch=work) as procs:  # the stores go at the end: GiB-sized segments
        for all_ack in (False, True):
            m = cluster(procs, work / f"rate-{all_ack}", all_ack).settled()[0]
            rate, p50, p99, errors = anyio.run(produce, m.broker_addr, args.messages, 1024, 32)
            print(f"allAckInSyncStateSet={str(all_ack).lower():5}: {rate:>8,.0f} msg/s  ack p50 {p50:.2f} ms  "
                  f"p99 {p99:.2f} ms" + (f"  ({errors} failed)" if errors else ""))
            for p in reversed(procs):
                p.stop()
        group = cluster(procs, work / "kills", True)
        ns = group.namesrv
        m = group.settled()[0]
        times = []
        for k in range(args.kills):
            stop = threading.Event()
            errors: list[str] = []
            first: list[float] = []
            killed: list[float] = []

            def stream(stop: threading.Event = stop, first: list[float] = first, killed: list[float] = killed,
                       errors: list[str] = errors,
                       addr: str = m.broker_addr) -> None:
                ext = {"producerGroup": "PG", "topic": "FOB", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                       "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": ""}
                last = ""
                while not stop.is_set():
                    started = time.monotonic()
                    try:
                        r = call(addr, RequestCode.SEND_MESSAGE, ext, b"x")
                        ok = r.code == 0
                        last = f"{addr}: code {r.code} {r.remark}"
                    except Exception as e:
                        ok = False
                        last = f"{addr}: {e}"
                    if ok and killed and started > killed[0] and not first:
                        first.append(time.monotonic())
                        return
                    if not ok:
                        errors.append(last)
                        try:
                            r = call(ns.namesrv_addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "FOB"})
                            addr = json.loads(r.body)["brokerDatas"][0]["brokerAddrs"].get("0", addr)
                        except Exception:
                            pass
                        time.sleep(0.05)

            t = threading.Thread(target=stream)
            t.start()
            time.sleep(1.0)
            m.kill()
            killed.append(time.monotonic())
            t.join(120)
            stop.set()
            if not first:
                raise RuntimeError(f"no send acknowledged after the kill ({errors[-1:]})")
            times.append(first[0] - killed[0])
            print(f"  kill {k + 1}: {times[-1]:.2f} s", flush=True)
            m.start()
            m = group.settled(90)[0]  # the killed broker back in the SyncStateSet
        print(f"failover over {len(times)} kills: min {min(times):.2f} s, median {statistics.median(times):.2f} s, "
              f"max {max(times):.2f} s")


if __name__ == "__main__":
    sys.exit(main())
