"""Child process of the crash tests (not a test module).

Opens an mmap store at argv[1] with the flush plugin argv[2] ("sync"/"async") and the
broker settings of argv[4] (JSON), prints ``READY``, then puts forever from four
concurrent tasks (singles, small batches, and some prepared transaction halves) and
prints every acknowledged UNIQ_KEY on its own line. The parent SIGKILLs it.
"""

from __future__ import annotations

import json
import random
import sys

import anyio
import anyio.lowlevel

from rmq.kernel.model import MessageRecord, PutStatus
from rmq.plugins.flush import AsyncFlushPlugin, SyncFlushPlugin
from rmq.plugins.storage_mmap import MmapStoragePlugin
from rmq.testing import make_kernel
from rmq.testing.storage import attach_from_hooks


def record(key: str, queue: int, rnd: random.Random, sys_flag: int = 0) -> MessageRecord:
    body = bytes([rnd.randrange(256)]) * rnd.choice((10, 100, 700, 3000))
    props = f"TAGS\x01t{queue}\x02KEYS\x01{key} k{queue}\x02UNIQ_KEY\x01{key}"
    return MessageRecord("Crash", queue, body, properties=props, sys_flag=sys_flag)


async def main(root: str, flush: str, run: str, broker: dict[str, object]) -> None:
    plugins = [MmapStoragePlugin(), SyncFlushPlugin() if flush == "sync" else AsyncFlushPlugin()]
    kernel = make_kernel(plugins, {"broker": {"storePathRootDir": root, **broker}})
    store = attach_from_hooks(kernel, kernel.hook.rmq_storage_make_store(kernel=kernel, config=kernel.config.broker))
    store.disk_usage_probe = lambda: 0.1
    out = sys.stdout

    async def putter(queue: int) -> None:
        rnd = random.Random(f"{run}-{queue}")
        i = 0
        while True:
            roll = rnd.random()
            if roll < 0.15:
                keys = [f"{run}-{queue}-{i + j}" for j in range(rnd.randint(2, 6))]
                r = await store.put_messages([record(k, queue, rnd) for k in keys])
            elif roll < 0.2:
                keys = []  # a prepared half: stored, never in a consume queue, not counted
                r = await store.put_message(record(f"{run}-{queue}-{i}-half", queue, rnd, sys_flag=0x4))
            else:
                keys = [f"{run}-{queue}-{i}"]
                r = await store.put_message(record(keys[0], queue, rnd))
            i += max(len(keys), 1)
            if r.status == PutStatus.PUT_OK and keys:
                out.write("".join(k + "\n" for k in keys))
                out.flush()
            await anyio.lowlevel.checkpoint()

    async with store:
        out.write("READY\n")
        out.flush()
        async with anyio.create_task_group() as tg:
            for q in range(4):
                tg.start_soon(putter, q)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))
