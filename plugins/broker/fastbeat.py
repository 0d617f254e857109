"""Unchanged heartbeats answered per read (issue #30): a read's HEART_BEAT frames served without a RemotingCommand or a task.

Every client sends a HEART_BEAT every 30 s, the same body again and again while its groups do not change.
A connection that takes whole reads (the asyncio transport's ``fast_send`` slot, ``fastpull.FastReads``)
gets a heartbeat half, a ``Beat``, when the Python path (``consumer.py`` ``heart_beat``) serves its first
heartbeat; the Python path records in it each heartbeat it serves: the body (at most ``MAX_BODY`` bytes),
the header's language and version and what ``parse_heartbeat`` made of it (one per connection, dropped
with it). A later HEART_BEAT whose header ``_faststore.beat_decode`` reads (the plain JSON shape, no escape)
with the same language, version and body byte for byte is answered in the read, with the Python path's
effects for a heartbeat that changes nothing: ``watch_client``, every group's channel's last update time
refreshed -- once it is checked that nothing else would change (each consumer group known with this
connection under this client id, its consume type, model, where-from and subscriptions as the body's; its
subscription group config and retry topic there, or no config and none would be auto-created; each
producer group with this connection). Anything else (a first heartbeat, another body, a registration that
would change, which notifies the group) takes the Python path, untouched. Static reasons (interceptors that
see every request, another HEART_BEAT handler, RMQ_PURE_HEARTBEAT, no compiled decoder) keep every heartbeat
there. tests/plugins/broker/test_fastheartbeat_diff.py compares both paths.
"""

from __future__ import annotations

import os
import struct
import time
import weakref
from typing import TYPE_CHECKING, Any

from rmq.plugins.broker.fastpull import attach, seen_elsewhere, wants
from rmq.plugins.broker.groups import SYSTEM_GROUPS
from rmq.protocol import storepath
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.frame import encode_parts
from rmq.protocol.names import RETRY_PREFIX

if TYPE_CHECKING:
    from rmq.kernel import Connection
    from rmq.plugins.broker.clients import HeartbeatData
    from rmq.plugins.broker.context import ProcessorContext

MAX_BODY = 64 * 1024  # a larger heartbeat (hundreds of subscriptions) always takes the Python path
_DECODE: Any = getattr(storepath.FAST, "beat_decode", None)
_HEAD = encode_parts(RemotingCommand(RequestCode.HEART_BEAT, opaque=0).response())[0][8:]  # the Python path's answer
_PRE, _POST = _HEAD.split(b'"opaque":0,')
_PREFIX = struct.Struct(">iI")


def answer(opaque: int) -> bytes:
    """The Python path's answer to a heartbeat (``cmd.response()``, encoded), for ``opaque``."""
    head = b'%b"opaque":%d,%b' % (_PRE, opaque, _POST)
    return _PREFIX.pack(4 + len(head), len(head)) + head


class Beat:
    """A connection's last heartbeat the Python path served (body None: none to compare with) and its serving."""

    __slots__ = ("conn", "fast", "body", "language", "version", "hb")

    def __init__(self, conn: Connection, fast: FastBeat) -> None:
        self.conn = weakref.ref(conn)  # the connection holds this (fast_send): no cycle, dropped with it
        self.fast = fast
        self.body: bytes | None = None
        self.language = ""
        self.version = 0
        self.hb: HeartbeatData | None = None

    def remember(self, body: bytes, language: str, version: int, hb: HeartbeatData) -> None:
        if len(body) <= MAX_BODY:
            self.body, self.language, self.version, self.hb = body, language, version, hb

    def __call__(self, src: Any, pos: int, max_frame: int) -> tuple[int, list[bytes] | None]:
        """The unchanged heartbeats from ``pos`` on: where they end, their answers."""
        out: list[bytes] = []
        refresh = self.fast.refresh
        conn = self.conn()
        while self.body is not None and conn is not None:
            f = _DECODE(src, pos, max_frame)
            if f is None:
                break
            end, opaque, language, version, body = f
            if body != self.body or language != self.language or version != self.version \
                    or not refresh(conn, self.hb):  # type: ignore[arg-type]
                break
            out.append(answer(opaque))
            pos = end
        if not out:
            return pos, None
        self.fast.served += len(out)
        return pos, out


class FastBeat:
    """Decides whether unchanged heartbeats are answered per read, and refreshes a connection's registrations."""

    def __init__(self, ctx: ProcessorContext, processor: Any) -> None:
        self.ctx = ctx
        self.processor = processor
        self.why = "not started"
        self.served = 0  # heartbeats answered per read

    def decide(self, registry: Any) -> str:
        """What serves heartbeats, for the broker's start line; fixes ``why`` ('' when per read)."""
        if os.environ.get("RMQ_PURE_HEARTBEAT"):  # bench/heartbeat.py's baseline
            why = "RMQ_PURE_HEARTBEAT set"
        elif _DECODE is None:
            why = "no compiled request decoder"
        else:
            why = seen_elsewhere(registry, self.processor.heart_beat, (RequestCode.HEART_BEAT,), "HEART_BEAT")
        self.why = why
        return "compiled (an unchanged HEART_BEAT answered per read; others per request)" if not why else f"pure: {why}"

    def beat_of(self, conn: Connection) -> Beat | None:
        """``conn``'s heartbeat half, given now if it has none yet; None when it takes no whole reads."""
        if self.why:
            return None
        reads = getattr(conn, "fast_send", False)
        beat = getattr(reads, "beat", None)
        if type(beat) is Beat:
            return beat
        if not wants(conn, "beat"):
            return None
        beat = Beat(conn, self)
        attach(conn, "beat", beat)
        return beat

    def refresh(self, conn: Connection, hb: HeartbeatData) -> bool:
        """The Python path's effects of heartbeat ``hb`` on ``conn`` when they change nothing but last update
        times (True); False, nothing done, when they would change something."""
        b = self.ctx
        sgs, topics, consumers, producers = b.groups.table, b.topics.table, b.consumers.groups, b.producers.groups
        auto = b.config.autoCreateSubscriptionGroup
        client_id = hb.client_id
        chans = []
        for data in hb.consumers:
            group = data.group
            if group in sgs:
                if RETRY_PREFIX + group not in topics:
                    return False  # created on the Python path
            elif auto or group in SYSTEM_GROUPS:
                return False  # the group's config would be created
            info = consumers.get(group)
            ch = None if info is None else info.channels.get(conn)
            if ch is None or ch.client_id != client_id or info.consume_type != data.consume_type \
                    or info.message_model != data.message_model or info.consume_from_where != data.consume_from_where:
                return False
            subs = info.subscriptions
            for sub in data.subscriptions:
                old = subs.get(sub.topic)
                if old is None or sub.subVersion > old.subVersion or (
                        sub.subVersion == old.subVersion and sub.subString != old.subString):
                    return False  # added or replaced
            if len(subs) != len({sub.topic for sub in data.subscriptions}):
                return False  # a topic removed
            chans.append(ch)
        for group in hb.producer_groups:
            ch = producers.get(group, {}).get(conn)
            if ch is None:
                return False
            chans.append(ch)
        b.watch_client(conn)
        now = time.monotonic()
        for ch in chans:
            ch.last_update = now
        return True
