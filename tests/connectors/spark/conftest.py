"""One SparkSession and one rmqd for the whole Spark connector suite.

Spark costs 6-11 s to start, so the session is session-scoped; so is the broker (each
test uses its own topics). The session finds the ``rocketmq`` format the way a user's
does: Spark's own discovery of the top-level ``pyspark_rocketmq`` module. Editable
installs hide top-level modules from ``pkgutil.iter_modules`` (they resolve through an
import hook), so the module is put on the workers' PYTHONPATH via a directory holding only
a link to it, as site-packages would for a regular install.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rmq.testing.daemon import RmqdProcess

_names = itertools.count()


@pytest.fixture(scope="session")
def discovery_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory that shows ``pyspark_rocketmq`` to pkgutil.iter_modules, as site-packages would."""
    import pyspark_rocketmq

    d = tmp_path_factory.mktemp("discovery")
    (d / "pyspark_rocketmq.py").symlink_to(Path(pyspark_rocketmq.__file__).resolve())
    return d


@pytest.fixture(scope="session")
def spark(discovery_path: Path) -> Iterator[Any]:
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from pyspark.sql import SparkSession

    extra = str(discovery_path)
    old = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP", "PYTHONPATH")}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (extra, old["PYTHONPATH"]) if p)
    session = (
        SparkSession.builder.master("local[2,3]")  # 3 attempts per task: the retry cases
        .appName("rmq-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RmqdProcess]:
    """One rmqd (name server + broker) for the suite; tests use their own topics."""
    proc = RmqdProcess(tmp_path_factory.mktemp("rmqd-spark"), broker_conf={"enablePropertyFilter": True})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def txbroker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RmqdProcess]:
    """An rmqd for the exactly-once cases: it checks half messages every second (RocketMQ: every
    minute) and never gives up on one, so the cases that a check resolves finish in seconds."""
    proc = RmqdProcess(tmp_path_factory.mktemp("rmqd-eo"), broker_conf={
        "transactionCheckInterval": 1000, "transactionTimeOut": 1000, "transactionCheckMax": 10_000})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


class Cluster:
    """Test-side helpers around the suite's rmqd: topics and producing with rmq.client."""

    def __init__(self, proc: RmqdProcess) -> None:
        self.proc = proc
        self.namesrv = proc.namesrv_addr

    def topic(self, prefix: str, queues: int = 4) -> str:
        from rmq.client.blocking import Admin

        name = f"{prefix}_{os.getpid()}_{next(_names)}"
        with Admin(namesrv_addr=self.namesrv) as admin:
            admin.create_topic(name, queues)
        return name

    def produce(self, topic: str, messages: Sequence[dict[str, Any]], batch: int = 100) -> None:
        """Send dicts of Message keyword arguments (body, tags, keys, properties), batches round robin."""
        from rmq.client import Message
        from rmq.client.blocking import Producer

        with Producer("spark_test_producer", namesrv_addr=self.namesrv) as p:
            queues = sorted(p.fetch_publish_queues(topic))
            for i in range(0, len(messages), batch):
                chunk = [Message(topic, **m) for m in messages[i : i + batch]]
                p.send_batch(chunk, queue=queues[(i // batch) % len(queues)])


@pytest.fixture(scope="session")
def cluster(broker: RmqdProcess) -> Cluster:
    return Cluster(broker)


class TxTools(Cluster):
    """Test-side views of the exactly-once broker: topics, what a consumer can pull, pending halves."""

    HALF, OP = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"

    def pulled(self, topic: str) -> list[Any]:
        """Every message a consumer can pull from ``topic`` now (rmq.client, no Spark)."""
        from rmq.client import PullStatus
        from rmq.client.blocking import PullConsumer

        out: list[Any] = []
        with PullConsumer("eo_test_reader", namesrv_addr=self.namesrv) as c:
            for mq in c.fetch_queues(topic):
                off = c.min_offset(mq)
                while True:
                    res = c.pull(mq, off, 32)
                    if res.status is not PullStatus.FOUND:
                        break
                    out.extend(res.messages)
                    off = res.next_begin_offset
        return out

    def pending_halves(self) -> int:
        """Half messages the broker has no outcome for yet (half-topic offsets without an op record)."""
        halves = {m.queue_offset for m in self.pulled(self.HALF)}
        ops = {int(m.body.decode()) for m in self.pulled(self.OP)}
        return len(halves - ops)

    def bodies(self, topic: str) -> list[str]:
        return sorted(m.body.decode() for m in self.pulled(topic))

    def resolved(self, topic: str, want: list[str]) -> bool:
        """No half left undecided and ``topic`` holds exactly ``want``."""
        return self.pending_halves() == 0 and self.bodies(topic) == want

    def produce_rows(self, topic: str, n: int, start: int = 0) -> list[str]:
        """Send ``in-<start>`` .. ``in-<start+n-1>``; returns the upper-cased values pipelines output."""
        from rmq.client import Message
        from rmq.client.blocking import Producer

        end = start + n
        with Producer("eo_test_producer", namesrv_addr=self.namesrv) as p:
            for i in range(start, end, 20):
                p.send_batch([Message(topic, f"in-{j}".encode(), keys=f"k{j % 5}")
                              for j in range(i, min(end, i + 20))])
        return sorted(f"IN-{j}" for j in range(start, end))


@pytest.fixture(scope="session")
def tx(txbroker: RmqdProcess) -> TxTools:
    return TxTools(txbroker)
