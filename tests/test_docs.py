"""The docs are true to the code: every bundled entry point is on the architecture page (datasette's test that
every plugin hook is documented is the model), every bundled plugin folder is in the README's folder table,
and the annotated example config runs what ``rmqd`` with no config runs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from rmq.kernel.config import load_config

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
BUNDLED = sorted(f"{group}:{name}" for group, eps in PYPROJECT["project"]["entry-points"].items() for name in eps)
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_bundled_entry_points_are_read_from_pyproject() -> None:
    assert {"rmq.processors:broker", "rmq.sections:broker", "rmq.storage:mmap", "rmq.auth:plain"} <= set(BUNDLED)


@pytest.mark.parametrize("entry_point", BUNDLED)
def test_every_bundled_entry_point_is_on_the_architecture_page(entry_point: str) -> None:
    rows = [ln for ln in ARCHITECTURE.splitlines() if ln.startswith("|") and f"`{entry_point}`" in ln]
    assert rows, f"docs/architecture.md: add `{entry_point}` to 'Every bundled entry point' (its folder, what it is)"
    group, _, name = entry_point.partition(":")
    target = PYPROJECT["project"]["entry-points"][group][name].split(":")[0]  # rmq.plugins.x.y -> plugins/x
    folder = "/".join(target.split(".")[1:3])
    assert any(folder in row for row in rows), f"the row of `{entry_point}` should name its folder {folder}"


def test_the_readme_folder_table_names_every_bundled_plugin_and_the_roles() -> None:
    table = README.split("## Architecture", 1)[1].split("```", 2)[1]
    assert re.search(r"^roles/ ", table, re.M)
    plugins = sorted(p.name for p in (ROOT / "plugins").iterdir() if (p / "__init__.py").exists())
    missing = [p for p in plugins if not re.search(rf"\b{p}\b", table)]
    assert missing == [], f"README's folder table does not name plugins/{missing}"


def test_the_annotated_example_runs_what_the_embedded_default_runs() -> None:
    example = load_config(ROOT / "examples" / "rmqd.toml")
    assert example.roles() == load_config(None).roles()
    assert example.selected() == load_config(None).selected()
