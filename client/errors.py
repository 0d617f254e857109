"""Client exceptions: one base class, and messages that say what to do."""

from __future__ import annotations

from rmq.protocol.codes import ResponseCode


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
        super().__init__(f"{what or 'request'} failed{where}: {name} ({code}) {remark or ''}".rstrip())
        self.code = code
        self.remark = remark
        self.addr = addr


class MessageTooLargeError(ClientError):
    """Body (after compression) exceeds max_message_size."""


class SendError(ClientError):
    """A send failed after every retry; ``__cause__`` is the last failure."""
