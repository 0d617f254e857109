"""Every hook is rmq_-prefixed, documented argument by argument, synchronous, and used by a test."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from rmq.kernel import hookspecs

TESTS = Path(__file__).resolve().parents[1]


def all_hooks() -> list[tuple[str, object]]:
    out = []
    for mod in hookspecs.SPEC_MODULES:
        for name, fn in vars(mod).items():
            if callable(fn) and hasattr(fn, "rmq_spec"):
                out.append((name, fn))
    return out


HOOKS = all_hooks()


def test_every_concern_has_hooks() -> None:
    names = {n for n, _ in HOOKS}
    assert len(HOOKS) >= 11
    for hook in ("rmq_storage_make_store", "rmq_dispatch_make_dispatchers", "rmq_allocation_register_strategies",
                 "rmq_filter_make_filter", "rmq_flush_make_policy", "rmq_replication_make_service",
                 "rmq_remoting_make_server", "rmq_processors_register", "rmq_lifespan", "rmq_addhooks"):
        assert hook in names


@pytest.mark.parametrize(("name", "fn"), HOOKS, ids=[n for n, _ in HOOKS])
def test_hook_is_prefixed_documented_and_sync(name: str, fn: object) -> None:
    assert name.startswith("rmq_")
    assert not inspect.iscoroutinefunction(fn)
    doc = inspect.getdoc(fn) or ""
    assert doc.split("\n")[0].strip().endswith("."), f"{name}: first docstring line must be a summary sentence"
    assert "called" in doc.lower() or "Called" in doc, f"{name}: say when and how often it is called"
    for arg in inspect.signature(fn).parameters:
        assert f"``{arg}``" in doc or arg in doc.split(), f"{name}: argument {arg!r} is not documented"


@pytest.mark.parametrize(("name", "fn"), HOOKS, ids=[n for n, _ in HOOKS])
def test_hook_is_exercised_by_some_test(name: str, fn: object) -> None:
    for path in TESTS.rglob("*.py"):
        if path.name == Path(__file__).name:
            continue
        if name in path.read_text(encoding="utf-8", errors="replace"):
            return
    pytest.fail(f"no test mentions {name}")


def test_protocols_document_their_methods() -> None:
    for mod in hookspecs.SPEC_MODULES:
        for obj in vars(mod).values():
            if inspect.isclass(obj) and getattr(obj, "_is_protocol", False) and obj.__module__ == mod.__name__:
                assert inspect.getdoc(obj), f"{obj.__name__} has no docstring"
