"""RocketMQ topics as a PySpark data source and sink, named ``rocketmq`` (no JVM jars).

Installing rmq makes ``spark.read.format("rocketmq")`` work on its own (Spark imports the
top-level ``pyspark_rocketmq`` module); :func:`register` does it explicitly.

Reading (batch ``spark.read`` / streaming ``spark.readStream``) — columns as Spark's Kafka
source: ``key binary, value binary, topic string, partition int, offset long,
timestamp timestamp, timestampType int`` plus ``broker string, queueId int, tags string,
msgId string`` and, with ``includeHeaders=true``, ``headers array<struct<key,value>>``
(user properties). ``partition`` is the index of (broker, queueId) in the topic's queues
sorted by broker name then queue id.

Options (strings; names case-insensitive; unknown names are errors):

==========================  =========================================================
nameserver                  required: ``host:port[;host:port]``
subscribe                   comma list of topics           } exactly
subscribePattern            regex over the cluster's topics } one of
assign                      ``{"topicA": [0, 1], "topicB": ["broker-a:0"]}``
startingOffsets             earliest | latest | ``{"t": {"broker-a:0": 42}}`` (-2 earliest,
                            -1 latest); batch default earliest, stream default latest
startingTimestamp           ms since epoch; each queue starts at the broker's offset for it
endingOffsets               batch only: latest (default) | JSON as above
endingTimestamp             batch only: ms since epoch
failOnDataLoss              true (default): offsets already gone fail the query; false skips
maxOffsetsPerTrigger        stream: messages per micro-batch, shared by lag
minPartitions               split big queue ranges into more tasks
includeHeaders              add the ``headers`` column
filter / filterType         broker-side filter: TAG (default, ``a || b``) or SQL92
groupId                     stream: commit progress as this consumer group's offsets
timestampSource             store (default, timestampType 1) | born (timestampType 0)
pullBatchSize               offsets per pull span (default 256); requestTimeoutMs
==========================  =========================================================

``df.where(col("tags") == "x")`` / ``isin(...)`` is pushed to the broker as a TAG filter.

Writing (``df.write`` / ``df.writeStream``, append only, at least once unless
``exactlyOnce=true``): ``value`` (string or binary) required; optional ``key``, ``tags``,
``topic``, ``partition``, ``headers``. Options: ``nameserver``, ``topic`` (overrides the
column), ``producerGroup``, ``batchSize`` (messages per batch send, default 256),
``sendTimeoutMs``, ``exactlyOnce`` (transactional halves ended by the driver's commit; see
the README), ``commitLogLocation``, ``transactionGraceMs``.
"""

from __future__ import annotations

from typing import Any

from rmq.connectors.spark._options import RocketMQOptionError
from rmq.connectors.spark._source import RocketMQDataSource

__all__ = ["RocketMQDataSource", "RocketMQOptionError", "register"]


def register(spark: Any) -> None:
    """Register the ``rocketmq`` format on ``spark`` (a SparkSession)."""
    spark.dataSource.register(RocketMQDataSource)
