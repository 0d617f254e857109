"""The C++ client (PyPI ``rocketmq`` 0.4.4) for the fault matrix: ``tests/compat/cppworker.py`` with its
lines put in the history's shape (``send`` / ``recv`` with times). A producer stops on "stop" (stdin)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

spec = importlib.util.spec_from_file_location("cppworker", Path(__file__).parents[1] / "compat" / "cppworker.py")
assert spec is not None and spec.loader is not None
cppworker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cppworker)
_out = threading.Lock()
_topic = ""


def emit(obj: dict[str, Any]) -> None:
    now = time.time()
    if "i" in obj:  # a send's answer: librocketmq 1.2.3 gives the status, its own (client) msgId and the
        # queue offset, not the queue nor the broker's offset msgId (so no "omid": whose ack it was is unknown)
        obj = {"ev": "send", "id": f"{_topic}-{obj['i']}", "i": obj["i"], "t0": obj.get("t0", now), "t": now,
               "ok": obj.get("status") == 0, "status": obj.get("status"), "error": obj.get("error"),
               "msgid": obj.get("msg_id"), "offset": obj.get("offset")}
    elif "msg" in obj or "failed" in obj:
        d = obj.get("msg") or obj["failed"]
        obj = {"ev": "recv", "id": d["body"], "t": now, "reconsume": d["reconsume"], "queue": d["queue_id"],
               "result": "ok" if "msg" in obj else "fail"}
    elif "started" in obj or "done" in obj:
        obj = {"ev": "started" if "started" in obj else "done", **obj}
    with _out:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def main() -> None:
    global _topic
    cfg = json.loads(sys.argv[1])
    _topic = cfg["topic"]
    cppworker.emit = emit
    if cfg["mode"] == "produce":  # its send loop does not read stdin: leave at once on "stop"
        def watch() -> None:
            sys.stdin.readline()
            sys.stdout.flush()
            os._exit(0)
        threading.Thread(target=watch, daemon=True).start()
    {"produce": cppworker.produce, "push": cppworker.push}[cfg["mode"]](cfg)


if __name__ == "__main__":
    main()
