"""Run ``rmqadmin`` from tests: in this process through click's runner (``run``/``js``: the suite issues
hundreds of commands, and a fresh interpreter per command cost ~0.7 s each), or as the installed console
script an operator types (``run_process``: entry point, pipes, terminal width)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

RMQADMIN = str(Path(sys.executable).with_name("rmqadmin"))


def run_process(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """The ``rmqadmin`` console script in a child process; with ``ok`` the exit status must be 0."""
    p = subprocess.run([RMQADMIN, *args], capture_output=True, text=True, timeout=60)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """``rmqadmin args`` in this process (stdout and stderr apart, as from a pipe); with ``ok`` the exit
    status must be 0 (the assertion shows stderr)."""
    from click.testing import CliRunner

    from rmq.client.cli import main

    result = CliRunner().invoke(main, list(args), prog_name="rmqadmin", catch_exceptions=False)
    p = subprocess.CompletedProcess(["rmqadmin", *args], result.exit_code, result.stdout, result.stderr)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


def js(*args: str) -> Any:
    """``rmqadmin args --json``, parsed (exactly one document on stdout)."""
    return json.loads(run(*args, "--json").stdout)
