"""Role plumbing: processors from every plugin build one request table; the kernel answers the rest."""

from __future__ import annotations

import types

import anyio
import pytest

from rmq.kernel import hookimpl
from rmq.kernel.hookspecs.processors import ProcessorRegistry
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.kernel.markers import hookspec
from rmq.plugins.remoting_tcp import TcpRemotingPlugin
from rmq.protocol.codes import ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.testing import make_kernel


class EchoProcessors:
    """A third party adding request codes to a role without touching the kernel."""

    @hookimpl
    def rmq_processors_register(self, kernel: object, registry: ProcessorRegistry) -> None:
        if registry.role != "echo":
            return

        async def echo(conn: object, cmd: RemotingCommand) -> RemotingCommand:
            return cmd.response(0, ext={"seen": cmd.ext.get("x", "")}, body=cmd.body)

        async def boom(conn: object, cmd: RemotingCommand) -> RemotingCommand:
            raise RuntimeError("disk on fire")

        registry.register(9001, echo, owner="echo")
        registry.register(9002, boom, owner="echo")


@pytest.mark.anyio
async def test_serve_role_dispatches_by_code_and_maps_failures() -> None:
    kernel = make_kernel([TcpRemotingPlugin({}), EchoProcessors()])
    async with kernel:
        server, registry = await kernel.serve_role("echo", RemotingConfig(host="127.0.0.1", port=0, name="echo"))
        assert set(registry.table) == {9001, 9002}
        client = kernel.hook.rmq_remoting_make_client(kernel=kernel, config=RemotingConfig(name="client"), handler=None)
        addr = f"127.0.0.1:{server.port}"
        with anyio.fail_after(10):
            resp = await client.invoke(addr, RemotingCommand.request(9001, ext={"x": 7}, body=b"hi"), timeout=3)
            assert (resp.code, resp.ext["seen"], resp.body) == (0, "7", b"hi")
            resp = await client.invoke(addr, RemotingCommand.request(4242), timeout=3)
            assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert "request type 4242 not supported" in (resp.remark or "")
            resp = await client.invoke(addr, RemotingCommand.request(9002), timeout=3)
            assert resp.code == ResponseCode.SYSTEM_ERROR and "disk on fire" in (resp.remark or "")
        await client.aclose()
        await server.aclose()


def test_two_plugins_claiming_one_code_is_a_startup_error() -> None:
    kernel = make_kernel([EchoProcessors(), EchoProcessors()])
    registry = ProcessorRegistry("echo", kernel)
    with pytest.raises(ValueError, match="request code 9001 of role echo claimed by echo and echo"):
        kernel.hook.rmq_processors_register(kernel=kernel, registry=registry)


def test_rmq_addhooks_lets_a_plugin_add_its_own_hooks() -> None:
    specs = types.ModuleType("audit_specs")

    @hookspec
    def audit_before_delete(topic: str) -> None:
        """Called before a topic is deleted."""

    specs.audit_before_delete = audit_before_delete  # type: ignore[attr-defined]

    class Adds:
        @hookimpl
        def rmq_addhooks(self, pluginmanager: object) -> None:
            pluginmanager.add_hookspecs(specs)  # type: ignore[attr-defined]

    seen: list[str] = []

    class Uses:
        @hookimpl
        def audit_before_delete(self, topic: str) -> None:
            seen.append(topic)

    kernel = make_kernel([Adds(), Uses()])
    kernel.hook.audit_before_delete(topic="t1")
    assert seen == ["t1"]


class Audit:
    """A third party's RequestInterceptor: sees every request, refuses code 9002, breaks on 9003."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, int | None]] = []

    def before(self, conn: object, cmd: RemotingCommand) -> RemotingCommand | None:
        self.seen.append(("before", cmd.code, None))
        if cmd.code == 9003:
            raise RuntimeError("audit log full")
        if cmd.code == 9002:
            return cmd.response(ResponseCode.NO_PERMISSION, remark="audit says no")
        return None

    def after(self, conn: object, cmd: RemotingCommand, response: RemotingCommand | None) -> None:
        self.seen.append(("after", cmd.code, None if response is None else response.code))


class AuditPlugin:
    def __init__(self) -> None:
        self.audit = Audit()

    @hookimpl
    def rmq_processors_register(self, kernel: object, registry: ProcessorRegistry) -> None:
        if registry.role == "echo":
            registry.add_interceptor(self.audit)


@pytest.mark.anyio
async def test_interceptors_run_around_every_request_and_can_refuse() -> None:
    audit = AuditPlugin()
    kernel = make_kernel([TcpRemotingPlugin({}), EchoProcessors(), audit])
    async with kernel:
        server, _ = await kernel.serve_role("echo", RemotingConfig(host="127.0.0.1", port=0, name="echo"))
        client = kernel.hook.rmq_remoting_make_client(kernel=kernel, config=RemotingConfig(name="client"), handler=None)
        addr = f"127.0.0.1:{server.port}"
        with anyio.fail_after(10):
            assert (await client.invoke(addr, RemotingCommand.request(9001, ext={"x": 1}), timeout=3)).code == 0
            r = await client.invoke(addr, RemotingCommand.request(9002), timeout=3)  # the processor would raise
            assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "audit says no")
            r = await client.invoke(addr, RemotingCommand.request(4242), timeout=3)
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            r = await client.invoke(addr, RemotingCommand.request(9003), timeout=3)
            assert r.code == ResponseCode.SYSTEM_ERROR and "audit log full" in (r.remark or "")
        await client.aclose()
        await server.aclose()
    assert audit.audit.seen == [
        ("before", 9001, None), ("after", 9001, 0),
        ("before", 9002, None), ("after", 9002, ResponseCode.NO_PERMISSION),
        ("before", 4242, None), ("after", 4242, ResponseCode.REQUEST_CODE_NOT_SUPPORTED),
        ("before", 9003, None),
    ]
