"""The RocketMQ 5 Python SDK (``rocketmq-python-client`` 5.1.2, gRPC) for the fault matrix; runs under
``.venv5``'s interpreter. Lines in the history's shape; each mode runs until "stop" on stdin.

Modes:
  produce  {"endpoint","topic","interval_ms"}
  push     {"endpoint","topic","group"}
  simple   {"endpoint","topic","group","invisible_s","hold_mod"}
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)

_out = threading.Lock()
stop = threading.Event()


def emit(obj: dict[str, Any]) -> None:
    obj.setdefault("t", time.time())
    with _out:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def watch_stdin() -> None:
    sys.stdin.readline()
    stop.set()


def produce(cfg: dict[str, Any]) -> None:
    p = Producer(ClientConfiguration(cfg["endpoint"], Credentials()), (cfg["topic"],))
    p.startup()
    i = 0
    try:
        while not stop.is_set():
            body = f"{cfg['topic']}-{i}"
            m = Message()
            m.topic = cfg["topic"]
            m.body = body.encode()
            rec: dict[str, Any] = {"ev": "send", "id": body, "t0": time.time()}
            try:
                p.send(m)
                rec["ok"] = True
            except Exception as e:  # noqa: BLE001 - the history decides
                rec.update(ok=False, error=f"{type(e).__name__}: {e}"[:200])
            rec["t"] = time.time()
            emit(rec)
            i += 1
            stop.wait(int(cfg.get("interval_ms", 50)) / 1000)
    finally:
        p.shutdown()


class Listener(MessageListener):
    def consume(self, message: Any) -> Any:
        emit({"ev": "recv", "id": message.body.decode(), "attempt": message.delivery_attempt, "result": "ok"})
        return ConsumeResult.SUCCESS


def push(cfg: dict[str, Any]) -> None:
    c = PushConsumer(ClientConfiguration(cfg["endpoint"], Credentials()), cfg["group"], Listener(),
                     {cfg["topic"]: FilterExpression("*")})
    c.startup()
    emit({"ev": "started"})
    try:
        stop.wait()
    finally:
        c.shutdown()


def simple(cfg: dict[str, Any]) -> None:
    c = SimpleConsumer(ClientConfiguration(cfg["endpoint"], Credentials()), cfg["group"],
                       {cfg["topic"]: FilterExpression("*")}, await_duration=2)
    c.startup()
    emit({"ev": "started"})
    hold, held = int(cfg.get("hold_mod", 0)), set()
    try:
        while not stop.is_set():
            try:
                msgs = c.receive(16, int(cfg.get("invisible_s", 4)))
            except Exception as e:  # noqa: BLE001 - the endpoint is away: same client, again
                emit({"ev": "error", "error": f"{type(e).__name__}: {e}"[:200]})
                stop.wait(0.5)
                continue
            for m in msgs:
                body = m.body.decode()
                keep = bool(hold and int(body.rsplit("-", 1)[1]) % hold == 0 and body not in held)
                emit({"ev": "recv", "id": body, "attempt": m.delivery_attempt, "result": "hold" if keep else "ok"})
                if keep:
                    held.add(body)
                    continue
                try:
                    c.ack(m)
                except Exception as e:  # noqa: BLE001 - a stale receipt: the message comes back
                    emit({"ev": "ack_error", "id": body, "error": f"{type(e).__name__}: {e}"[:200]})
    finally:
        c.shutdown()


def main() -> None:
    cfg = json.loads(sys.argv[1])
    threading.Thread(target=watch_stdin, daemon=True).start()
    {"produce": produce, "push": push, "simple": simple}[cfg["mode"]](cfg)
    emit({"ev": "done"})


if __name__ == "__main__":
    main()
