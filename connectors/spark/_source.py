"""The ``rocketmq`` DataSource: options in, readers and writers out."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from rmq.connectors.spark._options import RocketMQOptionError, parse_sink_options, parse_source_options
from rmq.connectors.spark._schema import read_ddl

__all__ = ["RocketMQDataSource"]


def _include_headers(options: dict[str, str]) -> bool:
    for k, v in options.items():
        if k.lower() == "includeheaders":
            return v.strip().lower() in ("true", "1", "yes")
    return False


class RocketMQDataSource(DataSource):
    """RocketMQ topics as a Spark source and sink, named ``rocketmq``.

    Read: ``spark.read.format("rocketmq").option("nameserver", "host:9876").option("subscribe", "t")``
    (``readStream`` likewise). Write: a DataFrame with a ``value`` column (+ ``key``, ``tags``,
    ``topic``, ``partition``, ``headers``). Options are documented in ``rmq.connectors.spark``.
    """

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> str:
        return read_ddl(_include_headers(dict(self.options)))

    def _check_schema(self, schema: StructType) -> None:
        want = [f.name for f in schema.fields]
        expected = [c.split(" ")[0] for c in read_ddl(_include_headers(dict(self.options))).split(", ")]
        if want[: len(expected)] != expected or len(want) != len(expected):
            raise RocketMQOptionError(
                "schema", f"the rocketmq source has a fixed schema ({', '.join(expected)}); do not pass .schema()"
            )

    def reader(self, schema: StructType) -> DataSourceReader:
        from rmq.connectors.spark._reader import (
            RocketMQBatchReader,
            RocketMQPushdownBatchReader,
            pushdown_planning,
        )

        config = parse_source_options(self.options, streaming=False)
        self._check_schema(schema)
        cls = RocketMQPushdownBatchReader if pushdown_planning() else RocketMQBatchReader
        return cls(config, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from rmq.connectors.spark._reader import RocketMQStreamReader

        config = parse_source_options(self.options, streaming=True)
        self._check_schema(schema)
        return RocketMQStreamReader(config, schema)

    def writer(self, schema: StructType, overwrite: bool):  # type: ignore[no-untyped-def]
        from rmq.connectors.spark._writer import RocketMQWriter, check_sink_schema

        _no_overwrite(overwrite)
        config = parse_sink_options(self.options)
        check_sink_schema(schema, config)
        return RocketMQWriter(config, schema)

    def streamWriter(self, schema: StructType, overwrite: bool):  # type: ignore[no-untyped-def]
        from rmq.connectors.spark._writer import RocketMQStreamWriter, check_sink_schema

        _no_overwrite(overwrite)
        config = parse_sink_options(self.options)
        check_sink_schema(schema, config)
        return RocketMQStreamWriter(config, schema)


def _no_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise RocketMQOptionError(
            "mode", "a RocketMQ topic is append-only: use mode('append') (overwrite / complete are not supported)"
        )
