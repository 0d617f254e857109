"""uvicorn's h11 protocol with the limits a port facing strangers needs and uvicorn lacks: a deadline for a
request's headers (from connect, or from the first byte of a kept-alive connection's next request), one for
its body, and a hard cap on open connections (uvicorn's ``limit_concurrency`` still accepts and holds the
connection; a slowloris client never gets to the request that would be answered 503).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("rmq.dashboard")

BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 22\r\nConnection: close" \
       b"\r\n\r\ntoo many connections\r\n"


def guarded_protocol(header_timeout: float, body_timeout: float, max_connections: int) -> type[asyncio.Protocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` bound to these limits."""

    class Guarded(_Guarded):
        pass

    Guarded.header_timeout, Guarded.body_timeout, Guarded.max_connections = (header_timeout, body_timeout,
                                                                            max_connections)
    return Guarded


class _Guarded(H11Protocol):
    header_timeout = 10.0
    body_timeout = 30.0
    max_connections = 64

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._refused = False
        self._deadline: asyncio.TimerHandle | None = None
        self._phase = ""  # "head" or "body" while the client owes us part of a request

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.max_connections:
            self._refused = True
            transport.write(BUSY)
            transport.close()
            return
        super().connection_made(transport)
        self._arm("head")

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            self._disarm()
            return
        state = self.conn.their_state
        if state is h11.IDLE:  # part of the next request's head: its deadline runs from its first byte
            if self._phase != "head":
                self._arm("head")
        elif state is h11.SEND_BODY:
            if self._phase != "body":
                self._arm("body")
        else:
            self._disarm()

    def _arm(self, phase: str) -> None:
        self._disarm()
        self._phase = phase
        delay = self.header_timeout if phase == "head" else self.body_timeout
        self._deadline = self.loop.call_later(delay, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = ""

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.debug("dashboard: %s of %s not received in time; closing", self._phase, self.client)
            self.transport.close()
        self._phase = ""
