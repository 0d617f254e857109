"""rmqd on each frame decoder: the compiled one (the default where it was built) and the pure one (RMQ_PURE=1).

Each daemon names its codec on the start line and serves a send and a pull of the same message,
so ``make test`` runs a real broker on both paths (the differential suite in
tests/protocol/test_fastframe_diff.py compares the decoders themselves).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from rmq.client import Message, Producer, PullConsumer
from rmq.client.message import PullStatus
from rmq.protocol import frame, storepath
from rmq.testing.daemon import RmqdProcess


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "pure"])
def test_rmqd_names_its_codec_and_serves_send_and_pull(rmqd_factory: Callable[..., RmqdProcess], pure: bool) -> None:
    proc = rmqd_factory(env={"RMQ_PURE": "1"} if pure else {"RMQ_PURE": ""}, proxy=False)
    ready = [ln for ln in proc.log_lines() if " ready: " in ln]
    assert ready
    if pure:
        assert "; codec pure (RMQ_PURE set); store pure (RMQ_PURE set)" in ready[0]
    else:  # the daemon's choice is this process's choice (the same install, RMQ_PURE unset)
        expected = frame.CODEC if frame.CODEC != "pure (RMQ_PURE set)" else "compiled"
        store = storepath.STORE if storepath.STORE != "pure (RMQ_PURE set)" else "compiled"
        assert f"; codec {expected}; store {store}" in ready[0], ready[0]
    body = "h\u00e9llo \u4e2d\u6587 \U0001f600".encode() * 50

    async def round_trip() -> None:
        with anyio.fail_after(120):
            async with Producer("codec_paths_producer", namesrv_addr=proc.namesrv_addr) as producer:
                sent = await producer.send(Message("CodecPaths", body, tags="t\u00e9", keys="k1 k2",
                                                   properties={"p\u00e9": "v\u00e9"}))
            async with PullConsumer("codec_paths_reader", proc.namesrv_addr) as consumer:
                got = await consumer.pull(sent.queue, sent.queue_offset, 32)
            assert got.status is PullStatus.FOUND
            msg = got.messages[0]
            assert (msg.body, msg.tags, msg.keys, msg.properties.get("p\u00e9")) == (body, "t\u00e9", "k1 k2", "v\u00e9")
            assert msg.msg_id == sent.msg_id

    anyio.run(round_trip)
