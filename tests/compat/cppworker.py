"""A child process driving the real RocketMQ C++ client (PyPI ``rocketmq`` 0.4.4 = librocketmq 1.2.3).

Run as ``python cppworker.py '<json config>'``; prints one JSON object per line on
stdout (flushed), so the test can follow progress and enforce its own deadlines.
Each client runs in its own process because librocketmq keeps one client factory
per process (client id = pid-ip@instance): separate processes are separate
clients, and a client that hangs can be killed without taking pytest with it.

Modes:
  produce  {"namesrv","topic","count","start","method": sync|oneway|orderly|batch|async, "tags","keys",
            "credentials": [accessKey, secretKey, channel],
            "props": {name: value-template}, "delay", "group", "batch_size", "arg_mod", "interval_ms",
            "stop_on_error"}
  pull     {"namesrv","topic","group","expression","props": [names]}
  push     {"namesrv","topic","group","expression","model": clustering|broadcasting,"instance",
            "props": [names], "fail_first": n, "orderly": bool}  -- runs until "stop" arrives on stdin
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from rocketmq.client import Message, MessageModel, Producer, PullConsumer, PushConsumer, RecvMessage
from rocketmq.exceptions import ffi_check
from rocketmq.ffi import MSG_CALLBACK_FUNC, _CConsumeStatus, dll

_out = threading.Lock()


def emit(obj: dict[str, Any]) -> None:
    line = json.dumps(obj)
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def fmt(template: str, i: int) -> str:
    return template.replace("{i}", str(i))


def describe(msg: Any, props: list[str]) -> dict[str, Any]:
    def s(v: Any) -> Any:
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else v

    return {
        "topic": msg.topic,
        "tags": s(msg.tags),
        "keys": s(msg.keys),
        "body": s(msg.body),
        "id": msg.id,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "reconsume": msg.reconsume_times,
        "props": {p: s(msg.get_property(p)) for p in props},
    }


def build(cfg: dict[str, Any], i: int) -> Message:
    m = Message(cfg["topic"])
    if cfg.get("tags"):
        m.set_tags(fmt(cfg["tags"], i))
    if cfg.get("keys"):
        m.set_keys(fmt(cfg["keys"], i))
    for k, v in (cfg.get("props") or {}).items():
        m.set_property(k, fmt(v, i))
    if cfg.get("delay"):
        m.set_delay_time_level(int(cfg["delay"]))
    m.set_body(fmt(cfg.get("body", "body-{i}"), i))
    return m


def send_retrying_first(p: Producer, m: Any, method: str, arg: int, first: bool) -> Any:
    """One send; a producer's FIRST send is retried (5 x 0.2 s) when librocketmq 1.2.x reports "No route
    info": its first route answer makes it connect to the broker and heartbeat on another thread, and a
    send meanwhile finds the connection's mutex taken, fails all its retries at once ("GetTransport ... get
    timed_mutex timeout" in its log) and names the route — a race inside the client, seen on a loaded
    host; an application retries such a send, so the worker does too (once, at start)."""
    for attempt in range(6 if first else 1):
        try:
            return p.send_sync(m) if method == "sync" else p.send_orderly(m, arg)
        except Exception as e:
            if attempt == 5 or not first or "No route info" not in str(e):
                raise
            time.sleep(0.2)
    raise AssertionError("unreachable")


def produce(cfg: dict[str, Any]) -> None:
    p = Producer(cfg.get("group", "PG_COMPAT"))
    p.set_namesrv_addr(cfg["namesrv"])
    if cfg.get("credentials"):  # ACL: librocketmq signs every request (ClientRPCHook, OnsChannel included)
        p.set_session_credentials(*cfg["credentials"])
    p.start()
    method = cfg.get("method", "sync")
    start, count = int(cfg.get("start", 0)), int(cfg["count"])
    try:
        if method == "batch":
            size = int(cfg.get("batch_size", 10))
            for b in range(start, start + count, size):
                msgs = [build(cfg, i) for i in range(b, min(b + size, start + count))]
                r = p.send_batch(msgs)
                emit({"i": b, "n": len(msgs), "status": int(r.status), "msg_id": r.msg_id, "offset": r.offset})
        else:
            for i in range(start, start + count):
                m = build(cfg, i)
                t0 = time.time()  # when the attempt began (a chaos history orders sends by it)
                try:
                    if method == "oneway":
                        p.send_oneway(m)
                        emit({"i": i, "status": 0, "t0": t0})
                    elif method in ("sync", "orderly"):
                        r = send_retrying_first(p, m, method, i % int(cfg.get("arg_mod", 4)), first=i == start)
                        emit({"i": i, "status": int(r.status), "msg_id": r.msg_id, "offset": r.offset, "t0": t0})
                    else:
                        raise ValueError(f"unknown method {method}")
                except Exception as e:  # report and go on: the test decides
                    emit({"i": i, "error": f"{type(e).__name__}: {e}", "t0": t0})
                    if cfg.get("stop_on_error", True):
                        break
                if cfg.get("interval_ms"):  # a steady stream rather than a burst
                    time.sleep(int(cfg["interval_ms"]) / 1000)
    finally:
        p.shutdown()
    emit({"done": True})


def pull(cfg: dict[str, Any]) -> None:
    c = PullConsumer(cfg.get("group", "CG_PULL"))
    c.set_namesrv_addr(cfg["namesrv"])
    if cfg.get("credentials"):
        c.set_session_credentials(*cfg["credentials"])
    c.start()
    props = list(cfg.get("props") or [])
    try:
        for msg in c.pull(cfg["topic"], cfg.get("expression", "*")):
            emit({"msg": describe(msg, props)})
    finally:
        c.shutdown()
    emit({"done": True})


def push(cfg: dict[str, Any]) -> None:
    model = MessageModel.BROADCASTING if cfg.get("model") == "broadcasting" else MessageModel.CLUSTERING
    orderly = bool(cfg.get("orderly"))
    c = PushConsumer(cfg.get("group", "CG_PUSH"), orderly=orderly, message_model=model)
    c.set_namesrv_addr(cfg["namesrv"])
    if cfg.get("instance"):
        c.set_instance_name(cfg["instance"])
    c.set_thread_count(int(cfg.get("threads", 2)))
    props = list(cfg.get("props") or [])
    fail_first = int(cfg.get("fail_first", 0))
    failed: dict[str, int] = {}

    def on_message(consumer: Any, handle: Any) -> int:
        # The wrapper's own subscribe() re-raises callback exceptions inside ctypes, which leaves the
        # status returned to librocketmq undefined; return RECONSUME_LATER explicitly instead.
        d = describe(RecvMessage(handle), props)
        if fail_first and failed.get(d["body"], 0) < fail_first:
            failed[d["body"]] = failed.get(d["body"], 0) + 1
            emit({"failed": d})
            return int(_CConsumeStatus.RECONSUME_LATER.value)
        emit({"msg": d})
        return int(_CConsumeStatus.CONSUME_SUCCESS.value)

    ffi_check(dll.Subscribe(c._handle, cfg["topic"].encode(), cfg.get("expression", "*").encode()))
    callback = MSG_CALLBACK_FUNC(on_message)
    c._callback_refs.append(callback)
    register = dll.RegisterMessageCallbackOrderly if orderly else dll.RegisterMessageCallback
    ffi_check(register(c._handle, callback))
    c.start()
    emit({"started": True})
    try:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
    finally:
        c.shutdown()
    emit({"done": True})


def main() -> None:
    cfg = json.loads(sys.argv[1])
    t0 = time.time()
    {"produce": produce, "pull": pull, "push": push}[cfg["mode"]](cfg)
    emit({"exit": True, "seconds": round(time.time() - t0, 3)})


if __name__ == "__main__":
    main()
