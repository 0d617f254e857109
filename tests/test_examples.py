"""The README's main job works: `make demo` runs examples/demo.py (rmqd embedded default + round trip)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_demo_round_trip_on_the_embedded_default(tmp_path: Path, default_ports: None) -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")], cwd=tmp_path, capture_output=True, text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "demo ok: 10 messages produced and consumed through rmqd" in res.stdout
    assert "rmq.daemon: rmqd stopped" in res.stdout  # clean shutdown after SIGTERM
    assert (tmp_path / "rmq-store" / "commitlog").is_dir() and not (tmp_path / "rmq-store" / "abort").exists()
