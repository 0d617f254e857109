"""The compiled send path's broker half (issue #30): which connections it serves, and its per-read bookkeeping.

A connection that can take whole reads (the asyncio transport: ``fast_send`` slot) gets a fast-send
half (``fastpull.FastReads.send``) after its first send the Python path stored, when nothing must see each request: no
interceptor but the kernel's loopback admin guard (ACL, a third party's), SEND_MESSAGE(_V2) and
SEND_BATCH_MESSAGE still served by this processor, no put stage outside the properties the compiled path refuses anyway, an
IPv4 peer, a store whose append is compiled and whose flushes are asynchronous. Per read it then
checks what may change at run time (a fenced or slave broker, a SYNC_MASTER with its slave, the
send flow control) and hands the read to ``store.serve_sends``, which stores and answers the read's
leading common-case sends in one compiled call (``protocol/_faststore_send.c``); the broker counts
them in its statistics. Everything else (the first frame outside that shape and all after it) is
served by ``send.py`` as before, whose rules the compiled call repeats and the differential test
(tests/plugins/broker/test_fastsend_diff.py) compares.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from rmq.plugins.broker.fastpull import attach, wants
from rmq.plugins.broker.topics import NOT_ALLOWED_SEND
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import DEFAULT_VERSION

if TYPE_CHECKING:
    from rmq.kernel import Connection
    from rmq.plugins.broker.context import ProcessorContext

_ROUTED = ("DELAY", "TRAN_MSG", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")  # the C path refuses these
_CODES = (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)  # what it serves
_GUARD = "LoopbackAdminGuard"  # the kernel's interceptor: it looks at admin codes only


def _plain(text: str) -> bytes | None:
    """``text`` as the bytes of a JSON string without escapes, or None when it would need one."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return text.encode()
    return None


class FastSend:
    """Decides whether the compiled send path serves, and serves a connection's reads through it."""

    def __init__(self, ctx: ProcessorContext, processor: Any) -> None:
        self.ctx = ctx
        self.processor = processor
        self.registry: Any = None
        self._why: str | None = None  # None: not decided yet; "": compiled

    def decide(self, registry: Any) -> str:
        """What serves sends, for the broker's start line; fixes the static part of the decision."""
        self.registry = registry
        self._why = None
        why = self.why_not()
        return "compiled (SEND_MESSAGE_V2/SEND_MESSAGE/SEND_BATCH_MESSAGE common case, oneway too)" if not why \
            else f"pure: {why}"

    def why_not(self) -> str:
        """Why the compiled path cannot serve (the reasons fixed at start), '' when it can."""
        if self._why is not None:
            return self._why
        b = self.ctx
        reg = self.registry
        why = ""
        if reg is None:
            why = "not started"
        elif os.environ.get("RMQ_PURE_SEND"):  # the compiled codec and store without it: bench/broker.py's baseline
            why = "RMQ_PURE_SEND set"
        else:
            others = [type(i).__name__ for i in reg.interceptors if type(i).__name__ != _GUARD]
            send = getattr(self.processor, "send", None)
            if others:
                why = f"interceptors {', '.join(others)} see every request"
            elif any(reg.table.get(c) != send for c in _CODES):
                why = "another handler serves SEND_MESSAGE"
            elif any(s.trigger not in _ROUTED for s in b.pipeline.stages):
                why = "a put stage without a compiled counterpart"
            elif getattr(type(b.store), "serve_sends", None) is None:
                why = f"store {type(b.store).__name__} has no compiled send path"
            else:
                why = b.store.sends_pure()  # type: ignore[attr-defined]
            if not why and None in self._answer_parts():
                why = "a region, trace flag or message id prefix that JSON must escape"
        self._why = why
        return why

    def _answer_parts(self) -> tuple[Any, ...]:
        b = self.ctx
        cluster = f"CLUSTER\x01{b.config.brokerClusterName}".encode()
        return cluster, _plain(b.msg_id_prefix), _plain(b.config.regionId), _plain(b.trace_on), DEFAULT_VERSION

    def install(self, conn: Connection) -> None:
        """Give ``conn`` its fast-send half (a connection that supports it, an IPv4 peer)."""
        if self.why_not() or not wants(conn, "send"):
            return
        born = self.ctx.born_host(conn)
        if len(born) != 8:
            attach(conn, "send", False)
            return
        answer = self._answer_parts()
        serve = self.serve

        def fast_send(src: Any, pos: int, max_frame: int) -> tuple[int, bytes | None, Any]:
            return serve(src, pos, max_frame, born, answer)

        attach(conn, "send", fast_send)

    def serve(self, src: Any, pos: int, max_frame: int, born: bytes, answer: tuple[Any, ...]) -> tuple[int, bytes | None, Any]:
        """One read from ``pos``: where the compiled path stopped in ``src``, its answers and, under SYNC_FLUSH, what they wait
        for: (watermark, offset, timeout, late code), as a ``HeldAnswer``'s (what send.py checks per request that
        may change at run time is checked here per read)."""
        b = self.ctx
        proc = self.processor
        cfg = b.config
        if (not b.accepts_writes or b.is_slave or (b.sync_master and b.replication is not None)  # type: ignore[attr-defined]
                or proc.flow.stalled() or proc.inflight >= cfg.sendThreadPoolQueueCapacity):
            return pos, None, None
        done = b.store.serve_sends(src, pos, max_frame, b.topics.table, NOT_ALLOWED_SEND, born,  # type: ignore[attr-defined]
                                   cfg.maxMessageSize, answer)
        if done is None:
            return pos, None, None
        pos, answers, counts, hold = done
        st = b.stats
        if st is not None:
            for topic, n, size, calls in counts:
                st.put(topic, n, size, calls)
        return pos, answers, None if hold is None else (*hold, ResponseCode.FLUSH_DISK_TIMEOUT)
