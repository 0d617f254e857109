"""Processors see the broker only through ``ProcessorContext``."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import rmq.plugins.broker as broker_pkg
from rmq.plugins.broker.context import ProcessorContext
from rmq.plugins.broker.controller import BrokerController
from rmq.roles import BrokerConfig
from rmq.testing import make_kernel

PROCESSORS = ("send", "pull", "consumer", "admin")
PKG = Path(inspect.getfile(broker_pkg)).parent


def _members() -> set[str]:
    names: set[str] = set()
    for klass in ProcessorContext.__mro__:
        if klass is object or klass.__name__ == "Protocol" or klass.__name__ == "Generic":
            continue
        names |= set(getattr(klass, "__annotations__", {}))
        names |= {n for n in vars(klass) if not n.startswith("_")}
    return names


def _used(module: str) -> set[str]:
    """Attributes read from the context: ``self.ctx.X`` and ``b.X`` where ``b = self.ctx``."""
    tree = ast.parse((PKG / f"{module}.py").read_text())
    aliases = {"ctx"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute):
            v = node.value
            if v.attr == "ctx" and isinstance(v.value, ast.Name) and v.value.id == "self":
                aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    used: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        base = node.value
        if isinstance(base, ast.Name) and base.id in aliases - {"ctx"}:
            used.add(node.attr)
        elif (isinstance(base, ast.Attribute) and base.attr == "ctx" and isinstance(base.value, ast.Name)
              and base.value.id == "self"):
            used.add(node.attr)
    return used


@pytest.mark.parametrize("module", PROCESSORS)
def test_processor_uses_only_the_context(module: str) -> None:
    used = _used(module)
    assert used, f"{module}: found no use of the context; the test would pass vacuously"
    assert used <= _members(), f"{module} uses broker members outside ProcessorContext: {sorted(used - _members())}"


@pytest.mark.parametrize("module", PROCESSORS)
def test_processor_does_not_import_the_controller(module: str) -> None:
    source = (PKG / f"{module}.py").read_text()
    assert "broker.controller" not in source


def test_controller_is_a_processor_context(tmp_path: Path) -> None:
    kernel = make_kernel()
    controller = BrokerController(kernel, BrokerConfig(storePathRootDir=str(tmp_path)))
    assert isinstance(controller, ProcessorContext)
    assert {"topics", "put", "get_filter", "wait_slave"} <= _members()
