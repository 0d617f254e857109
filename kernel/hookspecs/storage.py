"""Storage: where messages live. One store per broker, built once at start-up.

The bundled ``mmap`` plugin writes Apache RocketMQ 4.9's on-disk format; ``memory``
is a same-contract store for tests. A wrapper plugin may decorate the store of a
plugin that ran before it by implementing the hook as a ``hookwrapper``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from rmq.kernel.markers import hookspec
from rmq.kernel.model import GetResult, MessageRecord, PutResult

if TYPE_CHECKING:
    from rmq.kernel.hookspecs.dispatch import CommitLogDispatcher
    from rmq.kernel.hookspecs.filtering import MessageFilter
    from rmq.kernel.hookspecs.flush import FlushPolicy
    from rmq.kernel.kernel import Kernel
    from rmq.kernel.watermark import Watermark


ForcedCleanHook = Callable[[dict[tuple[str, int], tuple[int, int]]], None]


@runtime_checkable
class MessageStore(Protocol):
    """A broker's message store.

    Wiring: the owner builds the store (``rmq_storage_make_store``), builds what the store
    works with by calling ``rmq_dispatch_make_dispatchers(kernel, store)`` and
    ``rmq_flush_make_policy(kernel, store, config)`` with it, hands the results over with
    :meth:`attach`, and only then enters it. A store never calls those hooks itself, so it
    works the same embedded, in a test, or under a broker. With nothing attached a store
    still works: its own dispatchers (queues, key index) always run, and it flushes by a
    small built-in policy (the broker's flush type decides whether puts wait).

    Commit notification: ``durable`` is a ``Watermark`` of commitlog bytes known to be on
    this disk, advanced after every flush (see ``FlushPolicy``); a durable put returns
    only once it passes the put's end. A replication service subscribes to it.

    Lifecycle: ``async with store:`` loads and recovers (blocking until dispatch has
    caught up, so queues are complete when the broker starts serving) and runs the
    background services (reput/dispatch, flush, retention); leaving it flushes,
    writes the checkpoint and removes the abort marker.

    Concurrency: one event loop; puts are serialised by the store (one writer).
    Reads never block the loop on I/O beyond page faults.

    Names: a topic arrives from clients and may name a directory. A store refuses a put
    whose topic breaks RocketMQ's rule (``rmq.protocol.names.validate_topic``) with
    MESSAGE_ILLEGAL before any side effect, ignores such names in ``delete_topics``, and
    builds every path from a name with ``rmq.kernel.paths.confined_path`` (removes with
    ``remove_confined``), so no request can reach outside the store.

    Full disk: a store that cannot write (no space for a file, a disk guard) refuses puts
    with SERVICE_NOT_AVAILABLE and a remark starting ``"disk full: "``, keeps serving
    reads, starts read-only on a full disk, and resumes writing by itself once space
    returns; it must never end the process (a write into an unreserved sparse mapping
    would: SIGBUS).

    """

    def attach(
        self,
        *,
        dispatchers: Sequence[CommitLogDispatcher] | None = None,
        flush_policy: FlushPolicy | None = None,
        store_host: bytes | None = None,
        on_forced_clean: ForcedCleanHook | None = None,
    ) -> None:
        """Hand the store what its owner built for it; call before ``async with store``.

        ``dispatchers`` run after the store's own, in the given order, for every record
        (replayed ones included). ``flush_policy`` replaces the built-in one; the store
        enters and leaves it. ``store_host`` is the STOREHOST written into records (8-byte
        IPv4 or 20-byte IPv6 form; default: the broker's advertised address and port).
        Each call replaces what it names and keeps the rest. Only ``store_host`` may be
        attached again while the store runs (a broker on an ephemeral port learns its
        port after the store opened); later records carry it. Anything else after the
        store started raises ``RuntimeError``; a wrong-length host ``ValueError``.

        ``on_forced_clean``: a store whose retention deletes data before it expires
        (RocketMQ's forced clean, the disk over its forced-clean ratio) calls it after
        the pass with ``{(topic, queue id): (min offset before, min offset after)}`` for
        every queue whose minimum moved, so the owner can say which consumer groups lost
        how many unconsumed messages. Called on the event loop; it must not block or raise.
        A store that never deletes early ignores it.
        """
        ...

    @property
    def durable(self) -> Watermark:
        """Commitlog bytes below ``durable.value`` are on disk; await ``wait_for`` or ``subscribe``."""
        ...

    async def __aenter__(self) -> MessageStore: ...

    async def __aexit__(self, *exc: object) -> None: ...

    async def put_message(self, msg: MessageRecord) -> PutResult:
        """Append one message.

        Durability: returns once the record is in the commitlog and, under a sync
        flush policy (or WAIT semantics of the policy), on disk; FLUSH_DISK_TIMEOUT
        means stored but not yet known durable. Ordering: queue offsets are assigned
        in call order. Not idempotent: a retried put stores a second copy.
        Cancellation: cancelling after the append leaves the message stored.
        Refusals store nothing and consume no queue offset: MESSAGE_ILLEGAL (bad name or
        size), SERVICE_NOT_AVAILABLE (not writable: the remark says why, "disk full: ..."
        when space is the reason).
        """
        ...

    async def put_messages(self, batch: Sequence[MessageRecord]) -> PutResult:
        """Append a batch for one (topic, queue) with one copy; consecutive queue offsets.

        All-or-nothing: an illegal member rejects the whole batch (MESSAGE_ILLEGAL).
        """
        ...

    def get_messages(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        message_filter: MessageFilter | None = None,
        max_bytes: int = 256 * 1024,
    ) -> GetResult:
        """Read up to ``max_count`` records from ``offset``; statuses as RocketMQ's GetMessageStatus.

        Idempotent and side-effect free; returns at least one record if any matches.
        ``group`` is the consumer group asking. The bundled stores do not use it; it is
        part of the contract because RocketMQ's ``getMessage`` takes it (per-group
        statistics, and a tiered store may pick a read path by group), and the broker's
        pull processor passes it.
        """
        ...

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        """Next queue offset to be written (0 for an empty or unknown queue)."""
        ...

    def get_min_offset(self, topic: str, queue_id: int) -> int: ...

    def get_offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        """Queue offset whose store time is nearest ``timestamp`` (exact match preferred)."""
        ...

    def get_earliest_store_time(self, topic: str, queue_id: int) -> int: ...

    def get_store_time(self, topic: str, queue_id: int, offset: int) -> int:
        """Store timestamp of the message at ``offset`` (-1 when absent)."""
        ...

    def look_message_by_offset(self, commit_log_offset: int) -> bytes | None:
        """The whole record starting at a commitlog offset (msgId lookups, send-back)."""
        ...

    def query_by_key(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[bytes]:
        """Records whose KEYS or UNIQ_KEY equal ``key``, stored within [begin, end] ms."""
        ...

    @property
    def max_phy_offset(self) -> int: ...

    @property
    def min_phy_offset(self) -> int: ...

    def delete_topics(self, topics: Sequence[str]) -> None:
        """Forget the consume queues of deleted topics (commitlog bytes age out normally).

        Names that are not valid topics are ignored; nothing outside the store is removed,
        whatever the name or any symlink planted in the store.
        """
        ...

    async def clean_expired_files(self, force: bool = False) -> int:
        """Run one retention pass now (``force`` ignores age); returns files deleted."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters for monitoring: puts, bytes, offsets, disk ratio; cheap to call."""
        ...


class ReplicaError(ValueError):
    """Replicated commitlog bytes a store refuses to apply; the message says where and why."""


@runtime_checkable
class ReplicaLog(Protocol):
    """What replication needs from a store beyond ``MessageStore``: its commitlog as raw bytes.

    A store that implements it can be a master (``read_commitlog``) and a slave
    (``append_replicated``) of RocketMQ's HA stream, byte for byte. Event-loop only, like
    puts; neither call blocks on the disk beyond page faults.
    """

    @property
    def max_phy_offset(self) -> int:
        """End of the whole records in the log (what a slave reports to its master)."""
        ...

    def read_commitlog(self, offset: int, max_bytes: int) -> bytes | None:
        """Up to ``max_bytes`` written bytes from ``offset``, never crossing a segment end.

        ``b""``: nothing written there yet. None: ``offset`` is below the oldest segment
        (deleted) or otherwise not servable. The bytes may not be flushed yet.
        """
        ...

    def append_replicated(self, offset: int, data: bytes | memoryview) -> int:
        """Apply a master's bytes that start at ``offset``; returns where the next chunk must start.

        ``offset`` must continue the log exactly (an empty log starts at a segment
        boundary). A chunk may cut a record: the store keeps the unfinished tail until the
        rest arrives, so ``max_phy_offset`` only ever covers whole records. Every record is
        checked (magic, size, physical offset, body CRC) before any byte is written;
        ``ReplicaError`` leaves the log as it was. Dispatch (queues, index) follows as for
        a put.
        """
        ...

    @property
    def replica_next_offset(self) -> int:
        """Where the next replicated chunk must start: ``max_phy_offset`` plus the unfinished tail."""
        ...

    def reset_replica(self) -> None:
        """Forget the unfinished tail (a new HA connection restarts at ``max_phy_offset``)."""
        ...

    @property
    def confirm_offset(self) -> int:
        """Controller mode (RocketMQ 5's confirmOffset): consume queues and index, hence every reader,
        hold only records below it; ``max_phy_offset`` while nothing holds dispatch back."""
        ...

    def set_confirm_offset(self, offset: int | None) -> None:
        """Hold dispatch back at ``offset`` (a record boundary; clamped to the log), or None to dispatch
        to the end (classic mode, a master whose SyncStateSet is itself or that does
        not wait for every member). Idempotent; a raised offset dispatches at once. Persisted in the
        checkpoint (``confirmPhyOffset``); a store started in controller mode begins from the stored
        value clamped into its log, so a restart never shows more than was confirmed. While held
        back, appends still reach the attached dispatchers as empty batches (replication ships on
        them)."""
        ...

    def topic_queues(self) -> dict[str, int]:
        """Topics that have queues in this store, with their highest queue id + 1: a replica promoted
        before its metadata sync copied a topic's config can still serve it."""
        ...

    async def become_writable(self) -> None:
        """A replica that becomes master continues from its own end: wait until dispatch has caught
        up and take the queues' offsets from what was replicated."""
        ...

    async def truncate_log(self, offset: int) -> int:
        """Cut the log back to ``offset`` (a record boundary), with the queues and index built from it;
        returns the bytes removed. A replica that follows a new master drops the tail that master
        lacks (the last common epoch boundary) before following. ``ReplicaError`` if it cannot."""
        ...


@hookspec(firstresult=True)
def rmq_storage_make_store(kernel: Kernel, config: Any) -> MessageStore | None:
    """Build the broker's message store.

    Called once, when the broker role starts. ``config`` is the ``[broker]`` table,
    ``rmq.roles.BrokerConfig``: RocketMQ's store settings live in it, as they do in
    ``broker.conf`` (store path, segment sizes, flush type, retention...); ``Any`` here
    because the kernel knows no role's keys. Return a
    store not yet entered, or None to let the next plugin decide. Bundled impls are
    ``trylast`` so an installed third-party store selected in TOML wins.

    Arguments:
    - ``kernel``: the running ``Kernel`` (config, hook relay, services).
    - ``config``: the ``[broker]`` table (``rmq.roles.BrokerConfig``).
    """
