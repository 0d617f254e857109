"""Classic master/slave (no controller), SYNC_MASTER, with the slave cut from the master while a
producer writes: what RocketMQ 4.9 promises there. A SYNC_MASTER put waits for the slave; with the
link silent it answers FLUSH_SLAVE_TIMEOUT once ``syncFlushTimeout`` passes, and SLAVE_NOT_AVAILABLE
once the master dropped the silent slave (``haHousekeepingInterval``): the message is stored on the
master but not SEND_OK (the producer decides). No failover exists, so nothing SEND_OK may be lost, and
after the heal the slave catches up and holds every SEND_OK message.

(The Java broker cannot be put under the nemesis here: its sockets connect from 127.0.0.1, which the
nemesis never filters; the statuses are RocketMQ 4.9's SYNC_MASTER contract: HAService.isSlaveOK and
the syncFlushTimeout wait.)"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rmq.testing import faults as F
from rmq.testing.chaos import RunCheck as Check
from rmq.testing.chaos import report
from rmq.testing.clients import PY
from rmq.testing.daemon import Daemons, RmqdProcess, eventually
from rmq.testing.nemesis import Nemesis, node_addrs

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

HOUSEKEEPING_MS = 6000  # RocketMQ: 20 s; shortened so SLAVE_NOT_AVAILABLE comes within the test


def test_sync_master_slave_cut(tmp_path: Path) -> None:
    ns_host, m_host, s_host, c_host = node_addrs(4)
    conf = {**F.BROKER_BASE, "haHousekeepingInterval": HOUSEKEEPING_MS, "syncFlushTimeout": 2000}
    with Daemons() as d, Nemesis() as n:
        ns = d.start(RmqdProcess(tmp_path / "ns", broker=False, host=ns_host))
        conf["namesrvAddr"] = ns.namesrv_addr
        master = d.start(RmqdProcess(tmp_path / "m", namesrv=False, host=m_host,
                                     broker_conf={**conf, "brokerRole": "SYNC_MASTER"}))
        slave = d.start(RmqdProcess(tmp_path / "s", namesrv=False, host=s_host,
                                    broker_conf={**conf, "brokerRole": "SLAVE", "brokerId": 1}))
        eventually(lambda: int((F.runtime(master) or {}).get("haConnectionCount", 0)) >= 1, 30, "the slave connected")
        c = F.Cluster("classic", tmp_path, ns, [master, slave], all=d)
        F.create_topic(c, "ClassicTopic")
        p = F.python_worker(PY, {"mode": "produce", "namesrv": ns.namesrv_addr, "topic": "ClassicTopic",
                                 "group": "classic-producer", "interval_ms": 20, "local_host": c_host,
                                 "send_timeout": 10}, tmp_path, "producer")
        try:
            p.wait(lambda: len(p.events("send")) >= 30, 60, "30 sends")
            t_cut = time.time()
            n.cut(m_host, s_host)

            def statuses() -> set[str]:
                return {s.get("status", "error") for s in p.events("send") if s["t0"] >= t_cut}
            p.wait(lambda: {"FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"} <= statuses(), 60,
                   "FLUSH_SLAVE_TIMEOUT, then SLAVE_NOT_AVAILABLE")
            during = [s for s in p.events("send") if s["t0"] >= t_cut]
            n.heal()
            t_heal = time.time()
            p.wait(lambda: any(s.get("ok") and s["t0"] >= t_heal for s in p.events("send")), 60, "SEND_OK again")
            recover = min(s["t"] for s in p.events("send") if s.get("ok") and s["t0"] >= t_heal) - t_heal
        finally:
            p.stop()
        sends = p.events("send")
        acked = {s["id"] for s in sends if s.get("ok")}
        not_ok_stored = {s["id"] for s in sends if s.get("status") in ("FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")}
        on_master = set(F.pull_all(c, "ClassicTopic"))
        eventually(lambda: int((F.runtime(slave) or {}).get("commitLogMaxOffset", -1))
                   >= int((F.runtime(master) or {}).get("commitLogMaxOffset", 0)), 60, "the slave caught up")
        on_slave = set(F.pull_all(F.Cluster("classic", tmp_path, ns, [slave]), "ClassicTopic"))
        res = Check("classic_sync_master_slave_cut", acked=len(acked), failed_sends=len(sends) - len(acked),
                    lost=len(acked - on_master), recover_s=round(recover, 2))
        res.unacked_delivered = len(on_master - acked)
        first = {st: min((s["t0"] for s in during if s.get("status") == st), default=0) - t_cut
                 for st in ("FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")}
        res.figures.update(flush_slave_timeout_from_s=round(first["FLUSH_SLAVE_TIMEOUT"], 1),
                           slave_not_available_from_s=round(first["SLAVE_NOT_AVAILABLE"], 1),
                           statuses_during="/".join(sorted({s.get("status", "error") for s in during})),
                           missing_on_slave=len(acked - on_slave))
        report(res)
        assert not acked - on_master, f"SEND_OK but not on the master: {sorted(acked - on_master)[:5]}"
        assert not acked - on_slave, f"SEND_OK but not on the slave after the heal: {sorted(acked - on_slave)[:5]}"
        assert not_ok_stored <= on_master, "a FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE send is stored on the master"
        # SLAVE_NOT_AVAILABLE only once the silent slave was dropped: FLUSH_SLAVE_TIMEOUT comes first
        assert first["FLUSH_SLAVE_TIMEOUT"] < first["SLAVE_NOT_AVAILABLE"], first
