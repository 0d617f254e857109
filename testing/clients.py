"""The chaos histories' client kinds (issue #31): rmq.client (``py``), the C++ client librocketmq
(``cpp``, PyPI ``rocketmq``) and RocketMQ 4.9.8's Java client (``java``), each a worker process writing
pyworker.py's lines and each connecting from a loopback address of its own, so the nemesis cuts exactly
its links: rmq.client binds it itself (``local_host``), the two others run under the source-address
shim (:mod:`rmq.testing.bindshim`).

What each kind reports of a send: rmq.client and Java the queue and the broker's offset message id
(``omid``, which names the storing broker); librocketmq 1.2.3 only its status, its client message id
and the queue offset, so its acks count for loss and order but not for whose ack it was.
"""

from __future__ import annotations

import fcntl
import importlib.util
import json
from pathlib import Path
from typing import Any

from rmq.testing import faults as F
from rmq.testing.bindshim import cache_dir, shim_env

FAULTS_DIR = Path(__file__).resolve().parents[1] / "tests" / "faults"
PY = FAULTS_DIR / "pyworker.py"
CPP = FAULTS_DIR / "cppw.py"
JAVA_SRC = FAULTS_DIR / "JavaWorker.java"
KINDS = ("py", "cpp", "java")


def available(kind: str) -> bool:
    """Whether this machine can run clients of ``kind`` (the C++ wheel installed; the Java build here)."""
    if kind == "cpp":
        return importlib.util.find_spec("rocketmq") is not None
    if kind == "java":
        from rmq.testing.java import java_home

        return java_home() is not None
    return kind == "py"


def java_classes() -> Path:
    """JavaWorker.java compiled against the 4.9.8 client jars, once per source version, in the cache."""
    from rmq.testing.java import compile_java

    out = cache_dir() / "java-worker" / "classes"
    out.mkdir(parents=True, exist_ok=True)
    with open(out.parent / "compile.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return compile_java([JAVA_SRC], out)


def worker(kind: str, cfg: dict[str, Any], host: str, log_dir: Path, name: str) -> F.Worker:
    """A ``kind`` client worker from address ``host``. ``cfg`` is pyworker.py's: mode produce (topic,
    group, first, interval_ms, kind ordered|normal) or push (topic, group, orderly)."""
    if kind == "py":
        return F.python_worker(PY, {**cfg, "local_host": host}, log_dir, name)
    env = shim_env(host)
    if kind == "cpp":
        if cfg["mode"] == "produce":
            ordered = cfg.get("kind") == "ordered"  # queue = (i mod 8) mod queues: one sharding key a queue
            c = {"mode": "produce", "namesrv": cfg["namesrv"], "topic": cfg["topic"], "group": cfg["group"],
                 "start": int(cfg.get("first", 0)), "count": 10**9, "method": "orderly" if ordered else "sync",
                 "arg_mod": 8, "body": cfg["topic"] + "-{i}", "interval_ms": cfg.get("interval_ms", 0),
                 "stop_on_error": False}
        else:
            c = {k: cfg[k] for k in ("mode", "namesrv", "topic", "group")} | {"orderly": bool(cfg.get("orderly"))}
        return F.python_worker(CPP, c, log_dir, name, env=env)
    if kind == "java":
        from rmq.testing.java import java_command

        scratch = log_dir / f"{name}-java"
        argv = java_command("JavaWorker", json.dumps(cfg), extra_cp=java_classes(), scratch=scratch, heap="-Xmx128m")
        return F.Worker(argv, log_dir / f"{name}.log", name, env)
    raise ValueError(f"unknown client kind {kind!r}")


