"""Request code → handler, and the one place an exception becomes a RocketMQ response.

Every transport and every role answers the same way: an unknown code gets
REQUEST_CODE_NOT_SUPPORTED with RocketMQ's remark (``" request type N not supported"``,
leading space included, as Java's processor table writes it); a failed request gets
:func:`error_response`. Kept here, below the kernel and the transports, so the broker,
the name server, the tcp plugin and the client's handler of server-initiated requests
cannot drift apart. Pure: no I/O, no event loop; a handler is awaited, nothing more.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from rmq.protocol.codes import ResponseCode
from rmq.protocol.command import CommandDecodeError, HeaderError, RemotingCommand
from rmq.protocol.names import InvalidNameError, printable

__all__ = ["Handler", "Router", "error_response", "not_supported"]

Handler = Callable[[Any, RemotingCommand], Awaitable["RemotingCommand | None"]]
"""``handler(conn, cmd)``: the response, or None (oneway, or answered later)."""

#: Longest remark an unexpected exception puts on the wire: a peer learns what failed, not a dump.
ERROR_REMARK_LIMIT = 512

_SYSTEM_ERROR = int(ResponseCode.SYSTEM_ERROR)
_NOT_SUPPORTED = int(ResponseCode.REQUEST_CODE_NOT_SUPPORTED)


def not_supported(cmd: RemotingCommand) -> RemotingCommand:
    """The answer to a request code nobody serves (Java's remark form, byte for byte)."""
    return cmd.response(_NOT_SUPPORTED, remark=f" request type {cmd.code} not supported")


def error_response(cmd: RemotingCommand, exc: BaseException) -> RemotingCommand:
    """The answer to ``cmd`` when serving it raised ``exc``.

    :class:`~rmq.protocol.command.HeaderError` and :class:`~rmq.protocol.names.InvalidNameError`
    were raised on purpose with a code and a message meant for the peer: they keep both. A
    header that could not be decoded (:class:`~rmq.protocol.command.CommandDecodeError`) is
    SYSTEM_ERROR with the decoder's reason. Anything else is a bug or a failure on our side:
    SYSTEM_ERROR naming the exception type and message, made printable and bounded, never a
    traceback.
    """
    if isinstance(exc, (HeaderError, InvalidNameError)):
        return cmd.response(exc.code, remark=str(exc))
    if isinstance(exc, CommandDecodeError):
        return cmd.response(_SYSTEM_ERROR, remark=str(exc))
    return cmd.response(_SYSTEM_ERROR, remark=printable(f"{type(exc).__name__}: {exc}", ERROR_REMARK_LIMIT))


class Router:
    """Request code → handler for one endpoint (a server role, or a client's server-initiated requests).

    ``table`` is used by reference, not copied: an owner that registers handlers later
    (a consumer started after its client instance) is seen at once. ``on_unsupported``
    and ``on_error`` let the owner log (rate-limited, in its own logger); they must not raise.
    """

    __slots__ = ("table", "on_unsupported", "on_error")

    def __init__(
        self,
        table: dict[int, Handler] | None = None,
        *,
        on_unsupported: Callable[[Any, RemotingCommand], None] | None = None,
        on_error: Callable[[Any, RemotingCommand, Exception], None] | None = None,
    ) -> None:
        self.table: dict[int, Handler] = {} if table is None else table
        self.on_unsupported = on_unsupported
        self.on_error = on_error

    def route(self, cmd: RemotingCommand) -> Handler | RemotingCommand:
        """The handler of ``cmd.code``, or else the REQUEST_CODE_NOT_SUPPORTED response to send."""
        handler = self.table.get(cmd.code)
        return handler if handler is not None else not_supported(cmd)

    async def dispatch(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        """Serve ``cmd``: its handler's response, or the error response; never raises but cancellation.

        Cancellation (a ``BaseException`` on every backend) passes through untouched.
        """
        handler = self.table.get(cmd.code)
        if handler is None:
            if self.on_unsupported is not None:
                self.on_unsupported(conn, cmd)
            return not_supported(cmd)
        try:
            return await handler(conn, cmd)
        except Exception as exc:  # noqa: BLE001 - the failure of one request is that request's answer
            if self.on_error is not None:
                self.on_error(conn, cmd, exc)
            return error_response(cmd, exc)
