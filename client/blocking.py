"""Blocking facade for scripts: the same classes, names and signatures, without ``await``.

Each object runs its async twin in an event loop on a background thread (uvloop
when installed)::

    from rmq.client.blocking import Producer
    from rmq.client import Message

    with Producer("my-group", namesrv_addr="127.0.0.1:9876") as p:
        print(p.send(Message("TopicTest", "hello")))

Callbacks (``send_async``'s callback, async listeners) run on that loop thread;
plain-function listeners of PushConsumer run in its worker threads.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any, ClassVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from rmq.client import admin as _admin
from rmq.client import producer as _producer
from rmq.client import pull as _pull
from rmq.client import push as _push
from rmq.client import transaction as _transaction
from rmq.client.errors import ClientStateError
from rmq.client.message import (
    ConsumeResult,
    LocalTransactionState,
    Message,
    MessageExt,
    MessageQueue,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
)

__all__ = [
    "Admin",
    "ConsumeResult",
    "LitePullConsumer",
    "LocalTransactionState",
    "Message",
    "MessageExt",
    "MessageQueue",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "SendResult",
    "SendStatus",
    "TransactionProducer",
]


class _Blocking:
    """Hosts ``async with <async object>`` in one task of a private event-loop thread.

    A facade names its async class and the methods to expose in its class statement
    (``class Producer(_Blocking, of=..., methods=[...])``), so each facade is declared once.
    """

    _async_cls: ClassVar[type[Any]]

    def __init_subclass__(cls, *, of: type[Any], methods: list[str], **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._async_cls = of
        for name in methods:
            setattr(cls, name, _blocking_method(name, getattr(of, name)))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._obj = self._async_cls(*args, **kwargs)
        self._portal: BlockingPortal | None = None
        self._portal_cm: Any = None
        self._ctx: Any = None

    @property
    def aio(self) -> Any:
        """The async object behind this facade."""
        return self._obj

    def start(self) -> None:
        if self._portal is not None:
            return
        use_uvloop = bool(getattr(self._obj, "_options", None) and self._obj._options.use_uvloop)
        opts = {"use_uvloop": True} if use_uvloop and importlib.util.find_spec("uvloop") else {}
        cm = start_blocking_portal("asyncio", backend_options=opts)
        portal = cm.__enter__()
        try:
            ctx = portal.wrap_async_context_manager(self._obj)
            ctx.__enter__()
        except BaseException:
            cm.__exit__(None, None, None)
            raise
        self._portal_cm, self._portal, self._ctx = cm, portal, ctx

    def shutdown(self) -> None:
        ctx, cm = self._ctx, self._portal_cm
        self._ctx = self._portal_cm = self._portal = None
        try:
            if ctx is not None:
                ctx.__exit__(None, None, None)
        finally:
            if cm is not None:
                cm.__exit__(None, None, None)

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        portal = self._portal
        if portal is None:  # before start: plain set-up calls (subscribe, assign) run inline
            res = fn(*args, **kwargs)
            if hasattr(res, "__await__"):
                res.close()
                raise ClientStateError(f"{type(self).__name__} is not started: call start() or use 'with'")
            return res
        return portal.call(functools.partial(fn, *args, **kwargs))

    def __getattr__(self, name: str) -> Any:  # read-only attributes of the async object
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._obj, name)


def _blocking_method(name: str, target: Any) -> Any:
    """A method that runs the async object's ``name`` on the loop thread, with ``target``'s signature and doc."""

    @functools.wraps(target)
    def method(self: _Blocking, *args: Any, **kwargs: Any) -> Any:
        return self._run(getattr(self._obj, name), *args, **kwargs)

    return method


_PRODUCER = ["send", "send_async", "send_oneway", "send_batch", "fetch_publish_queues", "wait_async_sends", "request",
             "recall"]
_CONSUMER = ["subscribe", "unsubscribe", "assignment", "fetch_subscribe_queues", "fetch_consumer_ids", "rebalance",
             "persist_offsets"]


class Producer(_Blocking, of=_producer.Producer, methods=_PRODUCER):
    """Blocking twin of ``rmq.client.Producer``."""


class TransactionProducer(_Blocking, of=_transaction.TransactionProducer, methods=[*_PRODUCER, "send_in_transaction"]):
    """Blocking twin of ``rmq.client.TransactionProducer``."""


class PushConsumer(_Blocking, of=_push.PushConsumer, methods=[*_CONSUMER, "pause", "resume"]):
    """Blocking twin of ``rmq.client.PushConsumer``."""


class LitePullConsumer(
    _Blocking,
    of=_pull.LitePullConsumer,
    methods=[*_CONSUMER, "assign", "poll", "commit", "commit_sync", "committed", "seek", "seek_to_begin",
             "seek_to_end", "seek_by_timestamp", "pause", "resume"],
):
    """Blocking twin of ``rmq.client.LitePullConsumer``."""


class PullConsumer(
    _Blocking,
    of=_pull.PullConsumer,
    methods=["fetch_queues", "fetch_subscribe_queues", "min_offset", "max_offset", "search_offset",
             "earliest_msg_store_time", "fetch_consume_offset", "update_consume_offset", "pull"],
):
    """Blocking twin of ``rmq.client.PullConsumer``."""


class Admin(
    _Blocking,
    of=_admin.Admin,
    methods=["cluster_info", "list_topics", "topic_route", "create_topic", "delete_topic", "topic_stats",
             "consumer_progress", "consumer_lag", "consumer_ids", "reset_offset_by_timestamp", "view_message",
             "query_message", "query_message_by_id"],
):
    """Blocking twin of ``rmq.client.Admin``."""
