"""Run this environment's ``rmqadmin`` console script from tests, as an operator would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

RMQADMIN = str(Path(sys.executable).with_name("rmqadmin"))


def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """``rmqadmin args``; with ``ok`` the exit status must be 0 (the assertion shows stderr)."""
    p = subprocess.run([RMQADMIN, *args], capture_output=True, text=True, timeout=60)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


def js(*args: str) -> Any:
    """``rmqadmin args --json``, parsed (exactly one document on stdout)."""
    return json.loads(run(*args, "--json").stdout)
