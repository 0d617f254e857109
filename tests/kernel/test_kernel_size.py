"""The kernel stays small: behaviour belongs in plugins (budget: 1,500 code lines; docstrings, imports and
``__all__`` lists excluded, so the facade's re-exports cost nothing)."""

from __future__ import annotations

import ast
from pathlib import Path

KERNEL = Path(__file__).resolve().parents[2] / "kernel"
BUDGET = 1500


def code_lines(path: Path) -> int:
    src = path.read_text(encoding="utf-8")
    doc: set[int] = set()
    for node in ast.walk(ast.parse(src)):
        names = [t.id for t in getattr(node, "targets", ()) if isinstance(t, ast.Name)]
        if isinstance(node, ast.Import | ast.ImportFrom) or names == ["__all__"]:
            doc.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
            continue
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                first.value.value, str
            ):
                doc.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return sum(
        1
        for i, line in enumerate(src.splitlines(), 1)
        if line.strip() and not line.strip().startswith("#") and i not in doc
    )


def test_kernel_is_under_budget() -> None:
    files = list(KERNEL.rglob("*.py"))
    assert not (KERNEL / "testing").exists(), "test helpers live in rmq.testing (testing/), not in the kernel"
    total = sum(code_lines(p) for p in files)
    assert total < BUDGET, f"kernel has {total} code lines; move behaviour into plugins"
