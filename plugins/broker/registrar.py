"""Registration with every name server (RocketMQ's BrokerOuterAPI): periodic, on change, on exit.

The broker registers to each address of ``namesrvAddr`` ("a;b") concurrently,
every registerNameServerPeriod and soon after any topic change (changes are
coalesced: a burst of auto-created topics costs one round), and unregisters at
shutdown. One log line per state change of each name server, not per round.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from rmq.kernel import RemotingConfig, source_host
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand

if TYPE_CHECKING:
    from rmq.kernel import Kernel, RemotingClient
    from rmq.roles import BrokerConfig

log = logging.getLogger("rmq.broker")


def split_namesrv_addrs(value: str) -> list[str]:
    return [a.strip() for a in value.replace(",", ";").split(";") if a.strip()]


def outbound_client(kernel: Any, name: str, connect_timeout: float, purpose: str) -> RemotingClient:
    """A remoting client for requests the broker makes itself (it serves none: no handler), its
    connections from the broker's own ``listenHost`` when that is one address; RuntimeError naming
    ``purpose`` when no rmq.remoting plugin makes one."""
    broker_cfg = getattr(getattr(kernel, "config", None), "broker", None)
    local = source_host(str(getattr(broker_cfg, "listenHost", "") or ""))
    client = kernel.hook.rmq_remoting_make_client(
        kernel=kernel, config=RemotingConfig(name=name, connect_timeout=connect_timeout, local_host=local),
        handler=None)
    if client is None:
        raise RuntimeError(f"no rmq.remoting plugin built a client for {purpose}")
    return client  # type: ignore[no-any-return]


class NamesrvRegistrar:
    def __init__(
        self,
        kernel: Kernel,
        config: BrokerConfig,
        addrs: list[str],
        identity: Callable[[], dict[str, str]],
        body: Callable[[], bytes],
        on_registered: Callable[[dict[str, str]], None] | None = None,
        enabled: Callable[[], bool] | None = None,
    ) -> None:
        self.kernel = kernel
        self.config = config
        self.addrs = addrs
        self._identity = identity
        self._body = body
        self._on_registered = on_registered
        self._enabled = enabled or (lambda: True)
        self._wake = anyio.Event()
        self._state: dict[str, bool] = {}
        self._lock = anyio.Lock()
        self.rounds = 0
        self.client = outbound_client(kernel, "broker-outer", 3.0, "namesrv registration")

    def trigger(self) -> None:
        """Ask for a registration round soon (coalesced)."""
        self._wake.set()

    def registered_everywhere(self) -> bool:
        return bool(self.addrs) and all(self._state.get(a) is True for a in self.addrs)

    async def run(self) -> None:
        """Periodic rounds; an early round whenever ``trigger`` was called. While some name server has
        not taken the registration (the start-up round timed out on a loaded host, a name server is
        down), rounds come after 1, 2, 4 … s up to the period: clients must not wait a whole period
        for a route."""
        period = self.config.registerNameServerPeriod / 1000
        retry = 1.0
        while True:
            if self.registered_everywhere() or not self._enabled():
                wait, retry = period, 1.0
            else:
                wait, retry = min(retry, period), min(retry * 2, period)
            with anyio.move_on_after(wait):
                await self._wake.wait()
            self._wake = anyio.Event()
            await self.register_all()

    async def register_all(self) -> None:
        if not self.addrs or not self._enabled():
            return
        async with self._lock:
            ext = self._identity()
            body = self._body()
            # enableActingMaster (RocketMQ 5's header; we never act as master): its presence tells a 5.x
            # name server this broker is new enough that, as the lowest live id, it may publish topics
            ext = {**ext, "compressed": "false", "bodyCrc32": str(zlib.crc32(body) & 0x7FFFFFFF),
                   "enableActingMaster": "false"}
            async with anyio.create_task_group() as tg:
                for addr in self.addrs:
                    tg.start_soon(self._register_one, addr, ext, body)
            self.rounds += 1

    async def _register_one(self, addr: str, ext: dict[str, str], body: bytes) -> None:
        timeout = self.config.registerBrokerTimeoutMills / 1000
        try:
            cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, dict(ext), body)
            resp = await self.client.invoke(addr, cmd, timeout)
            ok = resp.code == ResponseCode.SUCCESS
            err = f"code {resp.code} {resp.remark or ''}"
            if ok and self._on_registered is not None:
                self._on_registered(dict(resp.ext or {}))
        except Exception as e:  # any transport failure: log and retry next round
            ok, err = False, f"{type(e).__name__}: {e}"
        prev = self._state.get(addr)
        self._state[addr] = ok
        if ok and prev is not True:
            log.info("registered to namesrv %s as %s %s", addr, ext.get("brokerName"), ext.get("brokerAddr"))
        elif not ok and prev is not False:
            log.warning("register to namesrv %s failed: %s (retrying every %d ms)", addr, err,
                        self.config.registerNameServerPeriod)

    async def unregister_all(self) -> None:
        ident = self._identity()
        ext = {k: ident[k] for k in ("brokerName", "brokerAddr", "clusterName", "brokerId")}

        async def one(addr: str) -> None:
            try:
                resp = await self.client.invoke(
                    addr, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, dict(ext)), 3.0
                )
                if resp.code == ResponseCode.SUCCESS:
                    log.info("unregistered from namesrv %s", addr)
            except Exception as e:
                log.info("unregister from namesrv %s failed: %s", addr, e)

        with anyio.move_on_after(5):
            async with anyio.create_task_group() as tg:
                for addr in self.addrs:
                    tg.start_soon(one, addr)

    async def aclose(self) -> None:
        await self.client.aclose()


def register_body(topic_table: dict[str, dict[str, Any]], data_version: dict[str, int]) -> bytes:
    """REGISTER_BROKER body (uncompressed form), keys sorted as fastjson writes them."""
    doc = {
        "filterServerList": [],
        "topicConfigSerializeWrapper": {"dataVersion": data_version, "topicConfigTable": topic_table},
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
