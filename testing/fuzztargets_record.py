"""The mutation driver's target for the compiled record decoder (``_fastframe.decode_records``, the client's
pull-body decoder); registered in :mod:`rmq.testing.fuzztargets` beside the others."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from typing import Any

from rmq.protocol.common import SysFlag, decode_properties
from rmq.protocol.message import (
    MessageDecodeError,
    MessageExt,
    _decode_one,
    _host_str,
    decode_messages_pure,
    encode_message,
)
from rmq.testing.fuzzdrive import Breach, Target

__all__ = ["DecodeRecords"]

_SLOTS = MessageExt.__slots__


def _outcome(fn: Callable[[bytes, bool], list[MessageExt]], body: bytes, decompress: bool) -> Any:
    try:
        msgs = fn(body, decompress)
    except MessageDecodeError as exc:
        return str(exc)
    return [tuple((type(getattr(m, s)), getattr(m, s)) for s in _SLOTS) for m in msgs]


class DecodeRecords(Target):
    """_fastframe.decode_records: pull bodies of records (IPv4/IPv6 hosts, properties, COMPRESSED bodies),
    valid and not; byte 0 says whether to decompress. Each record's raw properties go through
    _fastframe.decode_props too (what ``MessageExt.properties`` parses them with)."""

    name = "decode_records"
    weight = 2
    tokens = (b"\x00\x00\x00\x5b", b"\xda\xa3\x20\xa7", b"TAGS\x01", b"\x02KEYS\x01", b"\xff", b"\xc3\xa9", b"\x78\x9c")

    def __init__(self, codec: Any) -> None:
        codec.configure_records(MessageExt, _decode_one, _host_str)
        self.decode = codec.decode_records
        self.props = codec.decode_props

    @staticmethod
    def _record(rng: random.Random, mutate: Callable[[bytes], bytes] | None = None) -> bytes:
        body = rng.randbytes(rng.getrandbits(5))
        sys_flag = rng.choice((0, 0, SysFlag.COMPRESSED, SysFlag.MULTI_TAGS, 0x300 | SysFlag.COMPRESSED, 0x100 | 1))
        if sys_flag & SysFlag.COMPRESSED and rng.getrandbits(1):
            body = zlib.compress(body)
        topic = rng.choice(("TopicA", "T\u00e9", "%RETRY%g", ""))
        props = rng.choice(("", "TAGS\x01a\x02KEYS\x01k1 k2\x02", "UNIQ_KEY\x01" + "AB" * 16 + "\x02"))
        if mutate is not None:
            body, props = mutate(body), mutate(props.encode()).decode("utf-8", "replace")
        hosts = ("10.0.0.1:5000", "127.0.0.1:10911", ("::1", 9876), ("fe80::1", 1))
        return encode_message(topic, body, queue_id=rng.getrandbits(4), flag=rng.getrandbits(32) - (1 << 31),
                              properties=props, sys_flag=sys_flag, queue_offset=rng.getrandbits(40),
                              commit_log_offset=rng.getrandbits(63), born_timestamp=rng.getrandbits(41),
                              born_host=rng.choice(hosts), store_host=rng.choice(hosts),
                              reconsume_times=rng.getrandbits(4), prepared_transaction_offset=rng.getrandbits(8))

    def seeds(self) -> list[bytes]:
        rng = random.Random(30)
        return [bytes([k & 1]) + b"".join(self._record(rng) for _ in range(1 + k % 4)) for k in range(8)]

    def reframe(self, rng: random.Random, mutate: Callable[[bytes], bytes]) -> bytes:
        """One to three records whose body and properties are mutated, framed with true lengths."""
        return bytes([rng.getrandbits(1)]) + b"".join(self._record(rng, mutate) for _ in range(1 + rng.getrandbits(1)))

    def run(self, data: bytes) -> Any:
        decompress, body = bool(data[0] & 1) if data else True, data[1:]
        try:
            msgs = self.decode(body, decompress)
        except MessageDecodeError:
            return "error"
        if type(msgs) is not list or sum(m.store_size for m in msgs) != len(body):
            raise Breach(f"decode_records returned {len(msgs)} messages not covering {len(body)} bytes")
        if any(type(m) is not MessageExt or type(m.body) is not bytes or type(m.topic) is not str for m in msgs):
            raise Breach(f"decode_records returned something other than MessageExt: {msgs!r:.300}")
        props = [self.props(m._props_raw) for m in msgs if m._props_raw is not None]
        return min(len(msgs), 3), bool(msgs) and msgs[-1].sys_flag & 0x31, min(len(props[-1]), 3) if props else -1

    def check(self, data: bytes) -> None:
        decompress, body = bool(data[0] & 1) if data else True, data[1:]
        want, got = _outcome(decode_messages_pure, body, decompress), _outcome(self.decode, body, decompress)
        if want != got:
            raise Breach(f"compiled decode_records {got!r:.300} != pure {want!r:.300}")
        for raw in (body, *(m._props_raw for m in decode_messages_pure(body, False) if m._props_raw)) if isinstance(
                want, list) else (body,):
            if list(self.props(raw).items()) != list(decode_properties(raw).items()):
                raise Breach(f"decode_props({raw!r:.200}) != decode_properties")
