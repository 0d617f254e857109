"""ProcessQueue, offset stores, pull request/response mapping (no sockets)."""

from __future__ import annotations

import json

import anyio
import pytest

from rmq.client.consumer import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND, pull_ext, pull_result
from rmq.client.instance import parse_offset_table
from rmq.client.message import PullStatus
from rmq.client.offsets import LocalFileOffsetStore
from rmq.client.process_queue import ProcessQueue
from rmq.client.subscription import Subscription
from rmq.kernel.model import MessageQueue
from rmq.protocol.command import RemotingCommand
from rmq.protocol.message import MessageExt, encode_message


def _msgs(*offsets: int) -> list[MessageExt]:
    return [MessageExt(topic="T", body=b"x" * 10, queue_offset=o) for o in offsets]


def test_process_queue_commit_offset_is_lowest_in_flight():
    pq = ProcessQueue()
    assert pq.commit_offset() == -1
    a = _msgs(0, 1, 2, 3)
    pq.put(a)
    assert pq.count == 4 and pq.msg_size == 40 and pq.span() == 3
    assert pq.remove([a[1], a[2]]) == 0  # offset 0 still in flight
    assert pq.remove([a[0]]) == 3
    assert pq.remove([a[3]]) == 4  # empty: one past the highest held
    assert pq.msg_size == 0 and pq.span() == 0
    pq.put(_msgs(3))  # a duplicate of an old offset is ignored for max
    assert pq.max_offset == 3


def test_process_queue_take_in_order():
    pq = ProcessQueue()
    m = _msgs(5, 6, 7)
    pq.put(m)
    assert [x.queue_offset for x in pq.take(2)] == [5, 6]
    pq.remove(m[:2])
    assert [x.queue_offset for x in pq.take(2)] == [7]
    pq.remove(m[2:])
    assert pq.take(2) == [] and not pq.data_ready.is_set()


@pytest.mark.anyio
async def test_local_offset_store_round_trip(tmp_path):
    mq = MessageQueue("T", "b", 1)
    store = LocalFileOffsetStore(tmp_path, "1.2.3.4@DEFAULT", "G")
    store.update(mq, 42)
    await store.persist([mq])
    store.update(mq, 43)
    await store.persist([mq])
    doc = json.loads(store.path.read_text())
    assert doc["offsets"] == [{"topic": "T", "brokerName": "b", "queueId": 1, "offset": 43}]
    assert store.path.with_suffix(".json.bak").exists()
    again = LocalFileOffsetStore(tmp_path, "1.2.3.4@DEFAULT", "G")
    await again.load()
    assert await again.read_stored(mq) == 43
    store.path.write_text("{not json")  # corrupt main file: the backup is used
    third = LocalFileOffsetStore(tmp_path, "1.2.3.4@DEFAULT", "G")
    await third.load()
    assert await third.read_stored(mq) == 42


def test_offset_store_increase_only():
    store = LocalFileOffsetStore("/nonexistent", "k", "G")
    mq = MessageQueue("T", "b", 0)
    store.update(mq, 10, increase_only=True)
    store.update(mq, 5, increase_only=True)
    assert store.get(mq) == 10
    store.update(mq, 5)
    assert store.get(mq) == 5


def test_pull_ext_flags():
    mq = MessageQueue("T", "b", 2)
    sub = Subscription.parse("T", "A || B")
    ext = pull_ext("G", mq, 10, 32, sub, suspend_ms=15000, commit_offset=7)
    assert int(ext["sysFlag"]) == PULL_SUSPEND | PULL_COMMIT_OFFSET | PULL_SUBSCRIPTION
    assert ext["subscription"] == "A || B" and ext["expressionType"] == "TAG"
    assert ext["queueId"] == "2" and ext["queueOffset"] == "10" and ext["commitOffset"] == "7"
    bare = pull_ext("G", mq, 0, 32, None)
    assert bare["sysFlag"] == "0" and "subscription" not in bare
    assert all(isinstance(v, str) for v in ext.values())


def _resp(code: int, body: bytes = b"", **ext: str) -> RemotingCommand:
    return RemotingCommand.request(0).response(code, ext={k: str(v) for k, v in ext.items()}, body=body)


def test_pull_result_decodes_and_refilters_by_exact_tag():
    body = b"".join(
        encode_message("T", f"m{i}".encode(), queue_offset=i, properties={"TAGS": tag}, store_host="127.0.0.1:10911")
        for i, tag in enumerate(["A", "B", "C", "A"])
    )
    res = pull_result(_resp(0, body, nextBeginOffset=4, minOffset=0, maxOffset=9), frozenset({"A"}))
    assert res.status is PullStatus.FOUND and res.next_begin_offset == 4 and res.max_offset == 9
    assert [m.body for m in res.messages] == [b"m0", b"m3"]
    assert len(pull_result(_resp(0, body, nextBeginOffset=4), None).messages) == 4


@pytest.mark.parametrize(
    ("code", "status"),
    [(19, PullStatus.NO_NEW_MSG), (20, PullStatus.NO_MATCHED_MSG), (21, PullStatus.OFFSET_ILLEGAL)],
)
def test_pull_result_status_mapping(code, status):
    assert pull_result(_resp(code, nextBeginOffset=3), None).status is status


def test_pull_result_error_code():
    from rmq.client.errors import BrokerError

    with pytest.raises(BrokerError, match="SUBSCRIPTION_NOT_EXIST"):
        pull_result(_resp(24), None)


def test_parse_fastjson_offset_table():
    body = b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:5,{"topic":"t","queueId":1,"brokerName":"b"}:7}}'
    assert parse_offset_table(body) == {MessageQueue("t", "b", 0): 5, MessageQueue("t", "b", 1): 7}


def test_anyio_event_after_take():  # the worker waits on data_ready; put() wakes it
    async def main() -> None:
        pq = ProcessQueue()
        assert pq.take(1) == []
        got = []

        async def worker() -> None:
            await pq.data_ready.wait()
            got.extend(pq.take(1))

        async with anyio.create_task_group() as tg:
            tg.start_soon(worker)
            await anyio.sleep(0.01)
            pq.put(_msgs(1))
        assert got and got[0].queue_offset == 1

    anyio.run(main)
