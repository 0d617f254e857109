"""Make Spark's data source discovery find ``rocketmq`` in an editable install.

Spark lists top-level modules with ``pkgutil.iter_modules`` and imports those named ``pyspark_*``.
A regular install puts ``pyspark_rocketmq.py`` in site-packages, where that scan sees it; an
editable install (``pip install -e .``, what ``make`` does) serves modules through an import hook
the scan does not see, so ``spark.read.format("rocketmq")`` fails with DATA_SOURCE_NOT_FOUND.

``python -m rmq.connectors.spark.discovery`` (run by ``make``) fixes that once per environment:
a directory ``<prefix>/rmq-spark-discovery`` holding a link to the real ``pyspark_rocketmq.py``,
put on ``sys.path`` by a ``.pth`` file in site-packages. Nothing else becomes importable. It is a
no-op when the scan already sees the module.
"""

from __future__ import annotations

import importlib.util
import os
import pkgutil
import sys
import sysconfig
from pathlib import Path

MODULE = "pyspark_rocketmq"
PTH = "rmq-spark-discovery.pth"


def visible() -> bool:
    """Seen by the scan from anywhere (the current directory does not count: Spark's workers run elsewhere)."""
    here = {"", ".", os.getcwd()}
    return any(m.name == MODULE for m in pkgutil.iter_modules([p for p in sys.path if p not in here]))


def install(prefix: Path | None = None) -> str:
    """Ensure the scan sees ``pyspark_rocketmq``; what was done, in one line."""
    if visible():
        return f"{MODULE} is already visible to Spark's module scan"
    spec = importlib.util.find_spec(MODULE)
    if spec is None or spec.origin is None:
        raise SystemExit(f"{MODULE} is not installed: install rmq with its spark extra first")
    target = Path(prefix or sys.prefix) / "rmq-spark-discovery"
    target.mkdir(parents=True, exist_ok=True)
    link = target / f"{MODULE}.py"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(Path(spec.origin).resolve())
    site = Path(sysconfig.get_paths()["purelib"])
    (site / PTH).write_text(str(target) + "\n", encoding="utf-8")
    return f"{MODULE} linked into {target} (on sys.path through {site / PTH})"


if __name__ == "__main__":
    print(install())
