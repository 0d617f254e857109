"""rmqd's start-up cost: start and stop one ``RmqdProcess`` (name server + broker, with and without
the gRPC proxy) several times; print the CPU (RUSAGE_CHILDREN: the daemon's own user + system time)
and the wall time of each start + stop.

    python bench/startup.py [--runs 5] [--importtime] [--baseline OTHER_CHECKOUT/.venv/bin/python]

The test suite starts hundreds of daemons, so a start's CPU is a large share of ``make test``'s.
``--baseline`` alternates each start with one of the daemon another interpreter (another checkout's
venv) imports, so a shared machine's load weighs on both alike. ``--importtime`` also runs one start with ``PYTHONPROFILEIMPORTTIME=1`` and prints the slowest
cumulative imports of the daemon. Figures only.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from rmq.testing.daemon import RmqdProcess


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class OtherRmqd(RmqdProcess):
    """The daemon as another interpreter (and so another checkout) runs it."""

    python = sys.executable

    def command(self, extra_args: Iterable[str] = ()) -> list[str]:
        return [self.python, *super().command(extra_args)[1:]]


def one(workdir: Path, proxy: bool, env: dict[str, str] | None = None,
        python: str = sys.executable) -> tuple[float, float, RmqdProcess]:
    """CPU and wall seconds of one start + clean stop (the process is reaped, so its time is counted)."""
    cpu0, t0 = children_cpu(), time.monotonic()
    proc = OtherRmqd(workdir, proxy=proxy, env=env)
    proc.python = python
    proc.start(timeout=60)
    proc.stop()
    return children_cpu() - cpu0, time.monotonic() - t0, proc


def importtime(workdir: Path, proxy: bool, top: int = 25) -> None:
    """The slowest cumulative imports of one start (``-X importtime`` writes them to stderr: the log)."""
    _, _, proc = one(workdir, proxy, env={"PYTHONPROFILEIMPORTTIME": "1"})
    rows = []
    for line in proc.log_lines():
        if line.startswith("import time:") and "|" in line:
            _, cum, name = (p.strip() for p in line[len("import time:"):].split("|"))
            if cum.isdigit():
                rows.append((int(cum), name))
    print(f"  slowest imports (cumulative µs), proxy={proxy}:")
    for cum, name in sorted(rows, reverse=True)[:top]:
        print(f"    {cum:>8}  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--importtime", action="store_true")
    ap.add_argument("--baseline", metavar="PYTHON", help="another checkout's interpreter, measured alternately")
    args = ap.parse_args()
    pythons = {"this": sys.executable, **({"baseline": args.baseline} if args.baseline else {})}
    root = Path(tempfile.mkdtemp(prefix="rmq-bench-startup-"))
    try:
        for proxy in (True, False):
            cpus: dict[str, list[float]] = {k: [] for k in pythons}
            walls: dict[str, list[float]] = {k: [] for k in pythons}
            for i in range(args.runs):
                for label, python in pythons.items():
                    cpu, wall, _ = one(root / f"{label}-p{int(proxy)}-{i}", proxy, python=python)
                    cpus[label].append(cpu)
                    walls[label].append(wall)
            for label in pythons:
                print(f"{label:8} proxy={str(proxy):5}  cpu/start median {statistics.median(cpus[label]):.3f} s "
                      f"(min {min(cpus[label]):.3f})  wall median {statistics.median(walls[label]):.3f} s  "
                      f"runs={args.runs}")
            if args.importtime:
                importtime(root / f"imp{int(proxy)}", proxy)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
