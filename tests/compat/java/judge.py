"""The Java client suite's judge: run one driver scenario against rmqd and against the Java 4.9.8 broker
at once, normalise only what RocketMQ allows to differ between two brokers, and compare the rest.

The driver (``src/*.java``) prints one JSON object a line: what the application saw. Everything it
prints is compared, except the fields and values listed in :data:`DROPPED` and :func:`alias_ids` (each
with the reason RocketMQ gives them to differ); a scenario may name more, with its reason, at its call.
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmq.testing import java

SRC = Path(__file__).parent / "src"

# Fields of a message (or send result) that encode where and when it was stored, not what was stored:
DROPPED: dict[str, str] = {
    "bornTimestamp": "the producer's wall clock",
    "storeTimestamp": "the broker's wall clock",
    "bornHost": "the producer's address",
    "storeHost": "the broker's address (each broker listens on its own free port)",
    "commitLogOffset": "physical offset: depends on everything either broker stored before (system topics too)",
    "preparedTransactionOffset": "a commitlog offset, as above",
    "offsetMsgId": "RocketMQ's offset msgId is the store host + commitlog offset (both above)",
    "remark": "an exception's text: free wording (the broker's address, its parser's messages); its class "
              "and response code are compared",
}
# properties the client stamps with its own clock (never stored by the broker)
DROPPED_PROPERTIES: dict[str, str] = {
    "CONSUME_START_TIME": "the consumer's wall clock when it handed the message over",
}
# message ids the client makes (UNIQ_KEY: client IP + pid + time + counter; transaction and correlation
# ids): equal ids must stay equal and distinct ones distinct, their values differ run to run
_ID = re.compile(r"\b[0-9A-F]{32,}\b")
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def alias_ids(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replace every client-made id by ``id<n>``, numbered in order of first appearance."""
    seen: dict[str, str] = {}

    def sub(m: re.Match[str]) -> str:
        return seen.setdefault(m.group(0), f"id{len(seen)}")

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return _UUID.sub(sub, _ID.sub(sub, v))
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return [walk(line) for line in lines]


def drop_fields(lines: list[dict[str, Any]], extra: Iterable[str] = ()) -> list[dict[str, Any]]:
    drop = set(DROPPED) | set(extra)

    def walk(v: Any) -> Any:
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if k in drop:
                    continue
                if k == "properties" and isinstance(x, dict):
                    out[k] = {p: y for p, y in x.items() if p not in DROPPED_PROPERTIES and p not in drop}
                else:
                    out[k] = walk(x)
            return out
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    return [walk(line) for line in lines]


def rotate_queues(lines: list[dict[str, Any]], queues: int = 4) -> list[dict[str, Any]]:
    """Queue ids relative to the queue of message ``idx`` 0: the producer's round robin starts at a
    random queue (its per-thread index is seeded randomly), so only the rotation is the broker's."""
    first = None
    for line in lines:
        for rec in (line.get("result"), line.get("message")):
            if rec and (line.get("idx") == 0 or (rec.get("properties") or {}).get("idx") == "0"):
                first = rec["queueId"]
                break
        if first is not None:
            break
    if first is None:
        return lines
    out = []
    for line in lines:
        line = json.loads(json.dumps(line))
        for key in ("result", "message"):
            rec = line.get(key)
            if rec and "queueId" in rec:
                rec["queueId"] = (rec["queueId"] - first) % queues
                props = rec.get("properties") or {}
                if "REAL_QID" in props:
                    props["REAL_QID"] = str((int(props["REAL_QID"]) - first) % queues)
        out.append(line)
    return sort_runs(out)


def overlapping_sends(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`rotate_queues`, and within each queue the stored messages in ``idx`` order with the queue's
    offsets handed out again in that order (send results follow their message). Async and oneway sends
    overlap on the connection, and the Java 4.9.8 broker stores them with ``min(cores, 4)`` send threads,
    so two sends to one queue may be stored in either order; RocketMQ promises no order for them."""
    lines = rotate_queues(lines)
    by_queue: dict[Any, list[dict[str, Any]]] = {}
    for line in lines:
        m = line.get("message")
        if line["kind"] == "stored" and m and "queueOffset" in m:
            by_queue.setdefault(m["queueId"], []).append(m)
    moved: dict[tuple[Any, Any], Any] = {}
    for qid, msgs in by_queue.items():
        offsets = sorted(m["queueOffset"] for m in msgs)
        for m, off in zip(sorted(msgs, key=lambda m: int((m.get("properties") or {}).get("idx", -1))), offsets,
                          strict=True):
            moved[(qid, m["queueOffset"])] = off
    for line in lines:
        for key in ("result", "message"):
            rec = line.get(key)
            if rec and (rec.get("queueId"), rec.get("queueOffset")) in moved:
                rec["queueOffset"] = moved[(rec["queueId"], rec["queueOffset"])]
    return sort_runs(lines)


def without_idle_retry_offsets(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Leave out a push group's %RETRY% queue while it is empty and unconsumed (offsets 0/0): whether the
    consumer has committed it yet is a race - it learns the retry topic's route from its periodic name
    server poll, which may come before or after its first heartbeat created the topic."""
    return [line for line in lines if not (
        line["kind"] == "offset" and line["queue"]["topic"].startswith("%RETRY%")
        and line["brokerOffset"] == line.get("consumerOffset", 0) == 0)]


def _msg_key(line: dict[str, Any]) -> tuple[Any, ...]:
    m = line.get("message") or {}
    return (str(line.get("consumer", "")), m.get("topic", ""), m.get("queueId", 0), m.get("queueOffset", 0),
            m.get("body", ""))


def sort_runs(lines: list[dict[str, Any]], kinds: tuple[str, ...] = ("stored",)) -> list[dict[str, Any]]:
    """Each run of consecutive lines of ``kinds`` in (consumer, topic, queue, offset) order."""
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []
    for line in [*lines, {"kind": None}]:
        if line["kind"] in kinds:
            run.append(line)
            continue
        out.extend(sorted(run, key=_msg_key))
        run = []
        if line["kind"] is not None:
            out.append(line)
    return out


@dataclass
class Side:
    """One broker under judgement: its name server and a scratch folder for its client's files."""

    name: str
    namesrv_addr: str
    scratch: Path
    broker: Any = None  # the RmqdProcess or JavaBroker behind it


@dataclass
class Outcome:
    side: Side
    rc: int
    lines: list[dict[str, Any]]
    stderr: str
    seconds: float

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["kind"] == kind]


@dataclass
class Judge:
    """Runs ``Driver`` subcommands against every side at once and compares their normalised output."""

    home: Path
    classes: Path
    sides: list[Side]
    log: list[str] = field(default_factory=list)

    def run_one(self, side: Side, cmd: str, opts: dict[str, Any], timeout: float = 240) -> Outcome:
        args: list[str] = [cmd, "--ns", side.namesrv_addr]
        for k, v in opts.items():
            args += [f"--{k}", str(v).lower() if isinstance(v, bool) else str(v)]
        argv = java.java_command("Driver", *args, extra_cp=self.classes, scratch=side.scratch, home=self.home)
        t0 = time.monotonic()
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
        return Outcome(side, p.returncode, lines, p.stderr, time.monotonic() - t0)

    def run(self, cmd: str, **opts: Any) -> list[Outcome]:
        """The scenario on every side in parallel (the same topic and group names: the brokers are apart)."""
        with ThreadPoolExecutor(len(self.sides)) as pool:
            futures = [pool.submit(self.run_one, side, cmd, opts) for side in self.sides]
            outs = [f.result() for f in futures]
        for o in outs:
            self.log.append(f"{cmd} on {o.side.name}: rc={o.rc} {len(o.lines)} lines in {o.seconds:.1f}s")
            assert o.rc == 0, (f"driver {cmd} failed on {o.side.name} (rc {o.rc}):\n"
                               + "\n".join(json.dumps(x) for x in o.lines[-5:]) + "\n" + o.stderr[-3000:])
        return outs

    def same(self, cmd: str, *, normalise: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
             drop: Iterable[str] = (), **opts: Any) -> list[dict[str, Any]]:
        """Run ``cmd`` on both brokers; assert the application saw the same (after the normalisation
        named here and above); return the rmqd side's normalised lines for scenario-specific checks."""
        outs = self.run(cmd, **opts)
        views = [self.view(o.lines, normalise=normalise, drop=drop) for o in outs]
        assert_same(views, [o.side.name for o in outs])
        return views[0]

    def same_steps(self, steps: list[tuple[str, dict[str, Any]]], *, normalise: Callable[
            [list[dict[str, Any]]], list[dict[str, Any]]] | None = None, drop: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Like :meth:`same` for scenarios of several driver runs (a producer restarted): each step on both
        brokers at once, one after the other; what each side saw, in order, is compared whole."""
        seen: list[list[dict[str, Any]]] = [[] for _ in self.sides]
        for cmd, opts in steps:
            for i, o in enumerate(self.run(cmd, **opts)):
                seen[i] += [{**line, "step": cmd} for line in o.lines]
        views = [self.view(lines, normalise=normalise, drop=drop) for lines in seen]
        assert_same(views, [s.name for s in self.sides])
        return views[0]

    @staticmethod
    def view(lines: list[dict[str, Any]], *, normalise: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
             | None = None, drop: Iterable[str] = ()) -> list[dict[str, Any]]:
        lines = without_idle_retry_offsets(drop_fields(lines, drop))
        if normalise is not None:
            lines = normalise(lines)
        return alias_ids(lines)


def assert_same(views: list[list[dict[str, Any]]], names: list[str]) -> None:
    """Every view equal to the first; else a unified diff, one JSON object a line."""
    first = [json.dumps(x, sort_keys=True) for x in views[0]]
    for view, name in zip(views[1:], names[1:], strict=True):
        other = [json.dumps(x, sort_keys=True) for x in view]
        if first != other:
            diff = "\n".join(difflib.unified_diff(other, first, name, names[0], lineterm="", n=2))
            raise AssertionError(f"{names[0]} and {name} differ in what the application saw:\n{diff}")
    assert views[0], "the scenario printed nothing"
