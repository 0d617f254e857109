"""The wheel installs only under ``rmq`` (plus Spark's discovery module); no package is left out."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_source_package_is_listed() -> None:
    cfg = pyproject()["tool"]["setuptools"]
    listed = set(cfg["packages"])
    mapping = cfg["package-dir"]
    for pkg, folder in mapping.items():
        if not pkg:
            continue
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            name = ".".join([pkg, *rel.parts]) if rel.parts else pkg
            if "__pycache__" in name:
                continue
            assert name in listed, f"{name} ({init.parent}) is missing from [tool.setuptools] packages"


@pytest.mark.integration
def test_wheel_has_no_generic_top_level_packages(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True, timeout=300,
    )
    (wheel,) = tmp_path.glob("rmq-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops <= {"rmq", "pyspark_rocketmq.py"} | {t for t in tops if t.endswith(".dist-info")}, tops
    assert "rmq/kernel/hookspecs/storage.py" in names and "rmq/plugins/remoting_tcp/__init__.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    for group in ("rmq.storage", "rmq.flush", "rmq.filters", "rmq.allocation", "rmq.remoting", "rmq.processors"):
        assert f"[{group}]" in text
