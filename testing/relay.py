"""A TCP relay for the nemesis (issue #31): delay and loss on one chosen link, in user space.

The relay listens on a loopback address, connects each client it accepts to one target, and copies
bytes both ways through a queue per direction that holds each chunk back by that direction's delay.
TCP never loses a byte without breaking the stream, so "loss" is what a lossy network does to a TCP
stream: a lost segment is resent after a retransmission timeout, holding back everything behind it
(``loss`` is the chance per chunk, ``rto_s`` the extra wait), and, rarely, the connection breaks
(``cut``: the chance per chunk that both sockets are closed, as after too many retransmissions).

Bounded: each direction buffers at most ``MAX_BUFFERED`` bytes (then it stops reading: the sender's
socket fills, as a slow link's would), at most ``MAX_CONNS`` connections are open, and the relay
closes everything after ``lifetime_s`` even if nobody calls :meth:`Relay.close`. It runs its own
asyncio loop in a daemon thread, so a synchronous test drives it.

:meth:`rmq.testing.nemesis.Nemesis.redirect` sends one node's new connections to another through it
(a NAT rule on the node addresses), without either node knowing.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import threading
import time

import attrs

from rmq.testing.nemesis import check_addr

CHUNK = 64 * 1024
MAX_BUFFERED = 4 * 1024 * 1024  # per direction of one connection
MAX_CONNS = 64


@attrs.define(frozen=True)
class Impair:
    """What one direction of the link does: ``delay_s`` on every chunk, ``loss`` the chance a chunk
    waits ``rto_s`` more (and holds back all behind it), ``cut`` the chance a chunk breaks the connection."""

    delay_s: float = 0.0
    loss: float = 0.0
    rto_s: float = 0.2
    cut: float = 0.0


@attrs.define
class Stats:
    """What the relay did, for a test's figures."""

    conns: int = 0
    bytes_to_target: int = 0
    bytes_to_client: int = 0
    lost: int = 0
    cuts: int = 0


class Relay:
    """Relays ``listen_host``:port (:attr:`port`, free, chosen at start) to ``target`` (host:port),
    connecting from ``listen_host``. Use as a context manager."""

    def __init__(self, listen_host: str, target: str, to_target: Impair | None = None,
                 to_client: Impair | None = None, lifetime_s: float = 600.0, seed: int | None = None) -> None:
        self.host = check_addr(listen_host)
        thost, _, tport = target.rpartition(":")
        self.target = (check_addr(thost), int(tport))
        self.to_target, self.to_client = to_target or Impair(), to_client or Impair()
        self.lifetime_s = lifetime_s
        self.stats = Stats()
        self.port = 0
        self._rnd = random.Random(seed)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"relay-{listen_host}", daemon=True)

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> Relay:
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"relay did not start: {self._error!r}")
        return self

    def __enter__(self) -> Relay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the listener and every relayed connection; returns once the thread ended."""
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended (lifetime)
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread.is_alive():
            self._thread.join(30)

    # ------------------------------------------------------------------ the relay's own thread
    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # reported to start() when it fails before listening
            self._error = e
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        conns: set[asyncio.Task[None]] = set()

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if len(conns) >= MAX_CONNS:
                writer.close()
                return
            task = asyncio.current_task()
            assert task is not None
            conns.add(task)
            try:
                with contextlib.suppress(asyncio.CancelledError):  # cancelled by _main at close
                    await self._relay(reader, writer)
            finally:
                conns.discard(task)

        server = await asyncio.start_server(accepted, self.host, 0)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), self.lifetime_s)
        server.close()
        for t in list(conns):
            t.cancel()
        await asyncio.gather(*conns, return_exceptions=True)
        await server.wait_closed()

    async def _relay(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        try:
            treader, twriter = await asyncio.wait_for(
                asyncio.open_connection(*self.target, local_addr=(self.host, 0)), 10)
        except (TimeoutError, OSError):
            cwriter.close()
            return
        self.stats.conns += 1
        pumps = [asyncio.create_task(self._pump(creader, twriter, self.to_target, "bytes_to_target")),
                 asyncio.create_task(self._pump(treader, cwriter, self.to_client, "bytes_to_client"))]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)  # one side ended or was cut
        finally:
            for p in pumps:
                p.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for w in (cwriter, twriter):
                w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, imp: Impair, counter: str) -> None:
        """Copy one direction: a reader task queues (due time, chunk), this task writes each when due."""
        queue: collections.deque[tuple[float, bytes]] = collections.deque()
        buffered = [0]
        room, ready = asyncio.Event(), asyncio.Event()
        room.set()
        done, cut = [False], [False]

        async def read() -> None:
            try:
                await read_all()
            finally:
                done[0] = True
                ready.set()

        async def read_all() -> None:
            last_due = 0.0
            while True:
                await room.wait()
                data = await reader.read(CHUNK)
                if not data:
                    break
                if self._rnd.random() < imp.cut:
                    self.stats.cuts += 1
                    cut[0] = True  # the bytes in flight are gone with the connection
                    break
                extra = 0.0
                if self._rnd.random() < imp.loss:
                    self.stats.lost += 1
                    extra = imp.rto_s
                last_due = max(last_due, time.monotonic() + imp.delay_s + extra)  # in order, as TCP delivers
                queue.append((last_due, data))
                buffered[0] += len(data)
                if buffered[0] >= MAX_BUFFERED:
                    room.clear()
                ready.set()

        rtask = asyncio.create_task(read())
        try:
            while not cut[0]:
                if not queue:
                    if done[0]:
                        return
                    ready.clear()
                    await ready.wait()
                    continue
                due, data = queue[0]
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                queue.popleft()
                writer.write(data)
                await writer.drain()
                buffered[0] -= len(data)
                setattr(self.stats, counter, getattr(self.stats, counter) + len(data))
                if buffered[0] < MAX_BUFFERED:
                    room.set()
        except (OSError, ConnectionError):
            return
        finally:
            rtask.cancel()
            with contextlib.suppress(BaseException):
                await rtask
