"""Push-consume a topic with the blocking API (a plain function as listener).

    python examples/consume.py [namesrv] [topic]    # Ctrl-C to stop
"""

import sys
import time

from rmq.client import ConsumeResult
from rmq.client.blocking import PushConsumer


def on_message(msg):
    print(f"{msg.topic} q{msg.queue_id}@{msg.queue_offset} tags={msg.tags} keys={msg.keys} {msg.body!r}")
    if msg.body == b"fail me":
        return ConsumeResult.RECONSUME_LATER  # redelivered later via %RETRY%<group>
    return None  # (or just return) = consumed


def main(namesrv: str, topic: str) -> None:
    consumer = PushConsumer(
        "example_consumer", namesrv_addr=namesrv, listener=on_message, consume_from_where="FIRST_OFFSET"
    )
    consumer.subscribe(topic, "TagA || TagB")
    with consumer:
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass  # leaving the with-block commits offsets and unregisters


if __name__ == "__main__":
    args = sys.argv[1:]
    main(args[0] if args else "127.0.0.1:9876", args[1] if len(args) > 1 else "TopicTest")
