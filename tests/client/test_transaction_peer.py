"""TransactionProducer's client half against a protocol peer (the broker side of transactions is
not built yet): a small in-process server speaking the 4.x wire answers routes, heartbeats and
sends, records END_TRANSACTION, and asks CHECK_TRANSACTION_STATE like a broker would."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from rmq.client import LocalTransactionState, Message, TransactionProducer
from rmq.kernel.hookspecs.remoting import RemotingConfig
from rmq.kernel.kernel import Kernel
from rmq.protocol.codes import RequestCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.common import decode_properties, encode_properties
from rmq.protocol.message import encode_message, host_bytes, offset_msg_id


class Peer:
    """Name server + broker in one listener, recording what the client sent."""

    def __init__(self) -> None:
        self.sends: list[dict[str, str]] = []
        self.ends: list[dict[str, str]] = []
        self.heartbeats: list[tuple[Any, dict[str, Any]]] = []
        self.got_end = anyio.Event()
        self.port = 0

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def handle(self, conn: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            route = {
                "brokerDatas": [{"brokerAddrs": {"0": self.addr}, "brokerName": "peer", "cluster": "C"}],
                "queueDatas": [{"brokerName": "peer", "perm": 6, "readQueueNums": 2, "writeQueueNums": 2}],
            }
            return cmd.response(body=json.dumps(route).encode())
        if cmd.code == RequestCode.HEART_BEAT:
            self.heartbeats.append((conn, json.loads(cmd.body)))
            return cmd.response()
        if cmd.code == RequestCode.SEND_MESSAGE_V2:
            self.sends.append(dict(cmd.ext))
            n = len(self.sends)
            oid = offset_msg_id(host_bytes("127.0.0.1", self.port), 1000 * n)
            return cmd.response(ext={"msgId": oid, "queueId": cmd.ext["e"], "queueOffset": str(n - 1)})
        if cmd.code == RequestCode.END_TRANSACTION:
            self.ends.append(dict(cmd.ext))
            self.got_end.set()
            return None
        return cmd.response()


async def _serve(tg: Any, peer: Peer) -> Any:
    kernel = Kernel.for_client({"allocation": [], "filters": []})
    server = kernel.hook.rmq_remoting_make_server(
        kernel=kernel, config=RemotingConfig(host="127.0.0.1", port=0, name="peer"), handler=peer.handle
    )
    peer.port = await tg.start(server.serve)
    return server


async def _wait_end(peer: Peer, n: int) -> None:
    while len(peer.ends) < n:
        peer.got_end = anyio.Event()
        await peer.got_end.wait()


@pytest.mark.anyio
async def test_half_message_commit_rollback_unknown():
    peer = Peer()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            server = await _serve(tg, peer)
            async with TransactionProducer("TXG", peer.addr, checker=lambda m: True) as producer:
                res = await producer.send_in_transaction(Message("TxT", b"order-1"), lambda m, arg: arg, True)
                assert res.state is LocalTransactionState.COMMIT_MESSAGE
                half = peer.sends[0]
                props = decode_properties(half["i"])
                assert props["TRAN_MSG"] == "true" and props["PGROUP"] == "TXG"
                assert int(half["f"]) & 0x4  # sysFlag: prepared
                await _wait_end(peer, 1)
                end = peer.ends[0]
                assert end["commitOrRollback"] == "8" and end["fromTransactionCheck"] == "false"
                assert end["producerGroup"] == "TXG" and end["msgId"] == res.msg_id == props["UNIQ_KEY"]
                assert end["commitLogOffset"] == "1000" and end["tranStateTableOffset"] == "0"

                async def rollback(msg: Message, arg: Any) -> LocalTransactionState:
                    return LocalTransactionState.ROLLBACK_MESSAGE

                res = await producer.send_in_transaction(Message("TxT", b"order-2"), rollback)
                await _wait_end(peer, 2)
                assert peer.ends[1]["commitOrRollback"] == "12" and res.state.name == "ROLLBACK_MESSAGE"

                def boom(msg: Message, arg: Any) -> None:
                    raise RuntimeError("db down")

                with pytest.raises(RuntimeError, match="db down"):
                    await producer.send_in_transaction(Message("TxT", b"order-3"), boom)
                await _wait_end(peer, 3)
                assert peer.ends[2]["commitOrRollback"] == "0"  # UNKNOW: the broker will check back
            await server.aclose()
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_answers_check_transaction_state():
    peer = Peer()
    asked: list[str] = []

    def checker(msg: Any) -> LocalTransactionState:
        asked.append(msg.body.decode())
        return LocalTransactionState.COMMIT_MESSAGE if msg.body == b"paid" else LocalTransactionState.ROLLBACK_MESSAGE

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            server = await _serve(tg, peer)
            async with TransactionProducer("TXG", peer.addr, checker=checker) as producer:
                await producer.fetch_publish_queues("TxT")  # learns the broker, heartbeats it
                with anyio.fail_after(5):
                    while not peer.heartbeats:  # noqa: ASYNC110 - polling a test peer
                        await anyio.sleep(0.02)
                conn, hb = peer.heartbeats[-1]
                assert {"groupName": "TXG"} in hb["producerDataSet"]
                for i, body in enumerate([b"paid", b"unpaid"]):
                    half = encode_message(
                        "TxT", body, queue_offset=i, commit_log_offset=5000 + i,
                        properties=encode_properties({"UNIQ_KEY": f"U{i}", "PGROUP": "TXG", "TRAN_MSG": "true"}),
                        store_host=f"127.0.0.1:{peer.port}",
                    )
                    ext = {"tranStateTableOffset": str(i), "commitLogOffset": str(5000 + i), "msgId": f"U{i}",
                           "transactionId": f"U{i}",
                           "offsetMsgId": offset_msg_id(host_bytes("127.0.0.1", peer.port), 5000 + i)}
                    await conn.send_oneway(RemotingCommand.request(RequestCode.CHECK_TRANSACTION_STATE, ext,
                                                                   half, oneway=True))
                await _wait_end(peer, 2)
            by_id = {e["msgId"]: e for e in peer.ends}
            assert by_id["U0"]["commitOrRollback"] == "8" and by_id["U0"]["fromTransactionCheck"] == "true"
            assert by_id["U0"]["commitLogOffset"] == "5000" and by_id["U0"]["tranStateTableOffset"] == "0"
            assert by_id["U1"]["commitOrRollback"] == "12"
            assert sorted(asked) == ["paid", "unpaid"]
            await server.aclose()
            tg.cancel_scope.cancel()
