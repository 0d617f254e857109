"""RocketMQ 4.9's HA keys with their 4.9 meaning: ``slaveTimeout`` (how long a SYNC_MASTER put waits for
its slave before FLUSH_SLAVE_TIMEOUT; syncFlushTimeout is the disk's) and ``haSlaveFallbehindMax`` (5.x's
haMaxGapNotInSync: a put leaving the slave further behind is SLAVE_NOT_AVAILABLE at once, isSlaveOK)."""

from __future__ import annotations

from typing import Any

from rmq.protocol.codes import ResponseCode
from rmq.testing.daemon import eventually

from .conftest import send
from .test_ha import caught_up, slave_count


def test_slave_timeout_and_ha_slave_fallbehind_max_as_in_4_9(ha: Any) -> None:
    # syncFlushTimeout far beyond the client's 5 s call: only slaveTimeout can answer a stalled slave
    master = ha.master(slaveTimeout=500, syncFlushTimeout=30_000, haSlaveFallbehindMax=4096)
    proxy = ha.proxy(master.broker_port + 1)
    slave = ha.slave(haMasterAddress=proxy.addr)
    eventually(lambda: slave_count(master) == 1, 20, "slave connected through the proxy")
    eventually(lambda: send(master.broker_addr, "Keys", b"x").code == 0, 20, "a send acknowledged by the slave")
    r = send(master.broker_addr, "Keys", b"y" * 8192)  # the slave would be > 4096 bytes behind: not OK
    assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE and r.ext["msgId"], (r.code, r.remark)
    eventually(lambda: caught_up(master, slave), 20, "slave caught up")
    assert send(master.broker_addr, "Keys", b"small").code == 0
    proxy.paused.set()
    r = send(master.broker_addr, "Keys", b"stalled")
    assert r.code == ResponseCode.FLUSH_SLAVE_TIMEOUT and r.ext["msgId"], (r.code, r.remark)
    proxy.paused.clear()
    eventually(lambda: caught_up(master, slave), 20, "slave caught up after the stall")
