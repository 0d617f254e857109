"""The ``[proxy]`` table: RocketMQ 5's proxy, in local mode (inside the broker): its gRPC endpoint.

Declared to the kernel by the entry point ``rmq.sections: proxy``; read by the ``grpc`` processors
plugin, which the broker role selects.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs


@attrs.define
class ProxyConfig:
    """Only a config with a ``[proxy]`` table opens the endpoint (the embedded default has one): a RocketMQ
    broker serves no gRPC unless its proxy is enabled, and two brokers on one host must not both take 8081."""

    embedded: ClassVar[dict[str, Any]] = {}  # rmqd's no-config default: RocketMQ 5 clients' endpoint on 8081
    when_absent: ClassVar[str] = "no gRPC"  # what ``rmqd config`` says of a config without the table

    grpcServerPort: int = 8081  # 0 = no gRPC endpoint
