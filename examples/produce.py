"""Send a few messages (async API). Run an rmqd first: `rmqd` (namesrv 127.0.0.1:9876).

    python examples/produce.py [namesrv] [topic]
"""

import sys

import anyio

from rmq.client import Message, Producer


async def main(namesrv: str, topic: str) -> None:
    async with Producer("example_producer", namesrv_addr=namesrv) as producer:
        for i in range(10):
            msg = Message(topic, f"hello {i}", tags="TagA", keys=[f"order-{i}"], properties={"n": str(i)})
            result = await producer.send(msg)
            print(result.status.name, result.msg_id, result.queue, result.queue_offset)
        # same sharding key -> same queue: per-key ordering
        r = await producer.send(Message(topic, "ordered"), sharding_key="customer-42")
        print("sharded to", r.queue)
        # many small messages at once
        results = await producer.send_batch([Message(topic, f"batch {i}") for i in range(32)])
        print("batch of 32 ->", results[0].queue, "first offset", results[0].queue_offset)


if __name__ == "__main__":
    args = sys.argv[1:]
    anyio.run(main, args[0] if args else "127.0.0.1:9876", args[1] if len(args) > 1 else "TopicTest")
