"""A source address for client processes that cannot bind one (issue #31): ``bindshim.c`` as an
LD_PRELOAD library, built on demand with the system C compiler into a cache folder.

The nemesis cuts links by (source, destination) address, so each client of a chaos run needs a
loopback address of its own. rmq.client binds one itself (``local_host``); librocketmq (the C++
client) and RocketMQ 4.9.8's Java remoting client do not, and are run unmodified under this shim
instead: :func:`shim_env` gives a child process the shim and its address.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from rmq.testing.nemesis import check_addr

SOURCE = Path(__file__).with_name("bindshim.c")
ENV = "RMQ_BIND_ADDR"


def cache_dir() -> Path:
    """Where test-built artefacts live: ``$RMQ_TEST_CACHE``, else ``$XDG_CACHE_HOME/rmq-testing``."""
    env = os.environ.get("RMQ_TEST_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rmq-testing"


def build() -> Path:
    """The shim's shared library, compiled once per source version (concurrent callers wait on a lock)."""
    src = SOURCE.read_bytes()
    out = cache_dir() / f"bindshim-{hashlib.sha256(src).hexdigest()[:16]}.so"
    if out.exists():
        return out
    cc = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError(f"the source-address shim needs a C compiler to build {SOURCE.name}: none found "
                           f"(CC={os.environ.get('CC', '')!r}, cc, gcc on PATH); apt-get install gcc")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / "bindshim.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.exists():
            tmp = out.with_name(f".{out.name}.{os.getpid()}")
            r = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", str(tmp), str(SOURCE), "-ldl"],
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise RuntimeError(f"building the source-address shim failed:\n{r.stderr[-2000:]}")
            os.replace(tmp, out)
    return out


def shim_env(addr: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the shim preloaded and ``addr`` (a nemesis
    node address) as the source of every loopback TCP connection the process opens."""
    env = dict(os.environ if base is None else base)
    pre = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{build()}{' ' + pre if pre else ''}"
    env[ENV] = check_addr(addr)
    return env
