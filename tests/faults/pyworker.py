"""A child process driving rmq.client for the fault matrix: ``python pyworker.py '<json config>'``.

Prints one JSON object per line (see ``rmq.testing.faults.History``): ``send`` for every attempt with
its answer, ``recv`` for every delivery with its time. Runs until "stop" arrives on stdin, so the
client lives through the whole fault without a restart.

Modes:
  (every mode: "local_host", the address the client connects from; produce: "send_timeout", "retry_times")
  produce  {"namesrv","topic","group","kind": normal|ordered|delay|timer|request|tx,"interval_ms",
            "delay_level","delay_s","tx": "commit"|"mix"|"unknown", "request_timeout_s", "first", "count"}
            (bodies are "<topic>-<i>" from i = first: a second producer of a flow gives its own ids)
  push     {"namesrv","topic","group","orderly","fail_always_mod","fail_once_mod","max_reconsume","reply"}
  simple   {"namesrv","topic","group","invisible_s","hold_mod"}
  checker  {"namesrv","group"}  -- a transaction producer that only answers the broker's checks
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import anyio

from rmq.client import (
    ConsumeResult,
    LocalTransactionState,
    Message,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionProducer,
    create_reply_message,
)

_out = threading.Lock()
FAST = {"route_interval": 2.0, "heartbeat_interval": 2.0}  # route/heartbeat every 2 s (RocketMQ: 30 s)


def client_opts(cfg: dict[str, Any], **more: Any) -> dict[str, Any]:
    """FAST, the worker's own loopback address (``local_host``: the nemesis cuts it from one broker) and
    the producer settings a schedule chooses."""
    opts: dict[str, Any] = {**FAST, **more}
    for k in ("local_host", "send_timeout", "retry_times"):
        if cfg.get(k) is not None:
            opts[k] = cfg[k]
    return opts


def emit(obj: dict[str, Any]) -> None:
    obj.setdefault("t", time.time())
    with _out:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def index(body: str) -> int:
    return int(body.rsplit("-", 1)[1])


async def wait_stop(stop: anyio.Event) -> None:
    await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
    stop.set()


def tx_outcome(cfg: dict[str, Any], i: int) -> str:
    mode = cfg.get("tx", "commit")
    if mode == "mix":
        return "commit" if i % 2 == 0 else "rollback"
    return mode


async def produce(cfg: dict[str, Any]) -> None:
    kind = cfg.get("kind", "normal")
    stop = anyio.Event()
    if kind == "tx":
        def checker(msg: Any) -> LocalTransactionState:
            """The answer the local transaction gave (END_TRANSACTION is oneway: a restart can lose it, and
            the check decides); an unknown one is decided here as a later producer would, even commits."""
            i = index(msg.body.decode())
            outcome = tx_outcome(cfg, i)
            commit = outcome == "commit" or (outcome == "unknown" and i % 2 == 0)
            return LocalTransactionState.COMMIT_MESSAGE if commit else LocalTransactionState.ROLLBACK_MESSAGE
        p: Producer = TransactionProducer(cfg["group"], cfg["namesrv"], checker=checker, **client_opts(cfg))
    else:
        p = Producer(cfg["group"], cfg["namesrv"], **client_opts(cfg))
    async with p, anyio.create_task_group() as tg:
        tg.start_soon(wait_stop, stop)
        i = first = int(cfg.get("first", 0))
        while not stop.is_set() and i < first + int(cfg.get("count", 10**9)):
            body = f"{cfg['topic']}-{i}"
            msg = Message(cfg["topic"], body)
            rec: dict[str, Any] = {"ev": "send", "id": body, "i": i}
            if kind == "delay":
                msg.delay_level = int(cfg["delay_level"])
                rec["delay_s"] = float(cfg["delay_s"])
            elif kind == "timer":
                msg.delay = float(cfg["delay_s"])
                rec["delay_s"] = float(cfg["delay_s"])
            rec["t0"] = time.time()
            if "delay_s" in rec:
                rec["not_before"] = rec["t0"] + rec["delay_s"]
            try:
                if kind == "ordered":
                    r = await p.send(msg, sharding_key=f"k{i % 8}")
                    rec.update(ok=r.ok, status=r.status.name, queue=r.queue.queue_id, key=f"k{i % 8}",
                               omid=r.offset_msg_id)
                elif kind == "request":
                    reply = await p.request(msg, timeout=float(cfg.get("request_timeout_s", 3)))
                    rec.update(ok=reply.body.decode() == f"re:{body}", status="REPLIED")
                elif kind == "tx":
                    outcome = tx_outcome(cfg, i)
                    state = {"commit": LocalTransactionState.COMMIT_MESSAGE,
                             "rollback": LocalTransactionState.ROLLBACK_MESSAGE,
                             "unknown": LocalTransactionState.UNKNOW}[outcome]
                    assert isinstance(p, TransactionProducer)
                    r = (await p.send_in_transaction(msg, lambda m, a, s=state: s)).send_result
                    must = {"commit": "deliver", "rollback": "never"}.get(outcome, "check")
                    if outcome == "unknown":  # the checker of a later producer decides: even commit
                        must = "deliver" if i % 2 == 0 else "never"
                    rec.update(ok=r.ok, status=r.status.name, must=must)
                else:
                    r = await p.send(msg)
                    # the broker's offset message id names the broker that stored it (the nemesis's checker)
                    rec.update(ok=r.ok, status=r.status.name, queue=r.queue.queue_id, omid=r.offset_msg_id)
            except Exception as e:  # noqa: BLE001 - reported: the history decides
                rec.update(ok=False, error=f"{type(e).__name__}: {e}"[:200])
            rec["t"] = time.time()
            if rec.get("must") == "never" and not rec["ok"]:
                rec["ok"] = True  # a failed half that must not be delivered still must not be
            emit(rec)
            i += 1
            if cfg.get("interval_ms"):
                with anyio.move_on_after(int(cfg["interval_ms"]) / 1000):
                    await stop.wait()
        tg.cancel_scope.cancel()
    emit({"ev": "done"})


async def push(cfg: dict[str, Any]) -> None:
    stop = anyio.Event()
    always, once = int(cfg.get("fail_always_mod", 0)), int(cfg.get("fail_once_mod", 0))
    failed: dict[str, int] = {}
    replier: Producer | None = Producer(cfg["group"] + "_REPLY", cfg["namesrv"], **FAST) if cfg.get("reply") else None

    async def listener(msg: Any) -> ConsumeResult:
        body = msg.body.decode()
        i = index(body)
        fail = bool(always and i % always == 0) or bool(once and i % once == 0 and failed.get(body, 0) < 1)
        if fail:
            failed[body] = failed.get(body, 0) + 1
        emit({"ev": "recv", "id": body, "topic": msg.topic, "queue": msg.queue_id, "offset": msg.queue_offset,
              "reconsume": msg.reconsume_times, "result": "fail" if fail else "ok"})
        if replier is not None:
            await replier.send(create_reply_message(msg, f"re:{body}"))
        return ConsumeResult.RECONSUME_LATER if fail else ConsumeResult.SUCCESS

    opts = client_opts(cfg, rebalance_interval=2.0, persist_interval=1.0)
    if cfg.get("max_reconsume") is not None:
        opts["max_reconsume_times"] = int(cfg["max_reconsume"])
    c = PushConsumer(cfg["group"], cfg["namesrv"], listener=listener, orderly=bool(cfg.get("orderly")),
                     consume_from_where="FIRST_OFFSET", **opts)
    c.subscribe(cfg["topic"], "*")
    if replier is not None:
        await replier.start()
    async with c, anyio.create_task_group() as tg:
        emit({"ev": "started"})
        tg.start_soon(wait_stop, stop)
        await stop.wait()
        tg.cancel_scope.cancel()
    if replier is not None:
        await replier.shutdown()
    emit({"ev": "done"})


async def simple(cfg: dict[str, Any]) -> None:
    stop = anyio.Event()
    hold = int(cfg.get("hold_mod", 0))
    invisible = float(cfg.get("invisible_s", 5))
    held: set[str] = set()
    async with SimpleConsumer(cfg["group"], cfg["namesrv"], subscriptions={cfg["topic"]: "*"}, await_duration=2,
                              **FAST) as c, anyio.create_task_group() as tg:
        emit({"ev": "started"})
        tg.start_soon(wait_stop, stop)
        while not stop.is_set():
            try:
                msgs = await c.receive(16, invisible)
            except Exception as e:  # noqa: BLE001 - the broker is away: try again, same client
                emit({"ev": "error", "error": f"{type(e).__name__}: {e}"[:200]})
                with anyio.move_on_after(0.5):
                    await stop.wait()
                continue
            for m in msgs:
                body = m.body.decode()
                keep = bool(hold and index(body) % hold == 0 and body not in held)
                emit({"ev": "recv", "id": body, "attempt": m.reconsume_times + 1,
                      "result": "hold" if keep else "ok"})
                if keep:
                    held.add(body)
                    continue
                try:
                    await c.ack(m)
                except Exception as e:  # noqa: BLE001 - a stale receipt: the message comes back
                    emit({"ev": "ack_error", "id": body, "error": f"{type(e).__name__}: {e}"[:200]})
        tg.cancel_scope.cancel()
    emit({"ev": "done"})


async def checker(cfg: dict[str, Any]) -> None:
    """Answers the broker's checks about halves of a producer that died: even bodies commit."""
    stop = anyio.Event()

    def check(msg: Any) -> LocalTransactionState:
        body = msg.body.decode()
        emit({"ev": "check", "id": body})
        return (LocalTransactionState.COMMIT_MESSAGE if index(body) % 2 == 0
                else LocalTransactionState.ROLLBACK_MESSAGE)

    async with TransactionProducer(cfg["group"], cfg["namesrv"], checker=check, **FAST), \
            anyio.create_task_group() as tg:
        emit({"ev": "started"})
        tg.start_soon(wait_stop, stop)
        await stop.wait()
        tg.cancel_scope.cancel()
    emit({"ev": "done"})


def main() -> None:
    cfg = json.loads(sys.argv[1])
    anyio.run({"produce": produce, "push": push, "simple": simple, "checker": checker}[cfg["mode"]], cfg)


if __name__ == "__main__":
    main()
