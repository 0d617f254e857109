"""Producer message preparation, batching, headers (no sockets: the producer is never started)."""

from __future__ import annotations

import zlib

import pytest

from rmq.client import Message, MessageTooLargeError, Producer
from rmq.client.errors import BrokerError
from rmq.client.message import LocalTransactionState, SendStatus
from rmq.client.producer import _Prepared, parse_send_response
from rmq.client.transaction import end_transaction_header
from rmq.kernel.model import MessageQueue
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import SysFlag, decode_properties
from rmq.protocol.message import decode_batch, offset_msg_id


def test_prepare_sets_uniq_key_and_compresses_large_bodies():
    p = Producer("G", "127.0.0.1:1")
    small = p._prepare(Message("T", b"x" * 10, tags="A"))
    props = decode_properties(small.properties)
    assert props["TAGS"] == "A" and len(props["UNIQ_KEY"]) == 32 and small.uniq_id == props["UNIQ_KEY"]
    assert small.sys_flag == 0
    big = p._prepare(Message("T", b"y" * 5000))
    assert big.sys_flag & SysFlag.COMPRESSED and zlib.decompress(big.body) == b"y" * 5000
    msg = Message("T", b"z")
    assert "UNIQ_KEY" not in msg.properties  # the user's message is not modified
    tx = p._prepare(Message("T", b"x", delay_level=2), transactional=True)
    tprops = decode_properties(tx.properties)
    assert tprops["TRAN_MSG"] == "true" and tprops["PGROUP"] == "G" and "DELAY" not in tprops
    assert tx.sys_flag & SysFlag.TX_MASK == SysFlag.TX_PREPARED


def test_prepare_rejects_oversized():
    p = Producer("G", "127.0.0.1:1", max_message_size=100, compress_over=10**9)
    with pytest.raises(MessageTooLargeError):
        p._prepare(Message("T", b"x" * 101))


def test_v2_header_letters():
    p = Producer("G", "127.0.0.1:1")
    prep = p._prepare(Message("T", b"body", tags="A"))
    ext = p._ext(prep, MessageQueue("T", "broker-a", 3))
    assert ext["a"] == "G" and ext["b"] == "T" and ext["c"] == "TBW102" and ext["d"] == "4"
    assert ext["e"] == "3" and ext["f"] == "0" and ext["n"] == "broker-a" and ext["m"] == "false"
    assert int(ext["g"]) > 1_600_000_000_000
    assert all(isinstance(v, str) for v in ext.values())


def test_batch_split_under_limit():
    p = Producer("G", "127.0.0.1:1", batch_max_bytes=4096)
    msgs = [Message("T", b"x" * 1000, keys=f"k{i}") for i in range(10)]
    chunks = p._batch_chunks(msgs)
    assert len(chunks) >= 3
    total = 0
    for ids, body in chunks:
        assert len(body) <= 4096
        members = decode_batch(body)
        assert len(members) == len(ids)
        assert [decode_properties(pr)["UNIQ_KEY"] for _, _, pr in members] == ids
        total += len(members)
    assert total == 10


@pytest.mark.parametrize(
    "msgs",
    [
        [],
        [Message("T", b"x"), Message("U", b"x")],
        [Message("T", b"x", delay_level=1)],
        [Message("%RETRY%g", b"x")],
    ],
)
def test_batch_rejects(msgs):
    with pytest.raises(ValueError):
        Producer("G", "127.0.0.1:1")._batch_chunks(msgs)


def test_parse_send_response_statuses():
    mq = MessageQueue("T", "b", 1)
    req = RemotingCommand.request(310)
    ok = parse_send_response(req.response(0, ext={"msgId": "AB", "queueId": "1", "queueOffset": "9"}), mq, "U")
    assert ok.status is SendStatus.SEND_OK and ok.queue_offset == 9 and ok.msg_id == "U" and ok.offset_msg_id == "AB"
    slow = parse_send_response(req.response(10, ext={"msgId": "AB", "queueId": "2", "queueOffset": "9"}), mq, "U")
    assert slow.status is SendStatus.FLUSH_DISK_TIMEOUT and slow.queue.queue_id == 2
    with pytest.raises(BrokerError, match="MESSAGE_ILLEGAL"):
        parse_send_response(req.response(13, remark="too big"), mq, "U")


def test_end_transaction_header():
    oid = offset_msg_id(b"\x7f\x00\x00\x01\x00\x00\x27\x1f", 123456)
    h = end_transaction_header(
        "G", LocalTransactionState.COMMIT_MESSAGE, queue_offset=5, offset_msg_id=oid, msg_id="U",
        transaction_id=None, from_check=False,
    )
    assert h == {
        "producerGroup": "G",
        "tranStateTableOffset": "5",
        "commitLogOffset": "123456",
        "commitOrRollback": "8",
        "fromTransactionCheck": "false",
        "msgId": "U",
        "transactionId": "U",
    }
    rb = end_transaction_header("G", LocalTransactionState.ROLLBACK_MESSAGE, queue_offset=5, offset_msg_id=oid,
                                msg_id="U", transaction_id="X", from_check=True)
    assert rb["commitOrRollback"] == "12" and rb["fromTransactionCheck"] == "true" and rb["transactionId"] == "X"
    unk = end_transaction_header("G", LocalTransactionState.UNKNOW, queue_offset=5, offset_msg_id=oid, msg_id="U",
                                 transaction_id=None, from_check=False)
    assert unk["commitOrRollback"] == "0"


def test_prepared_is_reused_across_attempts():
    assert _Prepared("T", b"", 0, 0, "", "U").code == 310
