"""rmqd connects from the address it listens on (``rmq.kernel.net.source_host``): a node on 127.0.0.12
reaches its name server, controllers and master from 127.0.0.12, so the nemesis's per-address rules
cut exactly one node's links. Checked on the kernel's own table of connections (/proc/net/tcp)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmq.protocol.codes import RequestCode
from rmq.testing.daemon import Daemons, RmqdProcess, call, eventually
from rmq.testing.nemesis import node_addrs, tcp_peers

pytestmark = pytest.mark.integration


def test_broker_registers_from_its_own_address(tmp_path: Path) -> None:
    ns_host, b_host = node_addrs(2)
    with Daemons() as d:
        ns = d.start(RmqdProcess(tmp_path / "ns", broker=False, host=ns_host))
        b = d.start(RmqdProcess(tmp_path / "b", namesrv=False, host=b_host,
                                broker_conf={"namesrvAddr": ns.namesrv_addr}))
        eventually(lambda: b_host in tcp_peers(ns_host, ns.namesrv_port), 30, "the broker's connection from its host")
        assert "127.0.0.1" not in tcp_peers(ns_host, ns.namesrv_port)  # the only peer is the broker
        r = call(ns.namesrv_addr, RequestCode.GET_BROKER_CLUSTER_INFO, timeout=5)
        addrs = json.loads(r.body)["brokerAddrTable"]["broker-a"]["brokerAddrs"]
        assert addrs == {"0": b.broker_addr}


@pytest.mark.slow
def test_controller_group_links_come_from_each_nodes_address(tmp_path: Path) -> None:
    hosts = node_addrs(6)  # name server, 3 controllers, 2 brokers
    with Daemons() as d:
        g = d.controller_group(tmp_path, 2, controllers=3, raft_password="nemesis-source", hosts=hosts)
        master, slave = g.settled(90)
        ctl_hosts = hosts[1:4]

        def raft_links() -> set[tuple[str, str]]:  # (listener host, peer host) of each Raft connection
            return {(c.host, p) for c, a in zip(g.controllers, g.controller_addrs, strict=True)
                    for p in tcp_peers(c.host, int(a.rpartition(":")[2]) + 1)}  # controller.raftPortOffset = 1

        # three controllers: each pair is linked (pysyncobj: the node with the smaller address dials)
        eventually(lambda: len({frozenset(link) for link in raft_links()}) == 3, 30, "the three Raft links")
        assert all(p in ctl_hosts and p != h for h, p in raft_links()), raft_links()
        # the brokers' heartbeats reach the controllers (at least the leader) from each broker's host
        eventually(lambda: {b.host for b in g.brokers} <= set().union(
            *(tcp_peers(c.host, int(a.rpartition(":")[2])) for c, a in zip(g.controllers, g.controller_addrs,
                                                                           strict=True))), 30,
                   "broker -> controller links from the brokers' hosts")
        # the slave's HA link to the master comes from the slave's host
        eventually(lambda: slave.host in tcp_peers(master.host, master.ha_port), 30, "HA link from the slave's host")
        assert tcp_peers(master.host, master.ha_port) == {slave.host}


def _client_sees_its_address(tmp_path: Path, kind: str) -> None:
    """A ``kind`` producer run under the source-address shim (rmq.testing.bindshim) reaches rmqd from its
    own address: the broker's connection table, the producer connection list and the born host of every
    message it stored name that address, never 127.0.0.1."""
    from rmq.testing import clients
    from rmq.testing import faults as F

    ns_host, b_host, client_host = node_addrs(3)
    topic, group = f"Shim{kind}", f"shim-{kind}-pg"
    with Daemons() as d:
        ns = d.start(RmqdProcess(tmp_path / "ns", broker=False, host=ns_host))
        b = d.start(RmqdProcess(tmp_path / "b", namesrv=False, host=b_host,
                                broker_conf={"namesrvAddr": ns.namesrv_addr, "autoCreateTopicEnable": True}))
        w = clients.worker(kind, {"mode": "produce", "namesrv": ns.namesrv_addr, "topic": topic, "group": group,
                                  "interval_ms": 50, "kind": "normal"}, client_host, tmp_path, f"shim-{kind}")
        try:
            w.wait(lambda: len([s for s in w.events("send") if s.get("ok")]) >= 5, 120, "5 acknowledged sends")
            peers = tcp_peers(b_host, b.broker_port)
            # the group is known once the client's heartbeat came (Java: on its timer, after the first sends)
            r = eventually(lambda: (x := call(b.broker_addr, RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                              {"producerGroup": group}, timeout=5)).code == 0 and x, 30,
                           f"the producer group {group} registered")
        finally:
            w.stop()
        assert client_host in peers and "127.0.0.1" not in peers, peers
        conns = json.loads(r.body)["connectionSet"]
        assert {c["clientAddr"].rpartition(":")[0] for c in conns} == {client_host}, conns
        born = {m.born_host.rpartition(":")[0] for m in F.pull_messages(b, topic)}
        assert born == {client_host}, born


def test_cpp_client_connects_from_its_shim_address(tmp_path: Path) -> None:
    _client_sees_its_address(tmp_path, "cpp")


@pytest.mark.chaos  # the chaos tier has the Java build (make chaos depends on java-deps)
def test_java_client_connects_from_its_shim_address(tmp_path: Path) -> None:
    from rmq.testing.java import require

    require()
    _client_sees_its_address(tmp_path, "java")
