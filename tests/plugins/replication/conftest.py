"""Fixtures for replication: a name server, masters and slaves as separate rmqd processes, and a
TCP proxy between a slave and its master that can pause the stream or corrupt one frame."""

from __future__ import annotations

import asyncio
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.testing.daemon import RmqdProcess, call, free_port

SEG = 1024 * 1024  # small commitlog segments: streams roll files within a test



def send_ext(topic: str, queue_id: int = 0) -> dict[str, str]:
    return {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
            "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": "0", "flag": "0",
            "properties": "TAGS\x01t\x02WAIT\x01true"}


def send(addr: str, topic: str, body: bytes, queue_id: int = 0) -> RemotingCommand:
    return call(addr, RequestCode.SEND_MESSAGE, send_ext(topic, queue_id), body)



def commitlog(proc: RmqdProcess) -> bytes:
    """The store's commitlog as one byte string (segments in order; the unwritten tail included)."""
    return b"".join(p.read_bytes() for p in sorted((proc.workdir / "store" / "commitlog").iterdir()))


class Proxy:
    """Forwards one port to another on loopback (its own event loop in a thread).

    ``paused``: master→slave bytes are held back (the slave stalls, the master's sends wait).
    ``corrupt_next``: flip a byte inside the body of the next master→slave data frame.
    """

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.target = target_port
        self.paused = threading.Event()
        self.corrupt_next = threading.Event()
        self.corrupted = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(5)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._conn, "127.0.0.1", self.port)

    async def _conn(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            tr, tw = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            w.close()
            return

        async def up() -> None:  # slave -> master: reports, untouched
            while data := await r.read(65536):
                tw.write(data)
                await tw.drain()

        async def down() -> None:  # master -> slave: frames, maybe held or corrupted
            buf = b""
            while data := await tr.read(65536):
                buf += data
                out = b""
                while len(buf) >= 12:
                    size = int.from_bytes(buf[8:12], "big", signed=True)
                    if len(buf) < 12 + size:
                        break
                    frame, buf = bytearray(buf[: 12 + size]), buf[12 + size :]
                    if size > 200 and self.corrupt_next.is_set():
                        self.corrupt_next.clear()
                        frame[12 + size // 2] ^= 0x5A
                        self.corrupted += 1
                    out += frame
                while self.paused.is_set():  # noqa: ASYNC110 - a threading.Event the test thread sets
                    await asyncio.sleep(0.05)
                w.write(out)
                await w.drain()

        try:
            await asyncio.wait([asyncio.ensure_future(up()), asyncio.ensure_future(down())],
                               return_when=asyncio.FIRST_COMPLETED)
        except Exception:
            pass
        finally:
            for s in (w, tw):
                s.close()

    def close(self) -> None:
        async def shutdown() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


@pytest.fixture
def ha(rmqd_factory: Any, tmp_path: Path) -> Iterator[types.SimpleNamespace]:
    """``ha.namesrv()``, ``ha.master(**conf)``, ``ha.slave(master, **conf)``, ``ha.proxy(port)``."""
    proxies: list[Proxy] = []
    state: dict[str, RmqdProcess] = {}

    def namesrv() -> RmqdProcess:
        if "ns" not in state:
            state["ns"] = rmqd_factory(broker=False)
        return state["ns"]

    def broker(**conf: Any) -> RmqdProcess:
        ns = namesrv()
        base = {"namesrvAddr": ns.namesrv_addr, "mappedFileSizeCommitLog": SEG, "registerNameServerPeriod": 2000}
        return rmqd_factory(namesrv=False, broker_conf={**base, **conf})  # type: ignore[no-any-return]

    def master(**conf: Any) -> RmqdProcess:
        return broker(brokerRole=conf.pop("brokerRole", "SYNC_MASTER"), **conf)

    def slave(brokerId: int = 1, **conf: Any) -> RmqdProcess:
        return broker(brokerRole="SLAVE", brokerId=brokerId, **conf)

    def proxy(port: int) -> Proxy:
        p = Proxy(port)
        proxies.append(p)
        return p

    yield types.SimpleNamespace(namesrv=namesrv, master=master, slave=slave, proxy=proxy, broker=broker)
    for p in proxies:
        p.close()
