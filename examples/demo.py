"""`make demo`: rmqd on its embedded default, then a short produce/consume round trip with rmq.client.

Starts `rmqd` with no arguments (NameServer 127.0.0.1:9876 + Broker :10911 with its VIP, HA and gRPC
ports, store in ./rmq-store),
sends ten messages, consumes them back with a push consumer subscribed to this run's tag, and stops
the daemon with SIGTERM (a clean shutdown: flush, checkpoint, abort marker removed).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import anyio

from rmq.client import Message, Producer, PushConsumer

NAMESRV = "127.0.0.1:9876"
TOPIC = "DemoTopic"
COUNT = 10


def start_rmqd() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "rmq.kernel.daemon"], stderr=subprocess.PIPE)
    ready = threading.Event()

    def pump() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            print(f"  rmqd | {line}", flush=True)
            if " ready: " in line:
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + 30
    while not ready.wait(0.1):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            sys.exit(f"rmqd did not start (exit {proc.returncode}); are ports 9876, 10911 (and 10909, 10912, 8081) free?")
    return proc


async def round_trip() -> None:
    tag = f"run{os.getpid()}"
    async with Producer("demo-producer", namesrv_addr=NAMESRV) as producer:
        for i in range(COUNT):
            msg = Message(TOPIC, f"hello rmq #{i}", tags=tag, keys=f"order-{i}", properties={"seq": str(i)})
            result = await producer.send(msg)
            print(f"sent     #{i}: {result.status.name} msg_id={result.msg_id} queue={result.queue.queue_id} "
                  f"offset={result.queue_offset}")

    received: list[str] = []
    done = anyio.Event()

    async def on_message(msg) -> None:  # type: ignore[no-untyped-def]
        received.append(msg.body.decode())
        print(f"received #{len(received) - 1}: {msg.body.decode()!r} tags={msg.tags} keys={msg.keys} "
              f"queue={msg.queue_id} offset={msg.queue_offset}")
        if len(received) >= COUNT:
            done.set()

    consumer = PushConsumer(f"demo-consumer-{tag}", namesrv_addr=NAMESRV, listener=on_message,
                            consume_from_where="FIRST_OFFSET")
    consumer.subscribe(TOPIC, tag)
    async with consumer:
        with anyio.fail_after(30):
            await done.wait()
    assert sorted(received) == sorted(f"hello rmq #{i}" for i in range(COUNT))
    print(f"demo ok: {COUNT} messages produced and consumed through rmqd")


def main() -> None:
    proc = start_rmqd()
    try:
        anyio.run(round_trip)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


if __name__ == "__main__":
    main()
