"""The one Router and the one error_response: every transport and role answers alike."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rmq.protocol.codes import ResponseCode
from rmq.protocol.command import HeaderError, RemotingCommand
from rmq.protocol.dispatch import ERROR_REMARK_LIMIT, Router, error_response, not_supported
from rmq.protocol.frame import FrameDecoder
from rmq.protocol.names import InvalidNameError

CONN = SimpleNamespace(remote_addr=("10.0.0.1", 1234))


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def ok(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(0, ext={"seen": str(cmd.code)})


def test_route_finds_the_handler_or_answers_not_supported() -> None:
    router = Router({10: ok})
    assert router.route(RemotingCommand.request(10)) is ok
    resp = router.route(RemotingCommand.request(4242, opaque=9, serialize_type=1))
    assert isinstance(resp, RemotingCommand) and resp.is_response and resp.opaque == 9 and resp.serialize_type == 1
    assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and resp.remark == " request type 4242 not supported"
    assert not_supported(RemotingCommand.request(7)).remark == " request type 7 not supported"


def test_the_table_is_read_live() -> None:
    table: dict[int, Any] = {}
    router = Router(table)
    assert run(router.dispatch(CONN, RemotingCommand.request(10))).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    table[10] = ok
    assert run(router.dispatch(CONN, RemotingCommand.request(10))).ext == {"seen": "10"}


def test_refusals_keep_their_code_and_message() -> None:
    cmd = RemotingCommand.request(10, opaque=3)
    r = error_response(cmd, HeaderError("queueId", "is missing"))
    assert (r.code, r.remark, r.opaque, r.is_response) == (1, "the custom header field 'queueId' is missing", 3, True)
    r = error_response(cmd, InvalidNameError("The specified topic is blank.", code=17))
    assert (r.code, r.remark) == (17, "The specified topic is blank.")


def test_anything_else_is_system_error_printable_and_bounded() -> None:
    cmd = RemotingCommand.request(10)
    r = error_response(cmd, RuntimeError("disk on fire"))
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "RuntimeError: disk on fire")
    r = error_response(cmd, ValueError("line1\nTraceback (most recent call last):\x00" + "x" * 5000))
    assert r.code == ResponseCode.SYSTEM_ERROR and r.remark is not None
    assert "\n" not in r.remark and "\x00" not in r.remark and len(r.remark) < ERROR_REMARK_LIMIT + 40
    assert r.remark.isprintable()


def test_undecodable_header_is_answered_with_the_decoders_reason() -> None:
    header = b'{"code":2147483648,"opaque":41,"flag":0}'
    data = len(header).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header
    data = (len(data) - 4).to_bytes(4, "big") + data[4:]
    [bad] = FrameDecoder(recover=True).feed(data)
    r = error_response(bad, bad.error)  # type: ignore[attr-defined]
    assert r.code == ResponseCode.SYSTEM_ERROR and r.remark == str(bad.error) and r.opaque == 41  # type: ignore[attr-defined]


def test_dispatch_answers_failures_and_reports_them() -> None:
    seen: list[tuple[str, int]] = []

    async def boom(conn: Any, cmd: RemotingCommand) -> RemotingCommand:
        raise KeyError("k")

    router = Router({1: boom}, on_unsupported=lambda c, cmd: seen.append(("unsupported", cmd.code)),
                    on_error=lambda c, cmd, e: seen.append((type(e).__name__, cmd.code)))
    r = run(router.dispatch(CONN, RemotingCommand.request(1)))
    assert r.code == ResponseCode.SYSTEM_ERROR and r.remark == "KeyError: 'k'"
    run(router.dispatch(CONN, RemotingCommand.request(2)))
    assert seen == [("KeyError", 1), ("unsupported", 2)]


def test_cancellation_passes_through() -> None:
    async def hang(conn: Any, cmd: RemotingCommand) -> None:
        await asyncio.sleep(10)

    async def main() -> None:
        task = asyncio.ensure_future(Router({1: hang}).dispatch(CONN, RemotingCommand.request(1)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())


def test_not_supported_and_system_error_answers_are_built_in_one_place() -> None:
    """No transport, role or client builds these answers itself any more."""
    root = Path(__file__).resolve().parents[2]
    needles = ("request type {", "REQUEST_CODE_NOT_SUPPORTED, remark", 'remark=f"{type(')
    hits = []
    for top in ("kernel", "protocol", "plugins", "client", "connectors", "testing"):
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel == "protocol/dispatch.py":
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if any(needle in line for needle in needles):
                    hits.append(f"{rel}:{n}: {line.strip()}")
    assert hits == []
