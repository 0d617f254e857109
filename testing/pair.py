"""Two brokers of broker-a in controller mode under one controller, and a name server: the smallest
group in which a broker is promoted and demoted (``electMaster``), for tests of what survives a role
change (role services, POP state, parked delay and timer messages).

Both brokers start as RocketMQ's do in controller mode (fenced, then the controller names the master),
so neither is a master "at start"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import attrs

from rmq.testing.daemon import RmqdProcess, eventually, free_port
from rmq.testing.faults import runtime

PAIR_BROKER_CONF: dict[str, Any] = {
    "enableControllerMode": True, "mappedFileSizeCommitLog": 1024 * 1024, "brokerHeartbeatInterval": 500,
    "syncBrokerMetadataPeriod": 1000, "checkSyncStateSetPeriod": 1000}


@attrs.define
class ControlledPair:
    """The processes of a pair; ``stop()`` ends them all (the test's ``finally``)."""

    ns: RmqdProcess
    controller_addr: str
    brokers: list[RmqdProcess]
    procs: list[RmqdProcess]

    def roles(self) -> tuple[RmqdProcess, RmqdProcess] | None:
        """(master, slave) once one broker is master with the other in its SyncStateSet, else None."""
        tables = [runtime(b) or {} for b in self.brokers]
        roles = [t.get("controllerRole") for t in tables]
        if sorted(map(str, roles)) != ["MASTER", "SLAVE"]:
            return None
        i = roles.index("MASTER")
        if len(json.loads(tables[i].get("syncStateSet") or "[]")) != 2:
            return None
        return self.brokers[i], self.brokers[1 - i]

    def settled(self, timeout: float = 60, master: RmqdProcess | None = None) -> tuple[RmqdProcess, RmqdProcess]:
        """Wait for :meth:`roles` (with ``master`` the master, when given)."""
        what = "a master with its slave in the sync state set" + (f" ({master.broker_addr})" if master else "")
        return eventually(lambda: (r := self.roles()) and (master is None or r[0] is master) and r,  # type: ignore[no-any-return]
                          timeout, what, interval=0.2)

    def elect(self, broker: RmqdProcess, timeout: float = 60) -> tuple[RmqdProcess, RmqdProcess]:
        """electMaster ``broker`` (through the name server's admin client, as an operator would) and wait
        until it serves as master; returns (it, the other broker). The other may still be rejoining as a
        slave: :meth:`settled` waits for that (seconds that a test with a deadline of its own may not have)."""
        from rmq.client import Admin

        target = int((runtime(broker) or {})["controllerBrokerId"])

        async def elect() -> dict[str, str]:
            async with Admin(self.ns.namesrv_addr) as admin:
                return await admin.elect_master(self.controller_addr, "DefaultCluster", "broker-a", target)

        answer = anyio.run(elect)
        assert answer["masterBrokerId"] == str(target), answer
        eventually(lambda: (runtime(broker) or {}).get("controllerRole") == "MASTER", timeout,
                   f"{broker.broker_addr} serving as master", interval=0.1)
        return broker, next(b for b in self.brokers if b is not broker)

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.stop()


def start_pair(workdir: Path, broker_conf: dict[str, Any] | None = None, extra: dict[str, Any] | None = None,
               settle: bool = True) -> ControlledPair:
    """Start the pair under ``workdir`` (``broker_conf`` over :data:`PAIR_BROKER_CONF`; ``extra``: more
    tables of the brokers' rmqd.toml, e.g. plugin options); with ``settle``, return once it is settled."""
    pair = ControlledPair(RmqdProcess(workdir / "ns", broker=False), f"127.0.0.1:{free_port()}", [], [])
    try:
        pair.procs.append(pair.ns.start())
        ctl = RmqdProcess(workdir / "c0", namesrv=False, broker=False, extra={"controller": {
            "controllerDLegerPeers": f"n0-{pair.controller_addr}", "controllerDLegerSelfId": "n0",
            "listenHost": "127.0.0.1", "scanNotActiveBrokerInterval": 1000,
            "controllerStorePath": str(workdir / "c0" / "ctl")}})
        pair.procs.append(ctl.start())
        conf = {**PAIR_BROKER_CONF, "namesrvAddr": pair.ns.namesrv_addr, "controllerAddr": pair.controller_addr,
                **(broker_conf or {})}
        for i in range(2):
            b = RmqdProcess(workdir / f"b{i}", namesrv=False, broker_conf=conf, extra=extra)
            pair.procs.append(b.start())
            pair.brokers.append(b)
        if settle:
            pair.settled()
    except BaseException:
        pair.stop()
        raise
    return pair
