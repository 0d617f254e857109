"""Per-request compiled pulls (issue #30): a read's PULL_MESSAGEs served without a RemotingCommand or a task.

A connection that takes whole reads (the asyncio transport's ``fast_send`` slot) gets a ``FastReads`` after
its first send or pull the Python path served: per read it serves the leading common-case sends
(``fastsend.FastSend``, one compiled call) and pulls, alternately, until a frame neither serves; that frame
and all after it take the Python path, as before. A pull is decoded by ``_faststore.pull_decode`` (the
plain JSON shape the Java, C++ and rmq clients write) into its fields; ``PullProcessor.plan`` -- the one
place that decides, shared with the Python path -- refuses it or reads the store (the compiled walk's one
body); an answer that needs nothing awaited is encoded at once. A pull that would suspend (long polling),
move its offset (the OFFSET_MOVED_EVENT is stored, awaited) or fail is left to the Python path with its plan
(``FastReads.handed``: the store read, or the exception ``plan`` raised), which that frame's dispatch takes
and goes on from -- commit, hold, re-read after the hold, event -- as if it had planned it itself: the store
is read (and its gets counted) once per decision, as on the pure path. The plan is used only by the frame
it was decided from (its opaque and fields, checked against the Python decode) and dropped at the next read.
Static reasons (interceptors that see every request, another PULL_MESSAGE handler, RMQ_PURE_PULL or
RMQ_PURE_PULL_REQUESTS, no compiled walk or decoder) keep every pull on the Python path; a slave, whose offsets and answers differ,
too, checked per read. tests/plugins/broker/test_fastpull_diff.py compares both paths.
"""

from __future__ import annotations

import os
import struct
from typing import TYPE_CHECKING, Any

from rmq.protocol import storepath
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import DEFAULT_VERSION, RemotingCommand
from rmq.protocol.common import PullFlag
from rmq.protocol.frame import encode_parts

if TYPE_CHECKING:
    from rmq.kernel import Connection
    from rmq.plugins.broker.context import ProcessorContext
    from rmq.plugins.broker.pull import PullProcessor

_MOVED, COMMIT_OFFSET = ResponseCode.PULL_OFFSET_MOVED, PullFlag.COMMIT_OFFSET
_PULLS = (RequestCode.PULL_MESSAGE, 361)  # and LITE_PULL_MESSAGE, served alike
_GUARD = "LoopbackAdminGuard"  # the kernel's interceptor: it looks at admin codes only
_DECODE: Any = getattr(storepath.FAST, "pull_decode", None)


class FastReads:
    """A connection's compiled serving of whole reads (the transport calls it as ``fast_send(src, max_frame)``):
    ``send(src, pos, max_frame)``, ``pull(...)`` and ``beat(...)`` (unchanged heartbeats, ``fastbeat``) each
    serve the leading frames of their kind from ``pos`` (the answers: one bytes object, a list of pieces); None:
    not decided yet, False: never on this connection. The read's answers are joined once."""

    __slots__ = ("send", "pull", "beat", "handed")

    def __init__(self) -> None:
        self.send: Any = None
        self.pull: Any = None
        self.beat: Any = None
        self.handed: Handed | None = None  # the plan of the frame this read left to the Python path

    def __call__(self, src: Any, max_frame: int) -> tuple[int, bytes | None, Any]:
        self.handed = None  # a plan never outlives its read (its frame's task starts before the next read)
        send, pull, beat = self.send, self.pull, self.beat
        if not (pull or beat):  # a producer's connection before its heartbeat: the send half alone
            return send(src, 0, max_frame) if send else (0, None, None)
        pos = 0
        parts: list[bytes] = []
        one = bool(send) + bool(pull) + bool(beat) == 1
        while True:
            start = pos
            if send:
                pos, answers, hold = send(src, pos, max_frame)
                if answers is not None:
                    parts.append(answers)
                if hold is not None:  # SYNC_FLUSH: the read's answers wait for one flush; the rest, the Python path's
                    return pos, b"".join(parts), hold
            if pull:
                pos, frames = pull(src, pos, max_frame)
                if frames is not None:
                    parts += frames
                if self.handed is not None:  # a pull planned and handed over ends the read's share
                    break
            if beat:
                pos, frames = beat(src, pos, max_frame)
                if frames is not None:
                    parts += frames
            if pos == start or one:  # one kind only: it took all it could at once
                break
        return pos, (parts[0] if len(parts) == 1 else b"".join(parts)) if parts else None, None


def attach(conn: Connection, kind: str, serve: Any) -> FastReads | None:
    """Give ``conn`` its ``send``, ``pull`` or ``beat`` half (``serve``, or False: never); a TLS connection (False)
    keeps none."""
    reads = getattr(conn, "fast_send", False)
    if reads is False:
        return None
    if reads is None:
        reads = conn.fast_send = FastReads()  # type: ignore[attr-defined]
    setattr(reads, kind, serve)
    return reads  # type: ignore[no-any-return]


def wants(conn: Connection, kind: str) -> bool:
    """Whether ``conn`` can take a compiled ``kind`` half it has not been given (nor refused) yet."""
    reads = getattr(conn, "fast_send", False)
    return reads is None or (type(reads) is FastReads and getattr(reads, kind) is None)


def seen_elsewhere(registry: Any, handler: Any, codes: tuple[int, ...], what: str) -> str:
    """Why requests of ``codes`` must each be seen by the registry's dispatch (interceptors that see every
    request, another handler than ``handler``), '' when a per-read half may serve them."""
    others = [type(i).__name__ for i in registry.interceptors if type(i).__name__ != _GUARD]
    if others:
        return f"interceptors {', '.join(others)} see every request"
    if any(registry.table.get(c) != handler for c in codes):
        return f"another handler serves {what}"
    return ""


class FastPull:
    """Decides whether per-request compiled pulls serve, and serves a read's leading pulls."""

    def __init__(self, ctx: ProcessorContext, processor: PullProcessor) -> None:
        self.ctx = ctx
        self.processor = processor
        self.why = "not started"
        self.served = 0  # pulls answered per read

    def decide(self, registry: Any) -> str:
        """'' when per-request pulls are compiled, else why not (the start line's)."""
        proc = self.processor
        if not proc.compiled:
            why = "the store walk is pure"
        elif os.environ.get("RMQ_PURE_PULL_REQUESTS"):  # the compiled walk without it: bench/broker.py's baseline
            why = "RMQ_PURE_PULL_REQUESTS set"
        elif _DECODE is None:
            why = "no compiled request decoder"
        else:
            why = seen_elsewhere(registry, proc.pull, _PULLS, "PULL_MESSAGE")
        self.why = why
        return why

    def install(self, conn: Connection) -> None:
        """Give ``conn`` its per-request pull half (a connection that takes whole reads)."""
        if self.why or not wants(conn, "pull"):
            return
        addr = conn.remote_addr[0]
        serve = self.serve

        def pull(src: Any, pos: int, max_frame: int) -> tuple[int, list[bytes] | None]:
            return serve(src, pos, max_frame, addr, reads)

        reads = attach(conn, "pull", pull)

    def serve(self, src: Any, pos: int, max_frame: int, addr: str,
              reads: FastReads | None = None) -> tuple[int, list[bytes] | None]:
        """The pulls from ``pos`` on that need nothing awaited: where they end, their answers' pieces. The one
        that stops them after its store read (a suspend, a moved offset, a failure) leaves its plan (or the
        plan's exception) in ``reads.handed`` for the Python path: its read is not done twice."""
        b = self.ctx
        if b.is_slave:
            return pos, None
        proc = self.processor
        plan, finish, suspends, commit = proc.plan, proc.finish, proc.suspends, proc.commit
        out: list[bytes] = []
        n = 0
        while True:
            f = _DECODE(src, pos, max_frame)
            if f is None:
                break
            end, opaque, group, topic, qid, offset, max_nums, sys_flag, commit_offset, suspend_ms, sub, etype, sub_v = f
            p: Any = None
            try:
                p = plan(addr, group, topic, qid, offset, max_nums, sys_flag, etype, sub, sub_v)
                if type(p) is tuple:
                    head, body = _answer(opaque, p[0], p[1], None, b"")
                elif p.code == _MOVED or suspends(p, sys_flag, suspend_ms):
                    head = None  # awaited: the Python path goes on from the plan (a suspend: the same hold)
                else:
                    if sys_flag & COMMIT_OFFSET:  # a master's (checked per read)
                        commit(group, topic, qid, commit_offset)
                    head, body = _status_answer(opaque, *finish(p, group, topic))
            except Exception as e:  # noqa: BLE001 - the Python path answers it: from the plan, or plan's error
                head = None
                if p is None:
                    p = e.with_traceback(None)  # not this frame (and the read's bytes) kept alive by it
            if head is None:  # the plan (or its exception) goes to this frame's dispatch: no second store read
                if reads is not None:
                    reads.handed = Handed(opaque, group, topic, qid, offset, max_nums, sys_flag, etype, sub,
                                          sub_v, p)
                break
            out.append(head)
            if body:
                out.append(body)
            n += 1
            pos = end
        if not n:
            return pos, None
        self.served += n
        return pos, out


class Handed:
    """A pull frame's plan (or ``plan``'s exception) that the compiled half read and left to the Python path,
    with the fields it was decided from: used only for the frame that has them all (``PullProcessor.process``
    checks them against its own decode), never kept past the next read or pull of its connection."""

    __slots__ = ("opaque", "fields", "sub_version", "plan")

    def __init__(self, opaque: int, group: str, topic: str, qid: int, offset: int, max_nums: int, sys_flag: int,
                 etype: str | None, sub: str | None, sub_version: int, plan: Any) -> None:
        self.opaque = opaque
        self.fields = (group, topic, qid, offset, max_nums, sys_flag, etype, sub)
        self.sub_version = sub_version
        self.plan = plan


def take(conn: Connection) -> Handed | None:
    """The plan the compiled half left for ``conn``'s next pull, if any; taken (the slot cleared) either way."""
    reads = getattr(conn, "fast_send", None)
    if type(reads) is not FastReads:
        return None
    handed, reads.handed = reads.handed, None
    return handed


_PREFIX = struct.Struct(">iI")
_STATUS = (b'{"code":%d,"extFields":{"suggestWhichBrokerId":"%s","nextBeginOffset":"%s","minOffset":"%s",'
           b'"maxOffset":"%s"},"flag":1,"language":"JAVA","opaque":%d,"remark":"%s",'
           b'"serializeTypeCurrentRPC":"JSON","version":' + str(DEFAULT_VERSION).encode() + b"}")


def _status_answer(opaque: int, code: int, remark: str, fields: dict[str, str], body: bytes) -> tuple[bytes, bytes]:
    """``_answer`` of a pull's status answer (PullProcessor.finish: its remark a status name, its fields
    numbers, none needing a JSON escape), by one template (the differential test holds it to ``_answer``)."""
    head = _STATUS % (code, fields["suggestWhichBrokerId"].encode(), fields["nextBeginOffset"].encode(),
                      fields["minOffset"].encode(), fields["maxOffset"].encode(), opaque, remark.encode())
    return _PREFIX.pack(4 + len(head) + len(body), len(head)) + head, body


def _answer(opaque: int, code: int, remark: str, fields: dict[str, str] | None, body: bytes) -> tuple[bytes, bytes]:
    """The answer frame's (head, body), as the Python path's ``cmd.response(...)`` is written."""
    return encode_parts(RemotingCommand(code, language="JAVA", opaque=opaque, flag=1, remark=remark, ext=fields,
                                        body=body))
