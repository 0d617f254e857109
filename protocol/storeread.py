"""The read half of ``MessageStore`` that both bundled stores share (``recordwriter`` is the write half).

A store keeps its queues its own way (unit files mapped from disk, lists in RAM), but what a pull
or a lookup answers does not depend on that: which status an offset outside a queue gets, how many
units one pull may scan, which bytes at a commitlog offset count as a message, which records a key
lookup may return. That is decided here, once, so the two stores cannot drift apart. Pure: the store
hands over its buffers; nothing here opens or reads a file.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rmq.kernel.model import GetResult, GetStatus
from rmq.protocol.common import MAGIC_MESSAGE, Prop
from rmq.protocol.record import HEAD2, MIN_RECORD, store_timestamp_at
from rmq.protocol.recordwriter import RecordError, record_properties

if TYPE_CHECKING:
    from rmq.kernel import MessageFilter

__all__ = ["UNIT_BYTES", "StoreReads", "message_size_at", "pull_scan_units", "record_has_key"]

#: bytes of one consume-queue unit (commitlog offset, size, tags code): RocketMQ's measure of a pull's scan
UNIT_BYTES = 20


def pull_scan_units(max_count: int) -> int:
    """How many queue units one pull may look at: RocketMQ scans at least 16,000 bytes of units (800),
    more when more messages were asked for, so a selective filter still finds matches further on."""
    return -(-max(16000, max_count * UNIT_BYTES) // UNIT_BYTES)


def message_size_at(buf: Any, pos: int, end: int) -> int:
    """TOTALSIZE of the message record that starts at ``pos`` and ends by ``end``; 0 when none does
    (a blank filler, a position inside a record, a record cut short)."""
    if pos < 0 or pos + MIN_RECORD > end:
        return 0
    size, magic = HEAD2.unpack_from(buf, pos)
    if magic != MAGIC_MESSAGE or size < MIN_RECORD or pos + size > end:
        return 0
    return size  # type: ignore[no-any-return]


def record_has_key(rec: Any, topic: str, key: str, begin: int, end: int) -> bool:
    """Whether a stored record is one a lookup by ``key`` (its UNIQ_KEY or one of its KEYS) in ``topic``,
    stored between ``begin`` and ``end`` (ms, inclusive), must return: an index only narrows the search."""
    try:
        rtopic, props = record_properties(rec, 0)
    except RecordError:
        return False
    if rtopic != topic or not begin <= store_timestamp_at(rec, 0) <= end:
        return False
    return props.get(Prop.UNIQ_KEY) == key or key in props.get(Prop.KEYS, "").split(" ")


class StoreReads:
    """Mixin: the reads of ``MessageStore`` that do not depend on how queues are kept.

    The store supplies ``config`` (``maxMsgsNumBatch``) and four primitives:

    * ``_queue_bounds(topic, queue_id)``: ``(queue, min offset, max offset)``, None for no such queue;
    * ``_pull(queue, offset, max_count, message_filter, max_bytes, mn, mx)``: the pull of an offset
      known to lie in ``[mn, mx)``;
    * ``_span(commit_log_offset)``: ``(buffer, position, end of written bytes)`` holding that offset,
      None when the store has no such bytes (or knows them to be corrupt);
    * ``_key_candidates(topic, key, max_num, begin, end)``: commitlog offsets that may hold the key.

    ``n_get``, ``n_found`` and ``n_hit`` count pulls, messages returned and pulls that found some.
    """

    config: Any
    n_get = n_found = n_hit = 0

    def _queue_bounds(self, topic: str, queue_id: int) -> tuple[Any, int, int] | None:
        raise NotImplementedError

    def _pull(self, queue: Any, offset: int, max_count: int, message_filter: MessageFilter | None,
              max_bytes: int, mn: int, mx: int) -> GetResult:
        raise NotImplementedError

    def _span(self, commit_log_offset: int) -> tuple[Any, int, int] | None:
        raise NotImplementedError

    def _key_candidates(self, topic: str, key: str, max_num: int, begin: int, end: int) -> Iterable[int]:
        raise NotImplementedError

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
        """See ``MessageStore.get_messages``: an offset outside the queue gets RocketMQ's status and the
        offset to go on from; one inside is the store's ``_pull``."""
        bounds = self._bounded(topic, queue_id, offset)
        if isinstance(bounds, GetResult):
            return bounds
        queue, offset, mn, mx = bounds
        result = self._pull(queue, offset, max_count, message_filter, max_bytes, mn, mx)
        self._found(len(result.messages))
        return result

    def _bounded(self, topic: str, queue_id: int, offset: int) -> GetResult | tuple[Any, int, int, int]:
        """A pull's queue, offset and the queue's bounds; for an offset outside them, the answer."""
        self.n_get += 1
        bounds = self._queue_bounds(topic, queue_id)
        if bounds is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        queue, mn, mx = bounds
        if mx == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, mn, mx)
        if offset < mn:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, mn, mn, mx)
        if offset == mx:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, mn, mx)
        if offset > mx:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, mn if mn == 0 else mx, mn, mx)
        return queue, offset, mn, mx

    def _found(self, count: int) -> None:
        if count:
            self.n_found += count
            self.n_hit += 1

    def get_max_offset(self, topic: str, queue_id: int) -> int:
        bounds = self._queue_bounds(topic, queue_id)
        return bounds[2] if bounds is not None else 0

    def get_min_offset(self, topic: str, queue_id: int) -> int:
        bounds = self._queue_bounds(topic, queue_id)
        return bounds[1] if bounds is not None else 0

    def get_store_time(self, topic: str, queue_id: int, offset: int) -> int:
        raise NotImplementedError

    def get_earliest_store_time(self, topic: str, queue_id: int) -> int:
        return self.get_store_time(topic, queue_id, self.get_min_offset(topic, queue_id))

    def look_message_by_offset(self, commit_log_offset: int) -> bytes | None:
        """The whole message record at ``commit_log_offset``; None for anything else there."""
        span = self._span(commit_log_offset)
        if span is None:
            return None
        buf, pos, end = span
        size = message_size_at(buf, pos, end)
        return bytes(buf[pos : pos + size]) if size else None

    def query_by_key(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[bytes]:
        """Up to ``max_num`` (capped by maxMsgsNumBatch) records of ``topic`` with ``key``, stored in
        ``[begin, end]``: the store's candidates (newest first), each checked against its record; answered
        in commitlog order, oldest first, as RocketMQ's store sorts the offsets it found."""
        max_num = min(max_num, self.config.maxMsgsNumBatch)
        found: list[tuple[int, bytes]] = []
        if max_num <= 0:
            return []
        for phys in self._key_candidates(topic, key, max_num, begin, end):
            rec = self.look_message_by_offset(phys)
            if rec is not None and record_has_key(rec, topic, key, begin, end):
                found.append((phys, rec))
                if len(found) >= max_num:
                    break
        return [rec for _, rec in sorted(found, key=lambda f: f[0])]
