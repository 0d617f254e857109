"""The suite's tiers hold (tests/conftest.py): under ``--dist loadgroup`` the tests of one JVM share a
worker, and ``--fast`` leaves out every test that starts processes and fails one that slipped in.

Each case runs a child pytest (with pytest-xdist workers) on a small tree holding this suite's conftest.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # child pytest runs and their xdist workers

INI = """[pytest]
addopts = -p no:cacheprovider
markers =
    spark: a JVM
    java: a JVM
    slow: long
    faults: a matrix cell
    integration: starts processes
"""


def run_tree(tmp_path: Path, files: dict[str, str], *args: str) -> str:
    (tmp_path / "conftest.py").write_text(Path(__file__).with_name("conftest.py").read_text())
    (tmp_path / "pytest.ini").write_text(INI)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    # not this run's options, worker or CPU report (the child's tests would be listed in it as this suite's)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "RMQ_CPU_REPORT"}
    res = subprocess.run([sys.executable, "-m", "pytest", "-v", "-rA", *args], cwd=tmp_path, capture_output=True,
                         text=True, timeout=240, env=env)
    return res.stdout + res.stderr


def test_the_tests_of_one_jvm_share_a_worker(tmp_path: Path) -> None:
    jvm = "import pytest\npytestmark = pytest.mark.spark\n" + "".join(f"def test_s{i}(): pass\n" for i in range(6))
    plain = "".join(f"def test_p{i}(): pass\n" for i in range(12))
    out = run_tree(tmp_path, {"test_jvm_a.py": jvm, "test_jvm_b.py": jvm, "test_plain.py": plain},
                   "-n", "2", "--dist", "loadgroup")  # each worker is a pytest start-up (~1 s CPU): two will do
    ran = re.findall(r"\[(gw\d+)\] \[\s*\d+%\] PASSED (\S+)", out)
    assert len(ran) == 24, out
    jvm_workers = {gw for gw, test in ran if "test_jvm_" in test}
    assert len(jvm_workers) == 1, out
    assert all(test.endswith("@spark-jvm") for _, test in ran if "test_jvm_" in test), out


def test_fast_leaves_out_what_starts_processes_and_fails_a_test_that_starts_one(tmp_path: Path) -> None:
    tests = '''import subprocess, sys
import pytest

def test_pure():
    assert sum(range(4)) == 6

def test_on_a_daemon(rmqd):
    pass

@pytest.mark.integration
def test_marked():
    pass

@pytest.mark.slow
def test_slow():
    pass

def test_unmarked_spawner():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
'''
    out = run_tree(tmp_path, {"test_mixed.py": tests}, "-n", "1", "--fast")  # xdist, as make test-fast; one worker is enough
    assert re.search(r"PASSED test_mixed.py::test_pure\b", out), out
    assert re.search(r"ERROR test_mixed.py::test_unmarked_spawner\b", out), out
    assert "Failed: started a process under --fast (mark its module `integration`): subprocess.Popen" in out, out
    assert re.search(r"= 2 passed, 1 error in ", out), out  # test_pure, test_unmarked_spawner's call
    assert not re.search(r"test_(on_a_daemon|marked|slow)\b", out), out
