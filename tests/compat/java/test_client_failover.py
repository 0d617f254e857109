"""The Java 4.9.8 client across a broker restart, on rmqd and on the Java broker: a DefaultMQProducer
sending steadily (sync, one retry) and a DefaultMQPushConsumer (clustering) while the broker is stopped
with SIGTERM and started again on the same store and ports. The name server stays up on both sides (rmqd
runs it in a process of its own here, as the Java pair does), so only the broker goes away.

What the application sees is compared: which kinds of failure the producer gets during the outage, that
every SEND_OK message is consumed after all, that consumption resumes from the committed offsets (no
message consumed before the outage comes again) and the group's final offsets. Which send fails, and
how many, depends on when the broker went away and came back: that is timing, not the broker."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from rmq.testing import java
from rmq.testing.daemon import RmqdProcess

from .conftest import BROKER_CONF

pytestmark = pytest.mark.java

TIMEOUT = 240


class RestartSide:
    """One broker under judgement whose broker (not name server) the test can stop and start."""

    def __init__(self, name: str, namesrv_addr: str, stop: Callable[[], None], start: Callable[[], None],
                 scratch: Path) -> None:
        self.name, self.namesrv_addr, self.stop, self.start, self.scratch = name, namesrv_addr, stop, start, scratch


@pytest.fixture(scope="module")
def restart_sides(java_home: Path, driver_classes: Path, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[list[RestartSide]]:
    """A broker pair of this module's own (the session's ``judge`` is shared: it must not go down)."""
    tmp = tmp_path_factory.mktemp("failover")
    ns = RmqdProcess(tmp / "rmqd-ns", broker=False)
    br = RmqdProcess(tmp / "rmqd-broker", namesrv=False, proxy=False,
                     broker_conf={**BROKER_CONF, "namesrvAddr": f"127.0.0.1:{ns.namesrv_port}"})
    jb = java.JavaBroker(tmp / "java", conf={"mappedFileSizeCommitLog": 64 * 1024 * 1024, **BROKER_CONF})
    jb.home = java_home
    started: list[Any] = []
    try:
        t = threading.Thread(target=lambda: started.append(jb.start(timeout=180)))
        t.start()
        ns.start(timeout=60)
        br.start(timeout=60)
        t.join()
        assert started, f"the Java broker did not start:\n{jb.log_tail()}"
        yield [RestartSide("rmqd", ns.namesrv_addr, br.stop, lambda: br.start(timeout=60), tmp / "client-rmqd"),
               RestartSide("java", jb.namesrv_addr, jb.stop_broker, jb.restart_broker, tmp / "client-java")]
    finally:
        br.stop()
        ns.stop()
        jb.stop()


def run_with_restart(side: RestartSide, classes: Path, home: Path, topic: str) -> dict[str, Any]:
    """The driver's ``failover-restart`` scenario; on its "ready" line the broker is stopped, and started
    again once the producer has seen three failed sends."""
    ctl = side.scratch / topic
    ctl.mkdir(parents=True)
    argv = java.java_command("Driver", "failover-restart", "--ns", side.namesrv_addr, "--topic", topic,
                             "--ctl", str(ctl), "--wait", str(TIMEOUT - 60), extra_cp=classes,
                             scratch=side.scratch, home=home)
    lines: list[dict[str, Any]] = []
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr: list[str] = []
    threading.Thread(target=lambda: stderr.append(proc.stderr.read() if proc.stderr else ""), daemon=True).start()
    t0 = time.monotonic()
    try:
        assert proc.stdout is not None
        stopped_at = -1
        for raw in proc.stdout:
            if not raw.startswith("{"):
                continue
            line = json.loads(raw)
            lines.append(line)
            if line["kind"] == "ready":
                side.stop()
                stopped_at = len(lines)
            elif stopped_at >= 0 and len([x for x in lines[stopped_at:] if "error" in x]) >= 3:
                stopped_at = -1
                side.start()
                (ctl / "restarted").touch()
        rc = proc.wait(timeout=max(1.0, TIMEOUT - (time.monotonic() - t0)))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = stderr[0][-3000:] if stderr else ""
    assert rc == 0, f"driver failed on {side.name} (rc {rc}):\n" + "\n".join(map(json.dumps, lines[-5:])) + err
    return {"lines": lines, "seconds": time.monotonic() - t0}


def summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """What the application saw, without what timing decides: which sends fail and how many (the driver
    sends every 100 ms whatever the broker does, and each broker takes its own time to stop and boot)."""
    ready = next(i for i, x in enumerate(lines) if x["kind"] == "ready")
    sends = [x for x in lines if x["kind"] == "send"]
    acked = {x["idx"] for x in sends if x.get("status") == "SEND_OK"}
    consumed = [x for x in lines if x["kind"] == "consumed"]
    before = [x for x in lines[:ready] if x["kind"] == "consumed"]
    after = [x for x in lines[ready:] if x["kind"] == "consumed"]
    committed = {x["queueId"]: x["consumerOffset"] for x in lines[:ready] if x["kind"] == "offset"}
    final = [x for x in lines[ready:] if x["kind"] == "offset"]

    def kinds(phase: str) -> list[dict[str, Any]]:
        # the remark is free text: the broker's address, the retry count's cost in ms
        return sorted({json.dumps({k: v for k, v in x["error"].items() if k != "remark"}, sort_keys=True)
                       for x in sends if x["phase"] == phase and "error" in x})

    return {
        "statuses": sorted({x["status"] for x in sends if "status" in x}),
        "failures during the outage": kinds("outage"),
        "failures after the restart": kinds("after"),
        "committed before the outage": committed,
        "every SEND_OK consumed": acked <= {x["idx"] for x in consumed},
        "consumed again after the restart": sorted({x["idx"] for x in before} & {x["idx"] for x in after}),
        # per queue, the first offset consumed after the outage: the committed one (no restart from 0)
        "resumed at the committed offset": all(
            min(x["queueOffset"] for x in after if x["queueId"] == q) == committed[q]
            for q in {x["queueId"] for x in after}),
        "reconsumeTimes": sorted({x["reconsumeTimes"] for x in consumed}),
        "final offsets committed": all(x["brokerOffset"] == x["consumerOffset"] for x in final),
        "final offsets count the SEND_OKs": sum(x["brokerOffset"] for x in final) == len(acked),
    }


def test_broker_restart(restart_sides: list[RestartSide], driver_classes: Path, java_home: Path) -> None:
    """Broker stopped (SIGTERM) and started on the same store and ports while the clients run."""
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(run_with_restart, s, driver_classes, java_home, "failover_restart")
                   for s in restart_sides]
        runs = {s.name: f.result() for s, f in zip(restart_sides, futures, strict=True)}
    seen = {name: summary(run["lines"]) for name, run in runs.items()}
    assert seen["rmqd"] == seen["java"], json.dumps(seen, indent=1)
    got = seen["rmqd"]
    # the scenario itself happened: sends failed while the broker was down, and consumption went on
    assert got["failures during the outage"] and got["every SEND_OK consumed"], got
    assert got["consumed again after the restart"] == [] and got["resumed at the committed offset"], got
    assert got["final offsets committed"] and got["final offsets count the SEND_OKs"], got
