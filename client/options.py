"""Typed options for producers and consumers (seconds, not milliseconds).

Unknown keyword options fail closed with the list of known ones, so a typo never
silently keeps a default. Names are RocketMQ's Java option names in snake_case.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

import attrs

T = TypeVar("T")


def build(cls: type[T], options: dict[str, Any], what: str) -> T:
    known = {a.name for a in attrs.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"{what}: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return cls(**options)


def _positive(_inst: Any, attr: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attr.name} must be > 0, got {value!r}")


@attrs.define(kw_only=True)
class ClientOptions:
    """Shared by every client object."""

    instance_name: str | None = None  # client id = ip@instance_name; default: pid (+ #n per object)
    client_ip: str | None = None
    heartbeat_interval: float = attrs.field(default=30.0, validator=_positive)
    route_interval: float = attrs.field(default=30.0, validator=_positive)
    request_timeout: float = attrs.field(default=3.0, validator=_positive)  # admin/offset/route calls
    use_uvloop: bool = True  # blocking facade only
    # ACL: (access_key, secret_key) signs every request as RocketMQ's AclClientRPCHook does
    credentials: tuple[str, str] | None = attrs.field(default=None, converter=lambda v: tuple(v) if v else None)
    security_token: str | None = None
    # TLS (RocketMQ's tls.enable): trusts any server unless tls_verify (tls.client.authServer), then tls_ca
    tls: bool = False
    tls_verify: bool = False
    tls_ca: str | None = None
    tls_cert: str | None = None  # client certificate for servers that require one
    tls_key: str | None = None
    enable_trace: bool = False  # write RocketMQ message traces (Pub / SubBefore / SubAfter), see rmq.client.trace
    trace_topic: str = ""  # "" = RMQ_SYS_TRACE_TOPIC
    # the address outgoing connections bind ("" = the OS picks): a multi-homed host's chosen interface, or
    # a test client on its own loopback address that a packet filter can cut from one broker only
    local_host: str = ""


@attrs.define(kw_only=True)
class ProducerOptions(ClientOptions):
    send_timeout: float = attrs.field(default=3.0, validator=_positive)
    retry_times: int = 2  # retryTimesWhenSendFailed: 1 + 2 attempts for sync sends
    retry_times_async: int = 2
    retry_another_broker_when_not_store_ok: bool = False
    compress_over: int = 4096
    compress_level: int = 5
    max_message_size: int = 4 * 1024 * 1024
    default_topic_queue_nums: int = 4
    create_topic_key: str = "TBW102"
    latency_fault_tolerance: bool = True
    max_async_in_flight: int = 10_000
    batch_max_bytes: int = 4 * 1024 * 1024  # batches are split to stay under this


@attrs.define(kw_only=True)
class ConsumerOptions(ClientOptions):
    consume_concurrency: int = attrs.field(default=20, validator=_positive)
    consume_batch_size: int = attrs.field(default=1, validator=_positive)
    pull_batch_size: int = attrs.field(default=32, validator=_positive)
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue: int = 100  # MiB
    max_span: int = 2000  # consumeConcurrentlyMaxSpan
    pull_interval: float = 0.0
    suspend_timeout: float = 15.0  # broker long-poll hold
    pull_timeout: float = 30.0
    rebalance_interval: float = attrs.field(default=20.0, validator=_positive)
    persist_interval: float = attrs.field(default=5.0, validator=_positive)
    max_reconsume_times: int = -1  # -1: 16 (concurrent), unlimited (orderly)
    suspend_current_queue_time: float = 1.0
    consume_timestamp: int | None = None  # ms; TIMESTAMP start; default now - 30 min
    offset_store_dir: str = attrs.field(
        factory=lambda: os.environ.get("RMQ_CLIENT_OFFSET_STORE_DIR")
        or os.path.join(os.path.expanduser("~"), ".rocketmq_offsets")
    )
    post_subscription_when_pull: bool = True  # send the expression with each pull (C++ style)
    lock_interval: float = 20.0
    lock_max_live: float = 30.0
    shutdown_timeout: float = 10.0  # wait this long for in-flight listeners on shutdown
    allocation_options: dict[str, Any] = attrs.field(factory=dict)
    pull_retry_delay: float = 1.0  # after a failed pull (Java: 3 s on exceptions)
    send_back_retry_delay: float = 5.0
