"""Cluster, topics and group progress (blocking API).

    python examples/admin.py [namesrv] [topic] [group]
"""

import sys

from rmq.client.blocking import Admin


def main(namesrv: str, topic: str, group: str) -> None:
    with Admin(namesrv) as admin:
        info = admin.cluster_info()
        print("clusters:", info.clusters)
        print("brokers:", info.brokers)
        admin.create_topic(topic, 8)
        print("topics:", admin.list_topics())
        for s in admin.topic_stats(topic):
            print(f"  {s.queue}: [{s.min_offset}, {s.max_offset})")
        for p in admin.consumer_progress(group, topic):
            print(f"  {p.queue}: committed {p.committed} max {p.max_offset} lag {p.lag}")


if __name__ == "__main__":
    args = sys.argv[1:]
    main(
        args[0] if args else "127.0.0.1:9876",
        args[1] if len(args) > 1 else "TopicTest",
        args[2] if len(args) > 2 else "example_consumer",
    )
