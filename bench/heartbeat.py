"""rmqd CPU per HEART_BEAT, answered per read (fastbeat) or by consumer.py's handler, and reads with heartbeats.

    python bench/heartbeat.py [--beats N] [--inflight K] [--runs R]

For each path -- compiled (an unchanged heartbeat answered in the read) and RMQ_PURE_HEARTBEAT=1 (every
heartbeat through the Python path: a RemotingCommand, a task, parse_heartbeat, the registrations) --
alternated R times, a fresh rmqd (namesrv + broker) and one raw connection:

* heartbeats: N copies of one consumer's heartbeat (a consumer group with two subscriptions and its retry
  topic, the CLIENT_INNER_PRODUCER group, as the rmq and Java clients write it), K per write (a read), after a
  first one; the rmqd process's CPU per heartbeat (/proc, 10 ms ticks: N large enough for a few hundred);
* mixed reads: N / 8 reads of 8 SEND_MESSAGE_V2, a heartbeat, 8 more sends: how many of the sends and
  heartbeats the per-read path served (store.compiled_sends, compiledHeartbeats), and the CPU per request.

Only rmq.protocol and a socket are used.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import tempfile
from pathlib import Path

from broker import process_cpu  # type: ignore[import-not-found]

from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.frame import decode, encode
from rmq.testing.daemon import RmqdProcess, runtime_info

BODY = json.dumps({"clientID": "127.0.0.1@4242#1", "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
                   "consumerDataSet": [{
                       "groupName": "bench_group", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                       "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False, "subscriptionDataSet": [
                           {"classFilterMode": False, "codeSet": [], "expressionType": "TAG", "subString": "*",
                            "subVersion": 1700000000000, "tagsSet": [], "topic": t}
                           for t in ("BenchHbT", "%RETRY%bench_group")]}]}, separators=(",", ":")).encode()


def beat(opaque: int) -> bytes:
    return encode(RemotingCommand.request(RequestCode.HEART_BEAT, None, BODY, opaque=opaque, language="JAVA"))


def send(opaque: int) -> bytes:
    ext = {"a": "bench_producer", "b": "BenchHbT", "e": str(opaque % 4), "f": "0", "g": "1700000000000", "h": "0",
           "i": "TAGS\x01TagA\x02WAIT\x01true"}
    return encode(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, ext, b"x" * 100, opaque=opaque, language="JAVA"))


class Conn:
    def __init__(self, addr: str) -> None:
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def call(self, frames: bytes, answers: int) -> None:
        """Write ``frames`` at once, read ``answers`` answers (each checked: SUCCESS)."""
        self.sock.sendall(frames)
        while answers:
            while len(self.buf) < 4 or len(self.buf) < 4 + struct.unpack_from(">i", self.buf)[0]:
                chunk = self.sock.recv(1 << 20)
                assert chunk, "closed"
                self.buf += chunk
            n = 4 + struct.unpack_from(">i", self.buf)[0]
            cmd, self.buf = decode(self.buf[:n]), self.buf[n:]
            if cmd.flag & 1:  # not the broker's own request (NOTIFY_CONSUMER_IDS_CHANGED after the first heartbeat)
                assert cmd.code == 0, cmd
                answers -= 1


def measure(addr: str, pid: int, beats: int, inflight: int) -> dict[str, float]:
    c = Conn(addr)
    ext = {"topic": "BenchHbT", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
           "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
    c.call(encode(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, ext, opaque=1)), 1)
    c.call(beat(2) + send(3), 2)  # the Python path's first heartbeat and send give the connection its halves
    read = b"".join(beat(10 + i) for i in range(inflight))
    cpu0 = process_cpu(pid)
    for _ in range(beats // inflight):
        c.call(read, inflight)
    cpu_beat = (process_cpu(pid) - cpu0) / (beats // inflight * inflight) * 1e6
    info0 = runtime_info(addr)
    mixed = b"".join(send(100 + i) for i in range(8)) + beat(99) + b"".join(send(200 + i) for i in range(8))
    reads = max(beats // 8, 1)
    cpu0 = process_cpu(pid)
    for _ in range(reads):
        c.call(mixed, 17)
    cpu_mixed = (process_cpu(pid) - cpu0) / (reads * 17) * 1e6
    info1 = runtime_info(addr)
    return {"cpu_beat": cpu_beat, "cpu_mixed": cpu_mixed, "reads": reads,
            "sends": int(info1["store.compiled_sends"]) - int(info0["store.compiled_sends"]),
            "beats": int(info1["compiledHeartbeats"]) - int(info0["compiledHeartbeats"])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--beats", type=int, default=40_000)
    p.add_argument("--inflight", type=int, default=16, help="heartbeats per write")
    p.add_argument("--runs", type=int, default=2, help="alternated runs of each path")
    args = p.parse_args()
    print(f"rmqd heartbeat bench: {args.beats} heartbeats ({len(BODY)} B body), {args.inflight} per write; "
          f"{args.beats // 8} reads of 8 sends + a heartbeat + 8 sends; {args.runs} alternated runs, {os.cpu_count()} CPUs")
    for run in range(args.runs):
        for path, env in (("compiled", {}), ("python", {"RMQ_PURE_HEARTBEAT": "1"})):
            with tempfile.TemporaryDirectory(prefix="rmq-bench-") as tmp:
                proc = RmqdProcess(Path(tmp), env=env, proxy=False, broker_conf={"flushDiskType": "ASYNC_FLUSH"})
                proc.start(120)
                try:
                    assert proc.proc is not None
                    r = measure(proc.broker_addr, proc.proc.pid, args.beats, args.inflight)
                finally:
                    proc.stop()
            print(f"  run {run + 1} {path:<8}  rmqd CPU {r['cpu_beat']:5.2f} µs/heartbeat;  mixed reads: "
                  f"{r['cpu_mixed']:5.2f} µs/request, per read: {r['sends']}/{r['reads'] * 16} sends, "
                  f"{r['beats']}/{r['reads']} heartbeats")


if __name__ == "__main__":
    main()
