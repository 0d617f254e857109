"""Bundled plugins are written as a third party's would be: against ``rmq.kernel`` alone, never another plugin."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
BUNDLED = sorted(p.name for p in PLUGINS.iterdir() if (p / "__init__.py").exists())


def _imports(pkg: str) -> list[tuple[Path, int, str]]:
    found = []
    for path in sorted((PLUGINS / pkg).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((path, node.lineno, node.module))
            elif isinstance(node, ast.Import):
                found.extend((path, node.lineno, alias.name) for alias in node.names)
    return found


def test_every_bundled_plugin_is_checked() -> None:
    assert {"broker", "storage_mmap", "remoting_tcp", "filters", "allocators"} <= set(BUNDLED)


@pytest.mark.parametrize("pkg", BUNDLED)
def test_plugin_imports_the_kernel_facade_only(pkg: str) -> None:
    deep = [f"{p.relative_to(PLUGINS)}:{n} {m}" for p, n, m in _imports(pkg) if m.startswith("rmq.kernel.")]
    assert not deep, f"import these names from rmq.kernel (the facade) instead: {deep}"


@pytest.mark.parametrize("pkg", BUNDLED)
def test_plugin_imports_no_other_plugin(pkg: str) -> None:
    other = [
        f"{p.relative_to(PLUGINS)}:{n} {m}"
        for p, n, m in _imports(pkg)
        if m.startswith("rmq.plugins.") and m.split(".")[2] != pkg
    ]
    assert not other, f"plugin {pkg} imports another plugin (move the shared piece to protocol/ or the kernel): {other}"
