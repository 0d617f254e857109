"""Client exceptions: one base class, and messages that say what to do."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rmq.protocol.codes import ResponseCode
from rmq.protocol.command import HeaderError, ext_int
from rmq.protocol.message import MessageDecodeError, MessageExt, decode_messages
from rmq.protocol.names import printable

if TYPE_CHECKING:
    from rmq.protocol.command import RemotingCommand


class ClientError(Exception):
    """Base of every rmq.client error."""


class ClientStateError(ClientError):
    """The object is not started, or already shut down."""


class NoRouteError(ClientError):
    """The name server knows no route for the topic (and auto-creation is off)."""

    def __init__(self, topic: str, detail: str = "") -> None:
        msg = f"no route info for topic {topic!r} — create it or enable autoCreateTopicEnable on the broker"
        super().__init__(msg + (f" ({detail})" if detail else ""))
        self.topic = topic


class NameServerError(ClientError):
    """No name server could be reached."""


class BrokerError(ClientError):
    """The broker answered with an error code."""

    def __init__(self, code: int, remark: str | None, what: str = "", addr: str = "") -> None:
        try:
            name = ResponseCode(code).name
        except ValueError:
            name = str(code)
        where = f" from {addr}" if addr else ""
        shown = printable(remark, 300) if remark else ""  # the peer's text: one line, bounded, in logs too
        super().__init__(f"{what or 'request'} failed{where}: {name} ({code}) {shown}".rstrip())
        self.code = code
        self.remark = remark
        self.addr = addr


class RequestTimeoutError(ClientError):
    """``Producer.request``: the request was sent but no reply came in time (RocketMQ's 10006)."""


class MessageTooLargeError(ClientError):
    """Body (after compression) exceeds max_message_size."""


class SendError(ClientError):
    """A send failed after every retry; ``__cause__`` is the last failure."""


class BadResponseError(ClientError, ValueError):
    """A name server or broker answered with something that cannot be decoded (body or header field).

    Raised instead of whatever the decoder raised, so every caller that already handles
    ``ClientError`` treats it as a failed request: the client retries or reports, never crashes.
    """


def response_int(resp: RemotingCommand, key: str, default: Any, *, bits: int = 64, what: str = "response") -> Any:
    """A numeric response-header field, range-checked to its Java type; missing/empty → ``default``."""
    try:
        return ext_int(resp, key, default, bits=bits)
    except HeaderError as exc:
        raise BadResponseError(f"{what}: {exc}") from None


def decode_records(body: bytes, what: str = "response") -> list[MessageExt]:
    """Stored records from a broker's body (pull, view, query); malformed → BadResponseError."""
    try:
        return decode_messages(body)
    except MessageDecodeError as exc:
        raise BadResponseError(f"{what}: undecodable message records: {exc}") from None
