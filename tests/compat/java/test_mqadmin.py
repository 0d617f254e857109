"""Apache RocketMQ 4.9.8's ``mqadmin`` as the judge of rmqd and of ``rmqadmin``.

Part 1: every 4.9.8 command that makes sense for rmq runs against rmqd and against the Java broker
holding the same state (topics, messages at the same queue offsets, groups, an online Java consumer and
producer); exit status and output must agree once what must differ is normalised (:func:`normalise`).
Part 2: ``rmqadmin`` takes mqadmin's flags (the option table is asked of 4.9.8 itself) and prints its
columns, both run against the same rmqd.

One JVM runs every mqadmin command of the module (``mqadmin/AdminShell.java``: a JVM per command costs
seconds here), and one rmqd and one Java broker serve the whole module.
"""

from __future__ import annotations

import json
import operator
import re
import select
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import click
import pytest
from anyio.from_thread import start_blocking_portal

from rmq.client import PushConsumer
from rmq.client.cli import main as rmqadmin_main
from rmq.testing import java
from rmq.testing.daemon import RmqdProcess, eventually
from rmq.testing.rmqadmin import run_process as rmqadmin

pytestmark = pytest.mark.java

SHELL_SRC = Path(__file__).with_name("mqadmin") / "AdminShell.java"
TOPIC, GROUP, CONSUMER, PRODUCER = "AdmT", "AdmG", "AdmC", "AdmP"
# (body, keys, tags, queue id): sent to both brokers in this order, so offsets and index hits line up
MESSAGES = [("hello-1", "key1", "TagA", 0), ("hello-2", "key2", "TagB", 1), ("hello-3", "key3 key1", "TagA", 0)]


@dataclass
class Ran:
    exit: int
    out: str
    err: str

    @property
    def failure(self) -> str:
        """What went wrong, as far as both brokers must agree: the command failed, and RocketMQ's CODE."""
        if "command failed" not in self.err and "Exception" not in self.err:
            return ""
        code = re.search(r"CODE: (\d+)", self.err)
        return f"failed CODE {code.group(1)}" if code else "failed"


class AdminShell:
    """``mqadmin`` commands in one long-lived JVM (see AdminShell.java); a hung command kills it."""

    def __init__(self, scratch: Path) -> None:
        home = java.require()
        classes = java.compile_java([SHELL_SRC], scratch / "classes", home)
        cmd = java.java_command("AdminShell", extra_cp=classes, scratch=scratch, home=home)
        cmd.insert(cmd.index("-cp"), "-Djava.security.manager=allow")  # System.exit trapped per command
        self.errlog = open(scratch / "adminshell.err", "wb")  # noqa: SIM115 - closed in close()
        # cwd: consumerStatus writes each member's running info under ./<time>/<clientId>
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errlog,
                                     env=java.client_env(home, scratch), cwd=scratch)

    def run(self, *args: str, timeout: float = 120) -> Ran:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write((json.dumps(list(args)) + "\n").encode())
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.close()
            raise AssertionError(f"mqadmin {' '.join(args)}: no answer in {timeout} s")
        line = self.proc.stdout.readline()
        assert line, f"the mqadmin JVM died on {args}"
        doc = json.loads(line)
        return Ran(doc["exit"], doc["out"], doc["err"])

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.run("+stop", timeout=30)
            except AssertionError:
                pass
            self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.errlog.close()


@dataclass
class Side:
    """One broker (rmqd or Java) as mqadmin sees it, and what normalises its answers."""

    name: str
    namesrv: str
    broker: str
    workdir: Path
    ids: dict[str, str] = field(default_factory=dict)  # msgIds of MESSAGES, by label

    def normalise(self, text: str) -> str:
        """What must differ between two brokers made the same: their addresses and directories, the
        client instances named after the side, times (clocks), msgIds (they embed address and pid),
        response times, the version (rmqd's says it is rmq), and the padding printf gave those."""
        text = text.replace(str(self.workdir), "<dir>").replace(self.namesrv, "<namesrv>")
        text = text.replace(self.broker, "<broker>")
        port = int(self.broker.rsplit(":", 1)[1])
        text = re.sub(rf"\b{port + 1}\b", "<haport>", text)
        text = re.sub(rf"\b{self.name}\b", "<side>", text)
        text = re.sub(r"127\.0\.0\.1:\d+", "<client>", text)  # born hosts, client connections
        text = re.sub(r"\b[0-9A-F]{32}(?:[0-9A-F]{24})?\b", "<msgid>", text)
        text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(,\d{3})?", "<time>", text)
        text = re.sub(r"\b1\d{12}\b", "<ms>", text)
        text = re.sub(r"\bV\d+_\d+_\d+(?: \(rmq\))?", "<version>", text)
        text = re.sub(r"\brt=\d+ms", "rt=<ms>", text)
        return re.sub(r"[ \t]+", " ", text)

    def args(self, args: tuple[str, ...]) -> list[str]:
        return [a.format(broker=self.broker, namesrv=self.namesrv, **self.ids) for a in args] + ["-n", self.namesrv]


@dataclass
class Pair:
    shell: AdminShell
    rmqd: Side
    java: Side
    scratch: Path

    def both(self, *args: str) -> tuple[Ran, Ran]:
        """The command on both sides; ``{broker}``, ``{namesrv}`` and msgId labels are filled per side."""
        return self.shell.run(*self.rmqd.args(args)), self.shell.run(*self.java.args(args))

    def same(self, *args: str, ordered: bool = True, numbers: bool = True, mask: str = "") -> str:
        """The command's exit, failure and normalised output are the same on both sides (``ordered=False``:
        as sets of lines; ``numbers=False``: rates and other timing figures masked; ``mask``: a pattern
        of what else depends on timing); rmqd's output."""
        r, j = self.both(*args)
        assert r.exit == j.exit, (args, r, j)
        assert r.failure == j.failure, (args, r.err[-1500:], j.err[-1500:])
        ro, jo = self.rmqd.normalise(r.out), self.java.normalise(j.out)
        if not numbers:
            ro, jo = _without_idle_retry_rows(_mask_rates(ro)), _without_idle_retry_rows(_mask_rates(jo))
        if mask:
            ro, jo = re.sub(mask, "<masked>", ro, flags=re.M), re.sub(mask, "<masked>", jo, flags=re.M)
        if ordered:
            assert ro.splitlines() == jo.splitlines(), f"{args}\n--- rmqd\n{ro}\n--- java\n{jo}"
        else:
            assert sorted(ro.splitlines()) == sorted(jo.splitlines()), f"{args}\n--- rmqd\n{ro}\n--- java\n{jo}"
        return r.out


def _v5_system(topic: str) -> bool:
    """A topic a RocketMQ 5 broker (rmqd) has from its start that 4.9.8 has not: the timer's and pop's
    (rmq_sys_*), and the transaction half/op topics (4.9.8 makes the half one at its first check, a
    minute after start, and never the op one)."""
    return topic.startswith("rmq_sys_") or topic in ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC")


def _without_idle_retry_rows(text: str) -> str:
    """consumerProgress without a push group's %RETRY% queue while it is empty and never consumed (0 0 0,
    N/A): whether the consumer has committed it yet is a race - it learns the retry topic's route from its
    periodic name server poll, before or after the 5 s offset persist (the Java judge drops it alike)."""
    return re.sub(r"^%RETRY%\S+ \S+ \d+ 0 0 0 N/A\n", "", text, flags=re.M)


def _mask_rates(text: str) -> str:
    """Figures that depend on when the command ran (TPS over the last minute): decimals masked."""
    return re.sub(r"\b\d+\.\d+\b", "<rate>", text)


def _start(factory: pytest.TempPathFactory) -> tuple[RmqdProcess, java.JavaBroker]:
    rdir, jdir = factory.mktemp("rmqd"), factory.mktemp("javabroker")
    rmqd = RmqdProcess(rdir)
    jb = java.JavaBroker(jdir, conf={"mappedFileSizeCommitLog": 64 * 1024 * 1024})
    with ThreadPoolExecutor(2) as pool:  # the JVMs' start-up overlaps rmqd's
        started = [pool.submit(rmqd.start), pool.submit(jb.start)]
        errors = [f.exception() for f in started]
    if any(errors):
        rmqd.stop()
        jb.stop()
        raise next(e for e in errors if e)
    return rmqd, jb


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    java.require()
    scratch = tmp_path_factory.mktemp("mqadmin")
    rmqd, jb = _start(tmp_path_factory)
    shell = AdminShell(scratch)
    try:
        p = Pair(shell, Side("rmqd", rmqd.namesrv_addr, rmqd.broker_addr, rmqd.workdir),
                 Side("java", jb.namesrv_addr, jb.broker_addr, jb.workdir), scratch)
        _build_state(p)
        yield p
    finally:
        shell.close()
        rmqd.stop()
        jb.stop()
        shutil.rmtree(rmqd.workdir, ignore_errors=True)
        shutil.rmtree(jb.workdir, ignore_errors=True)


def _build_state(p: Pair) -> None:
    """The same state on both sides, made by mqadmin itself: a 4-queue topic, MESSAGES at fixed queues,
    a subscription group, an online consumer group (which consumes everything) and a producer group."""
    p.same("updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "4", "-w", "4")
    for i, (body, keys, tags, qid) in enumerate(MESSAGES):
        r, j = p.both("sendMessage", "-t", TOPIC, "-p", body, "-k", keys, "-c", tags, "-b", "broker-a", "-i", str(qid))
        for side, ran in ((p.rmqd, r), (p.java, j)):
            assert "SEND_OK" in ran.out, ran
            side.ids[f"uniq{i}"] = re.findall(r"\b[0-9A-F]{32}(?:[0-9A-F]{24})?\b", ran.out)[0]
    p.same("updateSubGroup", "-c", "DefaultCluster", "-g", GROUP)
    for side in (p.rmqd, p.java):
        assert p.shell.run("+consumer", side.namesrv, CONSUMER, TOPIC, side.name).exit == 0
        assert p.shell.run("+producer", side.namesrv, PRODUCER, TOPIC, side.name).exit == 0
    for side in (p.rmqd, p.java):
        def consumed(side: Side = side) -> bool:  # every message consumed and the offsets committed
            out = p.shell.run("consumerProgress", "-g", CONSUMER, "-n", side.namesrv).out
            return "Diff Total: 0" in out and f"{TOPIC} " in out
        eventually(consumed, 90, f"{CONSUMER} consumed everything on {side.name}")
        port = int(side.broker.rsplit(":", 1)[1])
        for i in range(len(MESSAGES)):  # the offset msgIds: store address (127.0.0.1:port) + commitlog offset
            ran = p.shell.run("queryMsgByUniqueKey", "-t", TOPIC, "-i", side.ids[f"uniq{i}"], "-n", side.namesrv)
            found = re.search(r"CommitLog Offset:\s+(\d+)", ran.out)
            assert found, ran
            side.ids[f"offset{i}"] = f"7F000001{port:08X}{int(found.group(1)):016X}"


# ---------------------------------------------------------------------------------------------- part 1: the brokers


@pytest.mark.parametrize("args", [
    ("topicClusterList", "-t", TOPIC),
    ("topicRoute", "-t", TOPIC),
    ("topicStatus", "-t", TOPIC),
    ("topicRoute", "-t", "NoSuchTopic"),
    ("consumerProgress", "-g", "NoSuchGroup"),
    ("consumerConnection", "-g", CONSUMER),
    ("consumerConnection", "-g", GROUP),
    ("producerConnection", "-g", PRODUCER, "-t", TOPIC),
    ("consumerStatus", "-g", CONSUMER),
    ("getConsumerConfig", "-g", GROUP),
    ("getConsumerConfig", "-g", CONSUMER),
    ("queryMsgByKey", "-t", TOPIC, "-k", "key1"),
    ("queryMsgByKey", "-t", TOPIC, "-k", "nokey"),
    ("queryMsgByOffset", "-t", TOPIC, "-b", "broker-a", "-i", "0", "-o", "1"),
    ("queryMsgByUniqueKey", "-t", TOPIC, "-i", "{uniq1}"),
    ("queryMsgByUniqueKey", "-t", TOPIC, "-i", "{uniq0}", "-g", CONSUMER, "-d", "192.0.2.1@nobody"),
    ("queryMsgById", "-i", "{offset2}"),
    ("printMsg", "-t", TOPIC, "-d", "true"),
    ("printMsg", "-t", TOPIC, "-s", "TagB"),
    ("printMsgByQueue", "-t", TOPIC, "-a", "broker-a", "-i", "0", "-p", "true", "-d", "true", "-f", "true"),
    ("queryCq", "-t", TOPIC, "-q", "0", "-i", "0", "-c", "2"),
    ("allocateMQ", "-t", TOPIC, "-i", "192.0.2.1@a,192.0.2.1@b"),
    ("updateOrderConf", "-t", "NoOrderConf", "-m", "get"),
    ("topicRoute",),  # a bad command line: the usage and exit status 1
], ids=lambda a: "-".join(a).replace("{", "").replace("}", ""))
def test_same_answer(pair: Pair, args: tuple[str, ...]) -> None:
    pair.same(*args)


@pytest.mark.parametrize("args", [
    ("clusterList",),  # #Hour: hours since the earliest message; #SPACE: disk use, both probed at that moment
    ("consumerProgress",),
    ("consumerProgress", "-g", CONSUMER),
    ("brokerConsumeStats", "-b", "{broker}"),
    ("statsAll", "-t", TOPIC),
], ids=lambda a: "-".join(a).replace("{", "").replace("}", ""))
def test_same_answer_but_rates(pair: Pair, args: tuple[str, ...]) -> None:
    pair.same(*args, numbers=False)


def test_topic_list(pair: Pair) -> None:
    """The same topics, system ones included; rmqd, a RocketMQ 5 broker, has 5's own system topics too
    (rmq_sys_*: timer and pop revive), which 4.9.8 does not know."""
    r, j = pair.both("topicList")
    assert (r.exit, r.failure) == (j.exit, j.failure)
    assert {t for t in r.out.split() if not _v5_system(t)} == {t for t in j.out.split() if not _v5_system(t)}


def test_broker_status(pair: Pair) -> None:
    """Every runtime key of the Java broker is in rmqd's; the figures both must agree on do."""
    r, j = pair.both("brokerStatus", "-b", "{broker}")
    rt, jt = _kv(r.out, ":"), _kv(j.out, ":")
    # not kept by rmqd: the put latency histogram (putLatency99/999, putMessageDistributeTime); the
    # disk ratio per commitlog path is one path here, given as commitLogDiskRatio
    missing = set(jt) - set(rt) - {f"commitLogDiskRatio_{pair.java.workdir}/store/commitlog", "putLatency99",
                                   "putLatency999", "putMessageDistributeTime"}
    assert not missing, f"runtime keys rmqd lacks: {sorted(missing)}"
    for key in ("brokerVersion", "commitLogMinOffset", "commitLogMaxOffset"):
        assert rt[key] == jt[key], key
    size = r"\d+ B|\d+\.\d [KMGT]iB"  # how much waits for a flush depends on when it ran; its form does not
    assert re.fullmatch(size, rt["remainHowManyDataToFlush"]) and re.fullmatch(size, jt["remainHowManyDataToFlush"])


def _kv(text: str, sep: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (ln.partition(sep) for ln in text.splitlines() if sep in ln)}


# Settings whose defaults RocketMQ 5 changed (rmqd follows 5), or which the test harness set.
DEFAULTS_5 = {"fileReservedTime", "waitTimeMillsInSendQueue"}


@pytest.mark.parametrize("cmd", ["getBrokerConfig", "getNamesrvConfig"])
def test_config_values(pair: Pair, cmd: str) -> None:
    """The settings both have, with the same values: paths aside (each lays out its directory its own
    way, and rmqd leaves derived ones empty), ports, and brokerIP2 (Java takes the host's address when
    unset, rmqd brokerIP1)."""
    args = ("-b", "{broker}") if cmd == "getBrokerConfig" else ()
    r, j = pair.both(cmd, *args)
    rc = _kv(pair.rmqd.normalise(r.out), "=")
    jc = _kv(pair.java.normalise(j.out), "=")
    paths = {k for k in set(rc) | set(jc) if "<dir>" in rc.get(k, "") + jc.get(k, "") or k.startswith("storePath")}
    common = (set(rc) & set(jc)) - DEFAULTS_5 - paths - {"haListenPort", "listenPort", "brokerIP2"}
    assert common, (r, j)
    assert {k: rc[k] for k in common} == {k: jc[k] for k in common}


def test_export_metadata_and_metrics(pair: Pair) -> None:
    for cmd, name in (("exportMetadata", "metadata.json"), ("exportMetrics", "metrics.json"),
                      ("exportConfigs", "configs.json")):
        docs = []
        for side in (pair.rmqd, pair.java):
            out = pair.scratch / f"export-{side.name}"
            ran = pair.shell.run(cmd, "-c", "DefaultCluster", "-f", str(out), "-n", side.namesrv)
            assert ran.exit == 0 and not ran.failure, ran
            docs.append(json.loads((out / name).read_text()))
        assert set(docs[0]) == set(docs[1]), cmd
        if cmd == "exportConfigs":  # the same keys of each broker (values are each broker's own settings)
            assert docs[0]["clusterScale"] == docs[1]["clusterScale"]
            assert [set(b) for b in docs[0]["brokerConfigs"].values()] == \
                [set(b) for b in docs[1]["brokerConfigs"].values()]


def test_topic_writes(pair: Pair) -> None:
    """Creating, changing and deleting topics and their order configuration read back the same."""
    pair.same("updateTopic", "-c", "DefaultCluster", "-t", "AdmOrder", "-r", "2", "-w", "2", "-o", "true")
    pair.same("topicRoute", "-t", "AdmOrder")
    pair.same("updateOrderConf", "-t", "AdmOrder", "-m", "get")
    pair.same("updateTopicPerm", "-t", "AdmOrder", "-c", "DefaultCluster", "-p", "4")
    pair.same("topicRoute", "-t", "AdmOrder")
    pair.same("updateOrderConf", "-t", "AdmOrder", "-v", "broker-a:2", "-m", "put")
    pair.same("updateOrderConf", "-t", "AdmOrder", "-m", "get")
    pair.same("updateOrderConf", "-t", "AdmOrder", "-m", "delete")
    pair.same("deleteTopic", "-c", "DefaultCluster", "-t", "AdmOrder")
    pair.same("topicRoute", "-t", "AdmOrder")
    pair.same("deleteTopic", "-c", "DefaultCluster", "-t", "NoSuchTopic")


def test_group_writes(pair: Pair) -> None:
    pair.same("updateSubGroup", "-c", "DefaultCluster", "-g", "AdmG2", "-r", "3", "-s", "false", "-d", "true")
    pair.same("getConsumerConfig", "-g", "AdmG2")
    pair.same("cloneGroupOffset", "-s", CONSUMER, "-d", "AdmG2", "-t", TOPIC)
    pair.same("consumerProgress", "-g", "AdmG2")
    pair.same("resetOffsetByTime", "-g", "AdmG2", "-t", TOPIC, "-s", "0")  # offline group: refused alike
    pair.same("resetOffsetByTime", "-g", CONSUMER, "-t", TOPIC, "-s", "now")
    pair.same("skipAccumulatedMessage", "-g", CONSUMER, "-t", TOPIC)
    pair.same("deleteSubGroup", "-c", "DefaultCluster", "-g", "AdmG2")
    pair.same("getConsumerConfig", "-g", "AdmG2")


def test_namesrv_writes(pair: Pair) -> None:
    pair.same("updateKvConfig", "-s", "ORDER_TOPIC_CONFIG", "-k", "KvT", "-v", "broker-a:4")
    pair.same("updateOrderConf", "-t", "KvT", "-m", "get")
    pair.same("deleteKvConfig", "-s", "ORDER_TOPIC_CONFIG", "-k", "KvT")
    pair.same("updateOrderConf", "-t", "KvT", "-m", "get")
    pair.same("updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true")
    r, j = pair.both("getNamesrvConfig")
    assert "orderMessageEnable                                =  true" in r.out and j.out.count("=  true") >= 1
    pair.same("updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "false")


def test_broker_writes(pair: Pair) -> None:
    """Write permission wiped and given back on the name server, broker settings changed at run time,
    store maintenance. wipe/addWritePerm print how many topics they changed: rmqd, a RocketMQ 5 broker,
    registers 5's system topics too (rmq_sys_*), so that count is checked against its own topic list."""
    for cmd in ("wipeWritePerm", "addWritePerm"):
        r, j = pair.both(cmd, "-b", "broker-a")
        counts = []
        for side, ran in ((pair.rmqd, r), (pair.java, j)):
            assert ran.exit == 0 and not ran.failure, ran
            head, _, count = side.normalise(ran.out).strip().rpartition(", ")
            topics = pair.shell.run("topicList", "-n", side.namesrv).out.split()
            counts.append((head, int(count) - sum(map(_v5_system, topics))))
        assert counts[0] == counts[1]
        pair.same("topicRoute", "-t", TOPIC)
    pair.same("updateBrokerConfig", "-b", "{broker}", "-k", "traceOn", "-v", "false")
    r, j = pair.both("getBrokerConfig", "-b", "{broker}")
    assert _kv(r.out, "=")["traceOn"] == _kv(j.out, "=")["traceOn"] == "false"
    pair.same("updateBrokerConfig", "-b", "{broker}", "-k", "traceOn", "-v", "true")
    for cmd in ("cleanExpiredCQ", "cleanUnusedTopic", "deleteExpiredCommitLog"):
        pair.same(cmd, "-c", "DefaultCluster")


def test_messages_sent_and_consumed(pair: Pair) -> None:
    """Sends and a browse; clusterRT is left out: it sends to every broker again every -i seconds
    until stopped (a monitor, as startMonitoring), and each of its rounds is sendMsgStatus's send."""
    pair.same("updateTopic", "-c", "DefaultCluster", "-t", "AdmSend", "-r", "1", "-w", "1")
    pair.same("sendMessage", "-t", "AdmSend", "-p", "body-x", "-k", "kx", "-c", "TagX")
    pair.same("consumeMessage", "-t", "AdmSend", "-c", "1")
    # its producer's 3 s send timeout can pass on a busy machine (either broker): a failed round is run again
    for attempt in range(3):
        r, j = pair.both("sendMsgStatus", "-b", "broker-a", "-c", "2", "-s", "64")
        if not (r.failure or j.failure) or attempt == 2:
            break
    pair.same("sendMsgStatus", "-b", "broker-a", "-c", "2", "-s", "64")
    pair.same("checkMsgSendRT", "-t", "AdmSend", "-a", "2", "-s", "64", numbers=False, mask=r"\d+$")  # each RT


# ---------------------------------------------------------------------------------------------- part 2: rmqadmin


def _java_options(pair: Pair) -> dict[str, list[dict[str, Any]]]:
    ran = pair.shell.run("+options")
    assert ran.exit == 0, ran
    return json.loads(ran.out)


# mqadmin 4.9.8 options rmqadmin does not take yet (reported in issue #29): a test fails on any other gap
KNOWN_GAPS = {
    "queryMsgById: no -u (--unitName)",  # rmq has no unit (cell) isolation for a producer to join
    "resetOffsetByTime: no -c (--cplus)",  # the C++ client's offsets: an old client-side reset, not in rmq
    "updateGlobalWhiteAddr: no -p (--aclFileFullPath)",  # rmq's ACL is one file, named in its config
}


def test_rmqadmin_takes_mqadmins_flags(pair: Pair) -> None:
    """For every command both tools have: each 4.9.8 option is an rmqadmin option with the same short
    and long name, the same required-ness, and a value where mqadmin takes one (4.9.8's long names with
    a stray trailing space count without it; those with an inner space, by their short name only).
    rmqadmin may have more (RocketMQ 5's, --json)."""
    problems = []
    for name, options in _java_options(pair).items():
        cmd = rmqadmin_main.commands.get(name)
        if cmd is None:
            continue
        mine: dict[str, click.Option] = {}
        for p in cmd.params:
            if isinstance(p, click.Option):
                for o in p.opts:
                    if o.startswith("-") and not o.startswith("--"):
                        mine[o[1:]] = p
        for o in options:
            if o["opt"] == "h":
                continue
            p = mine.get(o["opt"])
            if p is None:
                problems.append(f"{name}: no -{o['opt']} (--{o['longOpt'].strip()})")
                continue
            # 4.9.8 names a few long options with an inner space ("print msg", "print log", "machine
            # room"): no shell passes "--print msg" as one word, so any long name stands for those
            if " " not in o["longOpt"].strip() and f"--{o['longOpt'].strip()}" not in p.opts:
                problems.append(f"{name}: -{o['opt']} is {p.opts}, mqadmin's --{o['longOpt'].strip()}")
            if p.required != o["required"]:
                problems.append(f"{name}: -{o['opt']} required={p.required}, mqadmin's {o['required']}")
            if p.is_flag == o["hasArg"]:
                problems.append(f"{name}: -{o['opt']} takes a value={not p.is_flag}, mqadmin's {o['hasArg']}")
    assert not set(problems) - KNOWN_GAPS, "\n".join(sorted(set(problems) - KNOWN_GAPS))


def _columns(text: str) -> list[str]:
    """A table's header columns (mqadmin's start with '#')."""
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            return [c.strip() for c in re.findall(r"#[^#]*", line)]
    return []


@pytest.mark.parametrize("args", [
    ("clusterList",),
    ("topicStatus", "-t", TOPIC),
    ("consumerProgress", "-g", CONSUMER),
    ("consumerProgress",),
    ("consumerConnection", "-g", CONSUMER),
    ("brokerConsumeStats", "-b", "{broker}"),
    ("queryMsgByKey", "-t", TOPIC, "-k", "key1"),
    ("sendMessage", "-t", TOPIC, "-p", "columns", "-b", "broker-a", "-i", "3"),
    ("statsAll", "-t", TOPIC),
    ("topicList", "-c"),
    ("clusterList", "-m"),
], ids=lambda a: "-".join(a).replace("{", "").replace("}", ""))
def test_rmqadmin_prints_mqadmins_columns(pair: Pair, args: tuple[str, ...]) -> None:
    """Against the same rmqd, rmqadmin's table has mqadmin's columns, and (stdout a pipe) every row on
    one line."""
    argv = pair.rmqd.args(args)
    want = _columns(pair.shell.run(*argv).out)
    got = rmqadmin(*argv)
    assert want and _columns(got.stdout) == want, got.stdout


def test_rmqadmin_writes_as_mqadmin(pair: Pair) -> None:
    """The same write by either tool, with the same flags, leaves rmqd in the same state (read back by
    mqadmin): a topic made an order topic with ``-o true``, a group with mqadmin's defaults and flags."""
    side = pair.rmqd
    ns = ["-n", side.namesrv]

    def read(*args: str) -> str:
        ran = pair.shell.run(*args, *ns)
        assert ran.exit == 0 and not ran.failure, ran
        return side.normalise(ran.out)

    states = []
    for tool, suffix in (("mqadmin", "J"), ("rmqadmin", "R")):
        topic, group = f"AdmW{suffix}", f"AdmWG{suffix}"
        writes = [("updateTopic", "-c", "DefaultCluster", "-t", topic, "-r", "3", "-w", "3", "-o", "true"),
                  ("updateSubGroup", "-c", "DefaultCluster", "-g", group, "-q", "2", "-w", "0", "-m", "true")]
        for args in writes:
            if tool == "mqadmin":
                assert pair.shell.run(*args, *ns).exit == 0
            else:
                rmqadmin(*args, *ns)
        state = [read("topicRoute", "-t", topic), read("updateOrderConf", "-t", topic, "-m", "get"),
                 read("getConsumerConfig", "-g", group)]
        states.append([text.replace(group, "<group>").replace(topic, "<topic>") for text in state])
    assert states[0] == states[1]


def test_rmqadmin_prints_as_mqadmin(pair: Pair) -> None:
    """Commands whose mqadmin output is lines of text, not a table: rmqadmin prints the same lines
    against the same rmqd (getConsumerConfig: rmqd's group has RocketMQ 5's settings too, which 4.9.8's
    class has no field for, so mqadmin's lines are a subset of rmqadmin's)."""
    ns = ["-n", pair.rmqd.namesrv]

    def lines(text: str) -> list[str]:
        return [ln.strip() for ln in pair.rmqd.normalise(text).splitlines() if ln.strip()]

    def both(*args: str) -> tuple[list[str], list[str]]:
        j = pair.shell.run(*args, *ns)
        assert j.exit == 0 and not j.failure, j
        return lines(j.out), lines(rmqadmin(*args, *ns).stdout)

    java_lines, rmq_lines = both("getConsumerConfig", "-g", GROUP)
    assert java_lines and set(java_lines) <= set(rmq_lines), (java_lines, rmq_lines)
    for args in (("updateOrderConf", "-t", "PrintT", "-m", "put", "-v", "broker-a:2"),
                 ("updateOrderConf", "-t", "PrintT", "-m", "get"),
                 ("topicClusterList", "-t", TOPIC)):
        assert operator.eq(*both(*args)), args
    assert pair.shell.run("updateOrderConf", "-t", "PrintT", "-m", "delete", *ns).exit == 0
    # wipe and add by either tool in turn, each printing what the other printed at the same step
    wipe_j = lines(pair.shell.run("wipeWritePerm", "-b", "broker-a", *ns).out)
    add_r = lines(rmqadmin("addWritePerm", "-b", "broker-a", *ns).stdout)
    wipe_r = lines(rmqadmin("wipeWritePerm", "-b", "broker-a", *ns).stdout)
    add_j = lines(pair.shell.run("addWritePerm", "-b", "broker-a", *ns).out)
    assert (wipe_r, add_r) == (wipe_j, add_j) and "OK" in wipe_r[0]


def test_rmqadmin_tools_print_as_mqadmin(pair: Pair) -> None:
    """The tool-box commands (rmqadmin's cli_tools) against the same rmqd print what mqadmin prints:
    allocateMQ's JSON text (Java's hash order of clients and queues included), printMsgByQueue's
    MessageExt lines and tag counts, the send probes' rows (response times, and the queue a default
    send picks, masked), the producers online, a message's trace; the exports write the same files."""
    side = pair.rmqd
    ns = ["-n", side.namesrv]

    def mq(*args: str) -> str:
        ran = pair.shell.run(*args, *ns)
        assert ran.exit == 0 and not ran.failure, (args, ran)
        return side.normalise(ran.out)

    def rq(*args: str) -> str:
        return side.normalise(rmqadmin(*args, *ns).stdout)

    for args in (("allocateMQ", "-t", TOPIC, "-i", "192.0.2.1@b,192.0.2.1@a,10.0.0.7@c,x"),
                 ("allocateMQ", "-t", TOPIC, "-i", "one"),
                 ("printMsgByQueue", "-t", TOPIC, "-a", "broker-a", "-i", "0", "-p", "true", "-d", "true", "-f", "true"),
                 ("printMsgByQueue", "-t", TOPIC, "-a", "broker-a", "-i", "0", "-p", "true"),
                 ("printMsgByQueue", "-t", TOPIC, "-a", "broker-a", "-i", "0", "-f", "true", "-s", "TagA"),
                 ("printMsgByQueue", "-t", TOPIC, "-a", "broker-a", "-i", "1", "-f", "true", "-d", "true")):
        assert rq(*args).splitlines() == mq(*args).splitlines(), args
    # send probes: each tool sends to rmqd; the rows agree but for the RT and the queue a plain send picks
    mq("updateTopic", "-c", "DefaultCluster", "-t", "AdmRT", "-r", "2", "-w", "2")
    rt_args = ("checkMsgSendRT", "-t", "AdmRT", "-a", "3", "-s", "16")
    mask = [(r"\s+\d+$", " <rt>"), (r"Avg RT: \S+", "Avg RT: <avg>")]
    assert _masked(rq(*rt_args), mask) == _masked(mq(*rt_args), mask)
    status_args = ("sendMsgStatus", "-b", "broker-a", "-c", "2", "-s", "32")
    mask = [(r"rt=\d+ms", "rt=<ms>"), (r"queueId=\d+", "queueId=<q>"), (r"queueOffset=\d+", "queueOffset=<o>")]
    assert _masked(rq(*status_args), mask) == _masked(mq(*status_args), mask)
    # the producers online on the broker: the module's Java producer, one line each, the same but for
    # the time of its last heartbeat (a heartbeat may come between the two commands)
    beat = [(r"lastUpdateTimestamp=\d+", "lastUpdateTimestamp=<t>")]
    j_lines, r_lines = mq("producer", "-b", side.broker), rq("producer", "-b", side.broker)
    assert [ln for ln in _masked(r_lines, beat) if f"({PRODUCER})" in ln] == \
        [ln for ln in _masked(j_lines, beat) if f"({PRODUCER})" in ln] != []
    # a traced send (mqadmin's own sendMessage -m true), then its trace by either tool
    def traces_stored() -> int:
        """Messages on rmqd's trace topic (the sum of its queues' max offsets; 0 before it exists)."""
        try:
            out = rq("topicStatus", "-t", "RMQ_SYS_TRACE_TOPIC")
        except AssertionError:  # no route yet: nothing traced so far
            return 0
        rows = (ln.split() for ln in out.splitlines())
        return sum(int(f[3]) for f in rows if len(f) >= 4 and f[1].isdigit() and f[3].isdigit())

    for _ in range(3):
        before = traces_stored()
        sent = pair.shell.run("sendMessage", "-t", "AdmRT", "-p", "traced", "-m", "true", *ns)  # TOPIC stays as built
        assert sent.exit == 0, sent
        ids = re.findall(r"\b[0-9A-F]{32}(?:[0-9A-F]{24})?\b", sent.out)
        assert ids, sent
        msg_id = ids[0]
        try:
            eventually(lambda m=msg_id: "Pub" in mq("queryMsgTraceById", "-i", m), 45, "the trace indexed", interval=1)
            break
        except AssertionError:
            # 4.9.8's trace dispatcher sends a trace after its message and flushes for a bounded time at shutdown,
            # so a loaded mqadmin may exit without sending it (CI saw that once): send again only when rmqd
            # received nothing on its trace topic - a trace it stored must be found
            assert traces_stored() == before, "rmqd stored the trace but queryMsgTraceById does not find it"
    else:
        pytest.fail("three traced sends by mqadmin, and no trace reached rmqd")
    assert rq("queryMsgTraceById", "-i", msg_id).splitlines() == mq("queryMsgTraceById", "-i", msg_id).splitlines()
    # exports: the same files, the same documents (the export time aside)
    for cmd, extra, name in (("exportMetadata", ("-c", "DefaultCluster"), "metadata.json"),
                             ("exportMetadata", ("-b", side.broker, "-t", "-s"), "topic.json"),
                             ("exportMetadata", ("-b", side.broker, "-g"), "subscriptionGroup.json"),
                             ("exportConfigs", ("-c", "DefaultCluster"), "configs.json"),
                             ("exportMetrics", ("-c", "DefaultCluster"), "metrics.json")):
        docs = []
        for tool in ("mqadmin", "rmqadmin"):
            out = pair.scratch / f"tools-{tool}"
            (mq if tool == "mqadmin" else rq)(cmd, *extra, "-f", str(out))
            docs.append(json.loads((out / name).read_text()))
        # rmqd is a RocketMQ 5 broker: its topics and groups have 5's settings too, which 4.9.8's classes
        # have no field for (mqadmin drops them on reading); so mqadmin's document is within rmqadmin's
        assert _within(docs[0], docs[1], values=name != "metrics.json"), (cmd, extra, docs)


def _masked(text: str, subs: list[tuple[str, str]]) -> list[str]:
    for pattern, repl in subs:
        text = re.sub(pattern, repl, text, flags=re.M)
    return text.splitlines()


def _within(java: Any, rmq: Any, values: bool) -> bool:
    """Every key of ``java`` is in ``rmq``, nested, with the same value (``values``; else the same JSON
    type: a measurement differs from one moment to the next); the export time aside."""
    if isinstance(java, dict):
        return isinstance(rmq, dict) and all(k in rmq and (k == "exportTime" or _within(v, rmq[k], values))
                                             for k, v in java.items())
    if isinstance(java, list) and not values:
        return isinstance(rmq, list)
    if values:
        return bool(java == rmq)
    return java is None or rmq is None or isinstance(rmq, type(java)) or {type(java), type(rmq)} <= {int, float}


async def _rmq_consumer(namesrv: str, group: str, topic: str, stop: anyio.Event) -> None:
    consumer = PushConsumer(group, namesrv, listener=lambda m: None, rebalance_interval=1.0, heartbeat_interval=2.0)
    consumer.subscribe(topic, "*")
    async with consumer:
        await stop.wait()


def test_mqadmin_reads_an_rmq_consumer(pair: Pair) -> None:
    """mqadmin's consumerStatus (and its monitor) read an rmq push consumer's running info: the
    properties a Java consumer reports that mqadmin's analysis reads (consume type, start time, ...)."""
    ns = ["-n", pair.rmqd.namesrv]
    assert pair.shell.run("updateTopic", "-c", "DefaultCluster", "-t", "AdmRmq", "-r", "1", "-w", "1", *ns).exit == 0
    with start_blocking_portal() as portal:
        stop = portal.call(anyio.Event)
        future = portal.start_task_soon(_rmq_consumer, pair.rmqd.namesrv, "AdmRmqC", "AdmRmq", stop)
        try:
            online = eventually(lambda: "PYTHON" in pair.shell.run("consumerConnection", "-g", "AdmRmqC", *ns).out, 60,
                                "the rmq consumer online")
            assert online
            ran = pair.shell.run("consumerStatus", "-g", "AdmRmqC", *ns)
            assert ran.exit == 0 and not ran.failure, ran.err[:2500]
            assert "Same subscription in the same group of consumer" in ran.out, ran.out
        finally:
            portal.call(stop.set)
            future.result(30)
