"""The README's Spark line works as written: a fresh Python process, a fresh SparkSession, no register()
call, no PYTHONPATH help, run away from the repository - in the environment ``make`` creates (an
editable install, where Spark's module scan finds pyspark_rocketmq through rmq.connectors.spark.discovery)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# a second JVM in a fresh process (~80 s on two cores): the slow tier, beside the other whole-cluster runs
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(240)]

README = Path(__file__).resolve().parents[3] / "README.md"


def readme_snippet() -> str:
    text = README.read_text()
    section = text[text.index("## Spark"):]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    return code.group(1)


def test_readme_spark_snippet_in_a_fresh_process(cluster: Any, tmp_path: Path) -> None:
    snippet = readme_snippet()
    assert 'spark.read.format("rocketmq")' in snippet and "register" not in snippet
    topic = cluster.topic("Orders", 2)
    cluster.produce(topic, [{"body": f"order-{i}".encode()} for i in range(5)])
    code = snippet.replace("127.0.0.1:9876", cluster.namesrv).replace('"Orders"', json.dumps(topic))
    script = (
        "import json\n"
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false').getOrCreate()\n"
        f"{code}\n"
        "print('ROWS=' + json.dumps(sorted(bytes(r.value).decode() for r in df.collect())))\n"
        "spark.stop()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    p = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=200)
    rows = [ln for ln in p.stdout.splitlines() if ln.startswith("ROWS=")]
    assert rows, p.stderr[-3000:]
    assert json.loads(rows[0][5:]) == [f"order-{i}" for i in range(5)]
