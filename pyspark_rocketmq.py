"""Spark's discovery hook for the ``rocketmq`` data source (``rmq.connectors.spark``).

Spark imports every top-level ``pyspark_*`` module and registers its ``DefaultSource``;
a failing import would make Spark skip all of them, so this stays a single cheap import.
"""

from rmq.connectors.spark import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
