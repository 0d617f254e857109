"""Apache RocketMQ 4.9.8 (Java) beside rmqd in tests: its NameServer + Broker, its tools, its client.

The jars and scripts live in a folder built from RocketMQ's source (``../shared/java`` next to the
checkout, or ``$RMQ_JAVA_HOME``). Tests that need it call :func:`require` first, which skips the test
with one line saying how to provide the folder when it is missing; CI makes sure it is there.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from rmq.testing.daemon import LoopbackBroker, eventually, free_port

_REPO = Path(__file__).resolve().parents[1]
# the checkout is `<root>/main` (or a clone anywhere): ../shared/java beside it is the default
_DEFAULT_HOMES = (_REPO.parent / "shared" / "java", Path("/work/shared/java"))
JDK_HINT = ("Apache RocketMQ 4.9.8's jars are not here: set RMQ_JAVA_HOME to a folder built by its "
            "build.sh (run-java-broker.sh, mqadmin.sh, runclass.sh, CLASSPATH.txt), or put it at ../shared/java")


def java_home() -> Path | None:
    """The RocketMQ 4.9.8 folder, or None when there is none (or no JDK to run it)."""
    env = os.environ.get("RMQ_JAVA_HOME")
    for cand in ([Path(env)] if env else list(_DEFAULT_HOMES)):
        if (cand / "run-java-broker.sh").is_file() and (cand / "CLASSPATH.txt").is_file():
            return cand.resolve() if shutil.which("java") else None
    return None


def require() -> Path:
    """The RocketMQ 4.9.8 folder; skips the calling test (one line: how to provide it) when absent."""
    home = java_home()
    if home is None:
        import pytest

        pytest.skip(JDK_HINT if shutil.which("java") else "no java on PATH (JDK 17 runs RocketMQ 4.9.8)")
    return home


def classpath(home: Path | None = None) -> str:
    home = home or require()
    return (home / "CLASSPATH.txt").read_text().strip().replace("@DIR@", str(home))


def jvm_opts(home: Path | None = None) -> list[str]:
    """JDK 17's --add-opens set RocketMQ 4.9.8 needs (from the folder's jvmopts.sh)."""
    home = home or require()
    out = subprocess.run(["bash", "-c", f'. "{home}/jvmopts.sh"; echo "$RMQ_JDK17_OPTS"'],
                         capture_output=True, text=True, check=True)
    return out.stdout.split()


def client_env(home: Path, scratch: Path) -> dict[str, str]:
    """Environment for the folder's scripts: the client's logs go to ``scratch``, never into the folder."""
    (scratch / "clienthome").mkdir(parents=True, exist_ok=True)
    return {**os.environ, "RMQ_CLIENT_HOME": str(scratch / "clienthome"), "ROCKETMQ_HOME": str(home)}


def compile_java(sources: list[Path], out: Path, home: Path | None = None) -> Path:
    """``javac`` the given sources against RocketMQ's classpath into ``out`` (skipped when up to date)."""
    home = home or require()
    out.mkdir(parents=True, exist_ok=True)
    stamp = out / ".compiled"
    newest = max(s.stat().st_mtime for s in sources)
    if stamp.exists() and stamp.stat().st_mtime >= newest:
        return out
    javac = shutil.which("javac")
    assert javac, "javac not on PATH (JDK 17)"
    p = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-cp", classpath(home), "-d", str(out),
                        *map(str, sources)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"javac failed:\n{p.stderr[-4000:]}"
    stamp.touch()
    return out


def java_command(main: str, *args: str, extra_cp: Path | str | None = None, scratch: Path,
                 home: Path | None = None, heap: str = "-Xmx256m") -> list[str]:
    """The command line running ``main`` with RocketMQ's client classpath (plus ``extra_cp``)."""
    home = home or require()
    (scratch / "clienthome").mkdir(parents=True, exist_ok=True)
    cp = classpath(home) if extra_cp is None else f"{extra_cp}:{classpath(home)}"
    return ["java", *heap.split(), "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *jvm_opts(home),
            f"-Drocketmq.home.dir={home}", f"-Dlogback.configurationFile={home}/conf/logback_client.xml",
            f"-Duser.home={scratch / 'clienthome'}", "-Drocketmq.client.logUseSlf4j=true",
            "-cp", cp, main, *args]


def mqadmin(*args: str, scratch: Path, home: Path | None = None, timeout: float = 120
            ) -> subprocess.CompletedProcess[str]:
    """RocketMQ's own ``mqadmin`` (its exit status and output as they are)."""
    home = home or require()
    return subprocess.run(["bash", str(home / "mqadmin.sh"), *args], capture_output=True, text=True,
                          timeout=timeout, env=client_env(home, scratch))


class JavaBroker(LoopbackBroker):
    """A Java NameServer + Broker pair on free loopback ports, its store and logs under ``workdir``.

    ``conf`` adds ``key=value`` lines to the generated broker.conf (brokerName, brokerRole, brokerId,
    namesrvAddr to join another name server, mappedFileSizeCommitLog, ...)."""

    def __init__(self, workdir: Path, flush: str = "ASYNC_FLUSH", conf: dict[str, object] | None = None,
                 namesrv_port: int | None = None, broker_port: int | None = None) -> None:
        self.home = require()
        self.workdir = workdir
        self.flush = flush
        self.conf = dict(conf or {})
        self.namesrv_port = namesrv_port or free_port()
        self.broker_port = broker_port or free_port()
        self.namesrv_pid = 0
        self.broker_pid = 0

    @property
    def store_dir(self) -> Path:
        return self.workdir / "store"

    def start(self, timeout: float = 120) -> JavaBroker:
        self.workdir.mkdir(parents=True, exist_ok=True)
        extra = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in self.conf.items()]
        env = {**os.environ, "WAIT_S": str(int(timeout)), "HEAP_NS": "-Xms64m -Xmx128m",
               "HEAP_BROKER": "-Xms128m -Xmx384m"}
        p = subprocess.run(["bash", str(self.home / "run-java-broker.sh"), str(self.namesrv_port),
                            str(self.broker_port), str(self.workdir), self.flush, *extra],
                           capture_output=True, text=True, timeout=timeout + 30, env=env)
        pids = self.workdir / "pids"
        if pids.exists():
            fields = dict(f.split("=") for f in pids.read_text().split())
            self.namesrv_pid, self.broker_pid = int(fields["NAMESRV_PID"]), int(fields["BROKER_PID"])
        if p.returncode != 0 or not self.broker_pid:
            self.stop()
            raise RuntimeError(f"Java broker did not start: {p.stderr}\n{self.log_tail()}")
        return self

    def log_tail(self, n: int = 40) -> str:
        out = []
        for name in ("broker.out", "namesrv.out"):
            f = self.workdir / name
            if f.exists():
                out.append(f"--- {name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-n:]))
        return "\n".join(out)

    def _stop_pid(self, pid: int, sig: int, timeout: float) -> None:
        if not pid:
            return
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop_broker(self, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
        """Stop only the broker (SIGTERM runs its shutdown hooks: the store is flushed and closed)."""
        self._stop_pid(self.broker_pid, sig, timeout)
        self.broker_pid = 0

    def restart_broker(self, timeout: float = 120) -> None:
        """Start the broker JVM again on the same broker.conf (store, ports) after :meth:`stop_broker`;
        the name server keeps running. Returns once the broker logged its boot again."""
        assert not self.broker_pid, "the broker is still running"
        out = self.workdir / "broker.out"
        boots = out.read_text(errors="replace").count("boot success") if out.exists() else 0
        # the launch line of run-java-broker.sh, appending to the same log
        script = ('. "$1/jvmopts.sh"; export ROCKETMQ_HOME=$RMQ_HOME_DIR; '
                  'GC="-XX:+UseG1GC -XX:G1HeapRegionSize=16m -XX:G1ReservePercent=25 '
                  '-XX:InitiatingHeapOccupancyPercent=30 -XX:SoftRefLRUPolicyMSPerMB=0 '
                  '-XX:-OmitStackTraceInFastThrow -XX:-UseLargePages"; '
                  'nohup java -server -Xms128m -Xmx384m $GC -XX:MaxDirectMemorySize=1g $RMQ_JDK17_OPTS '
                  '-Duser.home="$2/home" -Drocketmq.home.dir=$RMQ_HOME_DIR -cp "$RMQ_CP" '
                  'org.apache.rocketmq.broker.BrokerStartup -c "$2/broker.conf" >> "$2/broker.out" 2>&1 '
                  '< /dev/null & echo $!')
        p = subprocess.run(["bash", "-c", script, "restart", str(self.home), str(self.workdir.resolve())],
                           capture_output=True, text=True, timeout=60, check=True)
        self.broker_pid = int(p.stdout.split()[-1])

        def booted() -> str | None:
            try:
                os.kill(self.broker_pid, 0)
            except ProcessLookupError:
                return "died"
            return "up" if out.read_text(errors="replace").count("boot success") > boots else None
        if eventually(booted, timeout, "the Java broker's boot after a restart", interval=0.5) == "died":
            self.broker_pid = 0
            raise RuntimeError(f"Java broker died on restart:\n{self.log_tail()}")

    def stop(self) -> None:
        self.stop_broker()
        self._stop_pid(self.namesrv_pid, signal.SIGTERM, 15)
        self.namesrv_pid = 0

    def wait_route(self, topic: str, scratch: Path, timeout: float = 60) -> None:
        """Until the name server has a route for ``topic`` (the broker registers every 30 s otherwise)."""
        def routed() -> bool:
            return mqadmin("topicRoute", "-n", self.namesrv_addr, "-t", topic, scratch=scratch).returncode == 0
        eventually(routed, timeout, f"route of {topic} on the Java name server")

    def __enter__(self) -> JavaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
