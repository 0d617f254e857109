"""Every request code every bundled plugin registers, in every role, says what it touches (the ACL's
permission table; datasette's "every hook is documented" test is the model): a code added without a
declaration fails here, and with ACL on it refuses start-up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rmq.kernel import ConfigError, hookimpl
from rmq.kernel.hookspecs.processors import ProcessorRegistry
from rmq.plugins.acl import PlainAclPlugin
from rmq.protocol.access import Access
from rmq.protocol.codes import ADMIN_WRITE_CODES
from rmq.testing import make_kernel
from rmq.testing.acl import role_registries

ROLES = ("broker", "namesrv", "controller")


def test_every_registered_code_declares_what_it_touches(tmp_path: Path) -> None:
    regs = role_registries(tmp_path, broker={"enableControllerMode": True, "controllerAddr": "127.0.0.1:1"})
    assert {r: len(regs[r].table) > 5 for r in ROLES} == dict.fromkeys(ROLES, True)
    for role, reg in regs.items():
        missing = [f"{c} ({reg.owners[c]})" for c in sorted(reg.table) if not isinstance(reg.access.get(c), Access)]
        assert not missing, f"{role}: request codes registered without access=...: {missing}"
        # every state-changing admin code (the loopback guard's list without ACL) is admin-only with it
        weak = [c for c in sorted(reg.table) if c in ADMIN_WRITE_CODES and not reg.access[c].admin]
        assert not weak, f"{role}: admin write codes not declared admin: {weak}"
    broker = regs["broker"].access
    # the side doors of issue #26: each names the permission it needs
    assert broker[30].topics and broker[321].topics and broker[324].topics and broker[325].topics
    assert broker[33].after_read and broker[37].after_read and broker[36].after_read and broker[36].groups


def test_every_grpc_method_declares_what_it_touches() -> None:
    from rmq.plugins.grpc_proxy.access import RPC_ACCESS, SERVICE

    methods = {m.name for m in SERVICE.methods}
    assert methods and not methods - set(RPC_ACCESS), f"gRPC methods without an entry: {methods - set(RPC_ACCESS)}"


class Undeclared:
    """A third party registering a broker code with no declaration."""

    @hookimpl
    def rmq_processors_register(self, kernel: object, registry: ProcessorRegistry) -> None:
        async def proc(conn: object, cmd: Any) -> Any:
            return cmd.response()

        registry.register(9901, proc, owner="third-party")


def test_an_undeclared_code_refuses_start_up_with_acl_on(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts:\n  - accessKey: admin123\n    secretKey: admin123\n    admin: true\n")
    kernel = make_kernel([Undeclared(), PlainAclPlugin()], {"broker": {
        "aclEnable": True, "plainAclFile": str(acl_file), "storePathRootDir": str(tmp_path / "s")}})
    with pytest.raises(ConfigError, match=r"without a permission declaration.*9901 \(third-party\)"):
        kernel.hook.rmq_processors_register(kernel=kernel, registry=ProcessorRegistry("broker", kernel))
    off = make_kernel([Undeclared(), PlainAclPlugin()], {"broker": {"storePathRootDir": str(tmp_path / "s")}})
    reg = ProcessorRegistry("broker", off)
    off.hook.rmq_processors_register(kernel=off, registry=reg)  # ACL off: served, with a warning
    assert 9901 in reg.table and reg.access[9901] is None
