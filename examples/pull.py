"""Read a topic queue by queue with explicit offsets (PullConsumer), then with LitePullConsumer.

    python examples/pull.py [namesrv] [topic]
"""

import sys

import anyio

from rmq.client import LitePullConsumer, PullConsumer, PullStatus


async def main(namesrv: str, topic: str) -> None:
    async with PullConsumer("example_puller", namesrv_addr=namesrv) as consumer:
        for mq in await consumer.fetch_queues(topic):
            lo, hi = await consumer.min_offset(mq), await consumer.max_offset(mq)
            print(mq, f"offsets [{lo}, {hi})")
            offset = lo
            while offset < hi:
                res = await consumer.pull(mq, offset, 32, expression="*")
                if res.status is PullStatus.FOUND:
                    for m in res.messages:
                        print("  ", m.queue_offset, m.tags, m.body[:40])
                elif res.status is PullStatus.NO_NEW_MSG:
                    break
                offset = res.next_begin_offset

    # background pulling, poll() in the foreground, offsets committed for the group
    async with LitePullConsumer("example_lite", namesrv_addr=namesrv, consume_from_where="FIRST_OFFSET") as lite:
        lite.subscribe(topic, "*")
        for _ in range(3):
            msgs = await lite.poll(timeout=2.0)
            print("polled", len(msgs))
        await lite.commit()


if __name__ == "__main__":
    args = sys.argv[1:]
    anyio.run(main, args[0] if args else "127.0.0.1:9876", args[1] if len(args) > 1 else "TopicTest")
