"""A child process driving the official RocketMQ 5 Python SDK (PyPI ``rocketmq-python-client`` 5.1.2, gRPC).

Run with the interpreter of its own virtualenv (``.venv5``: its top-level module ``rocketmq`` is also
the 4.x C++ wrapper's name, and its protos clash with rmq's in one process):
``python grpcworker.py '<json config>'``; prints one JSON object per line (flushed).

Modes:
  produce   {"endpoint","topic","count","tag","keys","group" (FIFO), "delay_s", "tx": commit|rollback|none}
  receive   {"endpoint","topic","group","want","invisible_s","ack": true|false, "await_s", "timeout_s",
             "change_to_s" (change the invisible duration of each received message instead of acking)}
  push      {"endpoint","topic","group","want","fail_first": n (FAILURE for a message's first n deliveries),
             "work_s" (each delivery takes this long), "timeout_s"}
"""

from __future__ import annotations

import json
import sys
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
    TransactionChecker,
    TransactionResolution,
)


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Checker(TransactionChecker):
    def __init__(self, answer: str) -> None:
        self.answer = answer

    def check(self, message: Any) -> Any:
        emit({"checked": message.message_id})
        return TransactionResolution.COMMIT if self.answer == "commit" else TransactionResolution.ROLLBACK


def produce(cfg: dict[str, Any]) -> None:
    conf = ClientConfiguration(cfg["endpoint"], Credentials(*cfg.get("credentials", ("", ""))))
    tx = cfg.get("tx", "none")
    p = Producer(conf, (cfg["topic"],), checker=Checker(cfg.get("check_answer", "commit")) if tx != "none" else None,
                 tls_enable=bool(cfg.get("tls")))
    p.startup()
    try:
        for i in range(int(cfg["count"])):
            m = Message()
            m.topic = cfg["topic"]
            m.body = f"body-{i}".encode()
            if cfg.get("tag"):
                m.tag = cfg["tag"]
            if cfg.get("keys"):
                m.keys = cfg["keys"]
            if cfg.get("group"):
                m.message_group = cfg["group"]
            if cfg.get("delay_s"):
                m.delivery_timestamp = int(time.time()) + int(cfg["delay_s"])
            try:
                if tx != "none":
                    t = p.begin_transaction()
                    r = p.send(m, t)
                    if tx == "commit":
                        t.commit()
                    elif tx == "rollback":
                        t.rollback()
                    # "hold": neither; the broker's check asks the checker
                else:
                    r = p.send(m)
                emit({"i": i, "message_id": r.message_id, "offset": r.offset})
            except Exception as e:  # the test decides
                emit({"i": i, "error": f"{type(e).__name__}: {e}"})
        if cfg.get("linger_s"):
            time.sleep(float(cfg["linger_s"]))  # stay up for transaction checks
    finally:
        p.shutdown()
    emit({"done": True})


def receive(cfg: dict[str, Any]) -> None:
    conf = ClientConfiguration(cfg["endpoint"], Credentials(*cfg.get("credentials", ("", ""))))
    c = SimpleConsumer(conf, cfg["group"], {cfg["topic"]: FilterExpression(cfg.get("expression", "*"))},
                       await_duration=int(cfg.get("await_s", 3)))
    c.startup()
    got = 0
    deadline = time.time() + float(cfg.get("timeout_s", 30))
    try:
        while got < int(cfg["want"]) and time.time() < deadline:
            try:
                msgs = c.receive(32, int(cfg.get("invisible_s", 15)))
            except Exception as e:
                emit({"error": f"{type(e).__name__}: {e}"})
                time.sleep(0.5)
                continue
            for m in msgs:
                got += 1
                emit({"msg": {"body": m.body.decode(), "id": m.message_id, "tag": m.tag, "keys": list(m.keys or []),
                              "attempt": m.delivery_attempt, "group": m.message_group,
                              "props": dict(m.properties or {})}})
                if cfg.get("change_to_s") is not None:
                    c.change_invisible_duration(m, int(cfg["change_to_s"]))
                    emit({"changed": m.message_id})
                elif cfg.get("ack", True):
                    c.ack(m)
                    emit({"acked": m.message_id})
    finally:
        c.shutdown()
    emit({"done": True})


class Listener(MessageListener):
    def __init__(self, fail_first: int, work_s: float = 0) -> None:
        self.fail_first = fail_first
        self.work_s = work_s
        self.seen: dict[str, int] = {}
        self.ok: set[str] = set()

    def consume(self, message: Any) -> Any:
        n = self.seen[message.message_id] = self.seen.get(message.message_id, 0) + 1
        fail = n <= self.fail_first
        time.sleep(self.work_s)
        emit({"msg": {"body": message.body.decode(), "id": message.message_id, "attempt": message.delivery_attempt,
                      "result": "FAILURE" if fail else "SUCCESS"}})
        if fail:
            return ConsumeResult.FAILURE
        self.ok.add(message.message_id)
        return ConsumeResult.SUCCESS


def push(cfg: dict[str, Any]) -> None:
    conf = ClientConfiguration(cfg["endpoint"], Credentials())
    listener = Listener(int(cfg.get("fail_first", 0)), float(cfg.get("work_s", 0)))
    c = PushConsumer(conf, cfg["group"], listener, {cfg["topic"]: FilterExpression(cfg.get("expression", "*"))})
    c.startup()
    deadline = time.time() + float(cfg.get("timeout_s", 40))
    try:
        while len(listener.ok) < int(cfg["want"]) and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # the last acks leave
    finally:
        c.shutdown()
    emit({"done": True, "ok": len(listener.ok)})


def bench(cfg: dict[str, Any]) -> None:
    """Sequential sends, then receive + ack until all are back; per-operation latencies in ms."""
    conf = ClientConfiguration(cfg["endpoint"], Credentials())
    n = int(cfg["count"])
    p = Producer(conf, (cfg["topic"],))
    p.startup()
    lat = []
    body = b"x" * int(cfg.get("size", 1024))
    t0 = time.perf_counter()
    for _ in range(n):
        m = Message()
        m.topic = cfg["topic"]
        m.body = body
        t = time.perf_counter()
        p.send(m)
        lat.append((time.perf_counter() - t) * 1000)
    send_s = time.perf_counter() - t0
    p.shutdown()
    c = SimpleConsumer(conf, cfg["group"], {cfg["topic"]: FilterExpression("*")}, await_duration=2)
    c.startup()
    got, acks = 0, []
    t0 = time.perf_counter()
    while got < n and time.perf_counter() - t0 < 120:
        for m in c.receive(32, 30):
            t = time.perf_counter()
            c.ack(m)
            acks.append((time.perf_counter() - t) * 1000)
            got += 1
    recv_s = time.perf_counter() - t0
    c.shutdown()
    emit({"send_rate": n / send_s, "send_lat": sorted(lat), "recv_rate": got / recv_s, "ack_lat": sorted(acks),
          "received": got})


def main() -> None:
    cfg = json.loads(sys.argv[1])
    {"produce": produce, "receive": receive, "push": push, "bench": bench}[cfg["mode"]](cfg)
    emit({"exit": True})


if __name__ == "__main__":
    main()
