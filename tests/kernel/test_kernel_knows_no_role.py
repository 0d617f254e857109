"""The kernel is the mechanism only: the roles' tables, their keys and the plugins a role turns on are declared
outside ``kernel/`` (``rmq.roles``, a plugin's own module) and reach the kernel through ``rmq.sections``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import attrs

import rmq.kernel
from rmq.kernel.config import ROLE_SECTIONS, declared, load_config, section_class

KERNEL = Path(__file__).resolve().parents[2] / "kernel"
#: keys every role's table has and the kernel's generic role plumbing reads by name (the listener, the
#: loopback admin guard), and brokerName, part of RocketMQ's MessageQueue string form (model.py)
GENERIC = {"listenPort", "listenHost", "maxConnections", "allowRemoteAdmin", "aclEnable", "brokerName"}


def tables() -> dict[str, type]:
    return {name: section_class(name) for name in declared()}


def test_kernel_sources_name_no_key_of_a_declared_table() -> None:
    keys = {f.name for cls in tables().values() for f in attrs.fields(cls)} - GENERIC
    assert {"brokerRole", "mappedFileSizeCommitLog", "grpcServerPort", "kvConfigPath", "flushDiskType",
            "enableControllerInNamesrv", "controllerDLegerPeers"} <= keys  # the real tables are installed
    words = re.compile(r"\b(" + "|".join(sorted(keys)) + r")\b")
    found = [f"{p.relative_to(KERNEL.parent)}:{i} {m.group(1)}" for p in sorted(KERNEL.rglob("*.py"))
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) for m in words.finditer(line)]
    assert found == [], f"role keys inside the kernel (they belong to rmq.roles or the plugin): {found}"


def test_the_kernel_exports_no_table_class() -> None:
    exported = {getattr(rmq.kernel, name) for name in rmq.kernel.__all__}
    assert not exported & set(tables().values())
    assert not {"BrokerConfig", "NamesrvConfig", "ProxyConfig", "ControllerConfig"} & set(dir(rmq.kernel))


def test_the_default_selection_comes_from_the_roles() -> None:
    """No plugin a role turns on by default is named in the kernel; the broker's table names them."""
    cfg = load_config(None)
    chosen = {n for names in cfg.broker.plugins().values() for n in names}
    assert {"schedule", "grpc", "dashboard", "mmap", "ha", "plain"} <= chosen
    literals = {node.value for p in KERNEL.rglob("*.py") for node in ast.walk(ast.parse(p.read_text("utf-8")))
                if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert chosen & literals == set(ROLE_SECTIONS) & chosen  # a role's own name is the kernel's to know
    assert cfg.selected()["processors"][:2] == ["namesrv", "broker"]


def test_the_roles_import_no_plugin() -> None:
    """Every plugin may import ``rmq.roles``, so the roles import no plugin (and the kernel no role)."""
    roles = KERNEL.parent / "roles"
    found = [f"{p.name}: {node.module}" for d in (roles, KERNEL) for p in d.rglob("*.py")
             for node in ast.walk(ast.parse(p.read_text("utf-8"))) if isinstance(node, ast.ImportFrom)
             and (node.module or "").startswith("rmq.plugins" if d == roles else "rmq.roles")]
    assert found == []
