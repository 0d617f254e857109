"""Interop with the C++ client (PyPI rocketmq 0.4.4 = librocketmq 1.2.3), both directions.

The C++ side runs in a subprocess (a native crash must not take pytest down) and
reports messages as JSON lines.
"""

from __future__ import annotations

import json
import sys
import textwrap
from typing import Any

import anyio
import pytest

from rmq.client import Message, MessageExt, Producer
from rmq.client.testing import collect_until, create_topic

pytest.importorskip("rocketmq.client")
pytestmark = pytest.mark.anyio

BIG = "x" * 6000 + "end"  # over 4 KiB: compressed by the sender, inflated by the receiver

CPP_PRODUCE = textwrap.dedent(
    """
    import json, sys
    from rocketmq.client import Producer, Message
    ns, topic, big = sys.argv[1], sys.argv[2], sys.argv[3]
    p = Producer("cpp_producer_" + topic)
    p.set_namesrv_addr(ns)
    p.start()
    out = []
    for i, body in enumerate(["hello from c++", "ünïcode", big]):
        m = Message(topic)
        m.set_body(body.encode())
        m.set_tags("TagCpp%d" % i)
        m.set_keys("ck%d ck-common" % i)
        m.set_property("color", "blue%d" % i)
        r = p.send_sync(m)
        out.append({"id": r.msg_id, "status": int(r.status)})
    batch = []
    for i in range(3):
        m = Message(topic)
        m.set_body(("batch %d" % i).encode())
        m.set_tags("TagBatch")
        m.set_keys("bk%d" % i)
        batch.append(m)
    r = p.send_batch(batch)
    out.append({"batch": r.msg_id, "status": int(r.status)})
    p.shutdown()
    print(json.dumps(out), flush=True)
    """
)

CPP_CONSUME = textwrap.dedent(
    """
    import json, sys, threading, time
    from rocketmq.client import PushConsumer
    ns, topic, group, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    got, done, lock = [], threading.Event(), threading.Lock()
    def cb(msg):
        with lock:
            got.append({"body": msg.body.decode(), "tags": msg.tags.decode(), "keys": msg.keys.decode(),
                        "color": (msg.get_property("color") or b"").decode(), "id": msg.id,
                        "queue_offset": msg.queue_offset})
            if len(got) >= want:
                done.set()
    c = PushConsumer(group)
    c.set_namesrv_addr(ns)
    c.subscribe(topic, cb)
    c.start()
    done.wait(40)
    time.sleep(0.5)
    c.shutdown()
    print(json.dumps(got), flush=True)
    """
)


async def _run(script: str, *args: str, timeout: float = 60) -> Any:
    proc = await anyio.run_process([sys.executable, "-c", script, *args], check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


async def test_cpp_produces_python_consumes(ns: str, name: str) -> None:
    topic, group = f"T_{name}", f"G_{name}"
    await create_topic(ns, topic, 4)
    with anyio.fail_after(90):
        sent = await _run(CPP_PRODUCE, ns, topic, BIG)
        assert all(s["status"] == 0 for s in sent)
        got = await collect_until(ns, group, topic, "*", lambda g: len(g) >= 6, consume_from_where="FIRST_OFFSET",
                                  timeout=30)
    by_tag: dict[str, list[MessageExt]] = {}
    for m in got:
        by_tag.setdefault(m.tags or "", []).append(m)
    assert by_tag["TagCpp0"][0].body == b"hello from c++"
    assert by_tag["TagCpp1"][0].body == "ünïcode".encode()
    big = by_tag["TagCpp2"][0]
    assert big.body == BIG.encode() and big.sys_flag & 1  # compressed by C++, inflated here
    for i in range(3):
        m = by_tag[f"TagCpp{i}"][0]
        assert m.keys == f"ck{i} ck-common" and m.properties["color"] == f"blue{i}"
        assert m.msg_id == sent[i]["id"]  # C++'s UNIQ_KEY is our msg_id
    assert sorted(m.body for m in by_tag["TagBatch"]) == [b"batch 0", b"batch 1", b"batch 2"]
    assert sorted(m.keys for m in by_tag["TagBatch"]) == ["bk0", "bk1", "bk2"]


async def test_python_produces_cpp_consumes(ns: str, name: str) -> None:
    topic, group = f"T_{name}", f"G_{name}"
    await create_topic(ns, topic, 4)
    with anyio.fail_after(90):
        async with Producer(f"P_{name}", ns) as producer:
            ids = {}
            for i, body in enumerate(["hello from python", "ünïcode", BIG]):
                r = await producer.send(Message(topic, body, tags=f"TagPy{i}", keys=[f"pk{i}", "pk-common"],
                                                properties={"color": f"green{i}"}))
                ids[f"TagPy{i}"] = r.msg_id
            res = await producer.send_batch(
                [Message(topic, f"batch {i}", tags="TagBatch", keys=f"bk{i}", properties={"color": "b"})
                 for i in range(3)]
            )
            batch_ids = res[0].msg_ids
        got = await _run(CPP_CONSUME, ns, topic, group, "6")
    assert len(got) >= 6
    by_tag: dict[str, list[dict[str, Any]]] = {}
    for m in got:
        by_tag.setdefault(m["tags"], []).append(m)
    assert by_tag["TagPy0"][0]["body"] == "hello from python"
    assert by_tag["TagPy1"][0]["body"] == "ünïcode"
    assert by_tag["TagPy2"][0]["body"] == BIG  # compressed by us, inflated by C++
    for i in range(3):
        m = by_tag[f"TagPy{i}"][0]
        assert m["keys"] == f"pk{i} pk-common" and m["color"] == f"green{i}" and m["id"] == ids[f"TagPy{i}"]
    assert sorted(m["body"] for m in by_tag["TagBatch"]) == ["batch 0", "batch 1", "batch 2"]
    assert sorted(m["id"] for m in by_tag["TagBatch"]) == sorted(batch_ids)
