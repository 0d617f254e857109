"""The exactly-once sink on a real Spark standalone cluster: a master and two workers on 127.0.0.1
started from pyspark's own launcher (``bin/spark-class``, what ``sbin/start-master.sh`` runs), a
driver in its own process, separate executor JVMs and Python workers.

An executor JVM is killed (SIGKILL) while the stream runs; Spark re-runs its tasks on a new one.
Then more input arrives and the query is restarted from its checkpoint. The output topic must
hold each input row exactly once. Slow (six JVMs on a small machine): ``make slow``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq.testing.daemon import eventually, free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

DRIVER = '''
import sys
import time
from pyspark.sql import SparkSession, functions as F
from rmq.connectors.spark import register

master, ns, src, out, ckpt = sys.argv[1:6]
spark = (SparkSession.builder.master(master).appName("rmq-eo-cluster")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.executor.memory", "512m").config("spark.executor.cores", "1")
         .config("spark.cores.max", "2").config("spark.pyspark.python", sys.executable)
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
register(spark)

@F.udf("string")
def slow_upper(v):  # a few ms a row, so a batch's tasks run long enough to lose an executor mid-way
    time.sleep(0.01)
    return v.upper()

q = (spark.readStream.format("rocketmq").option("nameserver", ns).option("subscribe", src)
     .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "100").load()
     .repartition(2).select("key", slow_upper(F.col("value").cast("string")).alias("value"))
     .writeStream.format("rocketmq").option("nameserver", ns).option("topic", out)
     .option("exactlyOnce", "true").option("transactionGraceMs", "5000")
     .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
q.awaitTermination()
print("QUERY DONE", q.exception(), flush=True)
spark.stop()
'''


def _spark_home() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent)


class Standalone:
    """A master and two single-core workers, each a JVM this test started and stops (by pid)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "SPARK_HOME": _spark_home(), "SPARK_LOCAL_IP": "127.0.0.1",
                    "SPARK_DAEMON_MEMORY": "256m", "PYSPARK_PYTHON": sys.executable}

    def _launch(self, name: str, *args: str) -> Path:
        log = self.work / f"{name}.log"
        cls = Path(_spark_home()) / "bin" / "spark-class"
        with open(log, "wb") as f:
            self.procs.append(subprocess.Popen([str(cls), *args], stdout=f, stderr=subprocess.STDOUT, env=self.env,
                                               cwd=self.work))
        return log

    def start(self) -> Standalone:
        master = self._launch("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                              "--port", str(self.port), "--webui-port", str(free_port()))
        eventually(lambda: "ALIVE" in master.read_text(), 120, "the Spark master up")
        for i in range(2):
            wdir = self.work / f"worker{i}"
            wdir.mkdir()
            log = self._launch(f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                               "--cores", "1", "--memory", "768m", "--webui-port", str(free_port()),
                               "--work-dir", str(wdir))
            eventually(lambda log=log: "Successfully registered with master" in log.read_text(), 120,
                       f"worker {i} registered")
        return self

    def executors(self) -> list[int]:
        """Pids of executor JVMs launched by our workers."""
        ours = {p.pid for p in self.procs}
        found = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes()
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if b"CoarseGrainedExecutorBackend" in cmd and ppid in ours:
                found.append(int(d))
        return found

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    pytest.importorskip("pyspark")
    cluster = Standalone(tmp_path_factory.mktemp("spark-standalone"))
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _driver(standalone: Standalone, script: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(script), standalone.url, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=standalone.env, cwd=script.parent)


def _finish(p: subprocess.Popen[str]) -> str:
    out, _ = p.communicate(timeout=600)
    assert p.returncode == 0 and "QUERY DONE None" in out, out[-4000:]
    return out


def test_exactly_once_on_a_standalone_cluster_with_an_executor_killed(
        standalone: Standalone, tx: Any, tmp_path: Path) -> None:
    ns = tx.namesrv
    src, out = tx.topic("clIn"), tx.topic("clOut")
    want = tx.produce_rows(src, 600)
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    ckpt = tmp_path / "ckpt"
    log = ckpt / "rocketmq-sink"

    driver = _driver(standalone, script, ns, src, out, str(ckpt))
    try:
        eventually(lambda: driver.poll() is not None or log.is_dir() and any(
            p.suffix == ".commit" for p in log.iterdir()), 300, "the first batch committed")
        victims = eventually(lambda: driver.poll() is not None or standalone.executors(), 60, "executor JVMs")
        assert driver.poll() is None, _finish(driver)
        os.kill(victims[0], signal.SIGKILL)
        killed_at = sum(p.suffix == ".commit" for p in log.iterdir())
        _finish(driver)
    except AssertionError as e:
        if driver.poll() is None:
            driver.kill()
        raise AssertionError(f"{e}\ndriver output:\n{driver.communicate()[0][-6000:]}") from None
    assert killed_at < 6, "the stream ended before the executor was killed"  # 600 rows, 100 a batch
    eventually(lambda: tx.resolved(out, want), 120, "the output resolved")

    # more input; the query restarted from its checkpoint writes only the new rows, once
    want = sorted(want + tx.produce_rows(src, 300, start=600))
    _finish(_driver(standalone, script, ns, src, out, str(ckpt)))
    eventually(lambda: tx.resolved(out, want), 120, "the second run resolved")


def test_the_example_pipeline_runs_on_the_standalone_cluster(standalone: Standalone, tx: Any, tmp_path: Path) -> None:
    """examples/spark_pipeline.py unchanged, its driver pointed at the cluster through PYSPARK_SUBMIT_ARGS."""
    import json

    import pyarrow.parquet as pq

    base = 1_704_067_200_000
    orders, stats = tx.topic("clOrders", 2), tx.topic("clStats", 2)
    docs = [{"order_id": f"o{i}", "customer": f"c{i % 4}", "amount": 1.5 + i, "ts": base + i * 1000} for i in range(30)]
    docs.append({"order_id": "late", "customer": "c0", "amount": 1.0, "ts": base + 45_000})  # closes the windows
    tx.produce(orders, [{"body": json.dumps(d).encode()} for d in docs], batch=8)
    submit = (f"--master {standalone.url} --conf spark.executor.memory=512m --conf spark.executor.cores=1 "
              "--conf spark.cores.max=2 --conf spark.driver.host=127.0.0.1 --conf spark.ui.enabled=false "
              "pyspark-shell")
    example = Path(__file__).resolve().parents[3] / "examples" / "spark_pipeline.py"
    run = subprocess.run(
        [sys.executable, str(example), "--nameserver", tx.namesrv, "--checkpoint", str(tmp_path / "ckpt"),
         "--output", str(tmp_path / "out"), "--input-topic", orders, "--output-topic", stats, "--available-now"],
        env={**standalone.env, "PYSPARK_SUBMIT_ARGS": submit}, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Registering app rocketmq-orders" in (standalone.work / "master.log").read_text()  # ran on the cluster
    want = sorted((10, round(sum(1.5 + i for i in range(w * 10, w * 10 + 10)), 2)) for w in range(3))
    eventually(lambda: tx.pending_halves() == 0 and len(tx.bodies(stats)) == 3, 120, "the windows committed")
    assert sorted((d["orders"], d["revenue"]) for d in map(json.loads, tx.bodies(stats))) == want
    table = pq.read_table(tmp_path / "out").to_pylist()
    assert sorted((r["orders"], r["revenue"]) for r in table) == want
