"""SYNC_FLUSH sends over the wire: an answer leaves only once its bytes are flushed (held answers,
the lone-producer flush, one flush per pipelined read), FLUSH_DISK_TIMEOUT when the disk does not
confirm in time, and nothing an acknowledged send stored is lost to a SIGKILL."""

from __future__ import annotations

import socket
import time
import urllib.request
from typing import Any

import anyio
from prometheus_client.parser import text_string_to_metric_families

from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.plugins.remoting_tcp import TcpRemotingClient
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.frame import FrameDecoder, encode
from rmq.protocol.message import decode_messages, encode_batch
from rmq.testing.daemon import free_port, runtime_info

TOPIC = "Durable"


def send_cmd(body: bytes, queue_id: int, props: str = "TAGS\x01t\x02WAIT\x01true",
             code: int = RequestCode.SEND_MESSAGE) -> RemotingCommand:
    return RemotingCommand.request(code, {
        "producerGroup": "PG", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": props,
        "batch": "false"}, body)


def batch_cmd(bodies: list[bytes], queue_id: int) -> RemotingCommand:
    """SEND_BATCH_MESSAGE carries the V2 (short-named) header, as a Java producer's send(Collection)."""
    return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, {
        "a": "PG", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0", "g": "0", "h": "0",
        "i": "", "j": "0", "k": "false", "m": "true"}, encode_batch([(b, 0, "WAIT\x01true") for b in bodies]))


def max_offset_cmd(queue_id: int) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": str(queue_id)})


def test_a_durable_send_is_answered_only_when_the_disk_confirms(rmqd_factory: Any) -> None:
    """A third party's flush policy whose disk never confirms: the answer waits syncFlushTimeout and
    says FLUSH_DISK_TIMEOUT with the stored message's id (never success, never sooner), while the
    connection and others keep being served; WAIT=false is answered at once."""
    port = free_port()
    d = rmqd_factory(broker_conf={"syncFlushTimeout": 600, "metricsExporterType": "PROM",
                                  "metricsPromExporterPort": port},
                     extra={"plugins": {"flush": ["stalled"]}})

    async def go() -> None:
        async with TcpRemotingClient(RemotingConfig(name="held")) as c, \
                TcpRemotingClient(RemotingConfig(name="other")) as other:
            addr = d.broker_addr
            held: dict[str, Any] = {}

            async def durable_send() -> None:
                t0 = time.monotonic()
                held["resp"] = await c.invoke(addr, send_cmd(b"one", 1), 10)
                held["took"] = time.monotonic() - t0

            async with anyio.create_task_group() as tg:
                tg.start_soon(durable_send)
                await anyio.sleep(0.15)
                # the held answer blocks neither this connection nor another one
                fast = await c.invoke(addr, send_cmd(b"quick", 2, "TAGS\x01t\x02WAIT\x01false"), 5)
                assert fast.code == ResponseCode.SUCCESS and "resp" not in held
                mx = await other.invoke(addr, max_offset_cmd(2), 5)
                assert mx.code == ResponseCode.SUCCESS and "resp" not in held
            resp = held["resp"]
            assert resp.code == ResponseCode.FLUSH_DISK_TIMEOUT, resp
            assert held["took"] >= 0.5
            assert resp.ext["msgId"] and resp.ext["queueOffset"] == "0" and resp.ext["queueId"] == "1"

            batch = await c.invoke(addr, batch_cmd([b"a", b"b", b"c"], 3), 10)
            assert batch.code == ResponseCode.FLUSH_DISK_TIMEOUT, batch
            assert len(batch.ext["msgId"].split(",")) == 3

            offsets: dict[int, str] = {}
            with anyio.fail_after(10):  # stored all the same (the reput may lag the answer a little)
                for _ in range(200):
                    offsets = {q: (await c.invoke(addr, max_offset_cmd(q), 5)).ext["offset"] for q in (1, 3)}
                    if offsets == {1: "1", 3: "3"}:
                        break
                    await anyio.sleep(0.05)
            assert offsets == {1: "1", 3: "3"}

    anyio.run(go)
    # the request latency metric times a held send to its release, under the code it left with
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()  # noqa: S310
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}

    def metric(name: str, **labels: str) -> float | None:
        for (n, ls), v in samples.items():
            if n == name and all(dict(ls).get(k) == want for k, want in labels.items()):
                return v
        return None

    held = {"request_code": str(RequestCode.SEND_MESSAGE), "response_code": str(ResponseCode.FLUSH_DISK_TIMEOUT)}
    assert metric("rocketmq_rpc_latency_count", **held) == 1
    assert (metric("rocketmq_rpc_latency_sum", **held) or 0) >= 500  # ms: the whole wait for the disk
    assert metric("rocketmq_rpc_latency_count", request_code=str(RequestCode.SEND_MESSAGE),
                  response_code=str(ResponseCode.SUCCESS)) == 1  # the WAIT=false send


def test_sync_flush_acknowledged_sends_survive_sigkill(rmqd_factory: Any) -> None:
    """One producer alone (its puts flush on the spot) and then 64 sends in flight on one connection
    (answers held for shared rounds): every acknowledged message is there after a SIGKILL."""
    d = rmqd_factory(broker_conf={"flushDiskType": "SYNC_FLUSH"})
    acked: dict[tuple[int, int], bytes] = {}

    async def produce() -> None:
        async with TcpRemotingClient(RemotingConfig(name="p")) as c:
            async def one(i: int) -> None:
                body = f"m{i}".encode() * 10
                r = await c.invoke(d.broker_addr, send_cmd(body, i % 4), 10)
                assert r.code == ResponseCode.SUCCESS, r
                acked[(int(r.ext["queueId"]), int(r.ext["queueOffset"]))] = body

            for i in range(60):
                await one(i)
            async with anyio.create_task_group() as tg:
                for i in range(60, 124):
                    tg.start_soon(one, i)
            batch = await c.invoke(d.broker_addr, batch_cmd([b"b0", b"b1"], 0), 10)
            assert batch.code == ResponseCode.SUCCESS, batch
            first = int(batch.ext["queueOffset"])
            acked[(0, first)], acked[(0, first + 1)] = b"b0", b"b1"

    anyio.run(produce)
    d.kill()
    d.start()

    async def read_back() -> dict[tuple[int, int], bytes]:
        got: dict[tuple[int, int], bytes] = {}
        async with TcpRemotingClient(RemotingConfig(name="c")) as c:
            for q in range(4):
                offset = 0
                while True:
                    r = await c.invoke(d.broker_addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, {
                        "consumerGroup": "G", "topic": TOPIC, "queueId": str(q), "queueOffset": str(offset),
                        "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
                        "subscription": "*", "subVersion": "0", "expressionType": "TAG"}), 10)
                    if r.code != ResponseCode.SUCCESS:
                        break
                    for m in decode_messages(r.body):
                        got[(q, m.queue_offset)] = bytes(m.body)
                    offset = int(r.ext["nextBeginOffset"])
        return got

    got = anyio.run(read_back)
    assert len(acked) == 126
    missing = {k for k in acked if got.get(k) != acked[k]}
    assert not missing, f"acknowledged but lost or changed after SIGKILL: {sorted(missing)[:10]}"


def test_a_pipelining_producer_pays_one_flush_per_read_not_per_request(rmqd_factory: Any) -> None:
    """One connection alone, its requests arriving 16 to a socket read (written in one ``sendall``):
    every such read is covered by one commitlog flush, counted by the broker (``store.flush_rounds``
    in its runtime info), whether the round runs on the loop or on the flush thread. Between bursts
    the producer sends alone again, so the lone-producer flush is in play when the burst arrives."""
    d = rmqd_factory(broker_conf={"flushDiskType": "SYNC_FLUSH"})
    host, port = d.broker_addr.rsplit(":", 1)

    def rounds() -> int:
        return int(runtime_info(d.broker_addr)["store.flush_rounds"])

    with socket.create_connection((host, int(port)), timeout=30) as s:
        decoder = FrameDecoder()

        def exchange(n: int) -> list[RemotingCommand]:
            s.sendall(b"".join(encode(send_cmd(b"x" * 1024, i % 4)) for i in range(n)))
            got: list[RemotingCommand] = []
            while len(got) < n:
                chunk = s.recv(1 << 16)
                assert chunk, "the broker closed the connection"
                got += decoder.feed(chunk)
            assert [r.code for r in got] == [ResponseCode.SUCCESS] * n, [(r.code, r.remark) for r in got]
            return got

        for _ in range(40):  # alone, one request at a time: the disk proves fast, the producer lone
            exchange(1)
        bursts, costs = 10, []
        for _ in range(bursts):
            for _ in range(6):
                exchange(1)
            before = rounds()
            exchange(16)
            costs.append(rounds() - before)  # an answer leaves after the round that covered it counted
    # a stray round (a system topic's write) may land in a window; one per request would be 16 each
    assert sum(costs) <= bursts + 2 and max(costs) <= 2, costs
