"""Spark's discovery hook for the ``rocketmq`` data source (``rmq.connectors.spark``).

Spark imports every top-level ``pyspark_*`` module and registers its ``DefaultSource``.
Its lookup does not catch import errors, so one failing module would hide every other
Python data source: a broken install here only leaves ``DefaultSource`` undefined (and says
why on stderr), and the import stays a single cheap one.
"""

try:
    from rmq.connectors.spark import RocketMQDataSource as DefaultSource
except Exception as exc:  # pragma: no cover - only on a broken install
    import sys

    print(f"pyspark_rocketmq: the rocketmq data source is unavailable: {exc!r}", file=sys.stderr)
    __all__: list[str] = []
else:
    __all__ = ["DefaultSource"]
