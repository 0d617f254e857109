"""A slave's metadata sync (RocketMQ's SlaveSynchronize): the master's tables, every 10 s.

Replication copies the commitlog; what a slave needs besides to serve consumers is
the master's metadata: topic configs, consumer offsets, delay offsets and subscription
groups, fetched with the admin codes RocketMQ uses (GET_ALL_TOPIC_CONFIG,
GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET, GET_ALL_SUBSCRIPTIONGROUP_CONFIG). First
run after 3 s, then every 10 s; skipped while the master is unknown. Topics and groups
are replaced when the master's dataVersion differs; offsets are merged (the master's
keys win, the slave's own stay); delay offsets are kept verbatim in
``config/delayOffset.json`` for the day this slave becomes a master. A master that
answers badly costs one log line per state change, never the slave.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import anyio

from rmq.kernel import ConfigFile, DataVersion, RemotingConfig
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.jsonbody import loads

if TYPE_CHECKING:
    from rmq.kernel import Kernel, RemotingClient
    from rmq.plugins.broker.controller import BrokerController

log = logging.getLogger("rmq.broker")

FIRST_DELAY = 3.0
PERIOD = 10.0
TIMEOUT = 3.0
MAX_BODY = 64 * 1024 * 1024


class SlaveSyncError(Exception):
    pass


def adopt_versioned(mgr: Any, doc: dict[str, Any], where: str) -> bool:
    """A slave takes its master's table (topics or subscription groups) when the master's dataVersion
    differs: replace it whole, persist it. The table's own ``_parse`` validates every entry."""
    version = DataVersion.from_json(doc.get("dataVersion"))
    if version.to_json() == mgr.data_version.to_json():
        return False
    table = mgr._parse(doc, where)
    mgr.table.clear()
    mgr.table.update(table)
    mgr.data_version = version
    mgr.persist()
    return True


class SlaveSynchronizer:
    def __init__(self, kernel: Kernel, broker: BrokerController) -> None:
        self.broker = broker
        self.rounds = 0
        self.failed = ""
        self.last_ok_ms = 0
        self._kick = anyio.Event()
        client = kernel.hook.rmq_remoting_make_client(
            kernel=kernel, config=RemotingConfig(name="slave-sync", connect_timeout=TIMEOUT), handler=None
        )
        if client is None:
            raise RuntimeError("no rmq.remoting plugin built a client for the slave's metadata sync")
        self.client: RemotingClient = client

    def kick(self) -> None:
        """Sync soon (the master changed)."""
        self._kick.set()

    async def run(self) -> None:
        with anyio.move_on_after(FIRST_DELAY):
            await self._kick.wait()
        while True:
            self._kick = anyio.Event()
            await self.sync_once()
            with anyio.move_on_after(PERIOD):
                await self._kick.wait()

    async def sync_once(self) -> bool:
        b = self.broker
        master = b.master_addr
        if not master or master == b.broker_addr:
            return False
        try:
            await self._sync(master)
        except Exception as e:  # the master is down, or answered nonsense: next round retries
            problem = f"{type(e).__name__}: {e}"
            if problem != self.failed:
                log.warning("metadata sync from master %s failed: %s", master, problem)
            self.failed = problem
            return False
        if self.failed:
            log.info("metadata sync from master %s works again", master)
        self.failed = ""
        self.rounds += 1
        return True

    async def _fetch(self, master: str, code: int) -> bytes:
        resp = await self.client.invoke(master, RemotingCommand.request(code, {}), TIMEOUT)
        if resp.code != ResponseCode.SUCCESS:
            raise SlaveSyncError(f"{RequestCode(code).name}: code {resp.code} {resp.remark or ''}".strip())
        body = resp.body or b""
        if len(body) > MAX_BODY:
            raise SlaveSyncError(f"{RequestCode(code).name}: {len(body)} bytes is more than any table")
        return body

    def _doc(self, body: bytes, what: str) -> dict[str, Any]:
        try:
            doc = loads(body)  # fastjson's dialect: integer keys unquoted
        except ValueError as e:
            raise SlaveSyncError(f"{what}: not JSON ({e})") from None
        if not isinstance(doc, dict):
            raise SlaveSyncError(f"{what}: not a JSON object")
        return doc

    async def _sync(self, master: str) -> None:
        b = self.broker
        where = f"master {master}"
        topics = self._doc(await self._fetch(master, RequestCode.GET_ALL_TOPIC_CONFIG), "topic config")
        if adopt_versioned(b.topics, topics, where):
            b.topics.on_change()
            log.info("topic config synced from %s: %d topics", where, len(b.topics.table))
        offsets = self._doc(await self._fetch(master, RequestCode.GET_ALL_CONSUMER_OFFSET), "consumer offsets")
        b.offsets.adopt(offsets, where)
        try:
            delay = await self._fetch(master, RequestCode.GET_ALL_DELAY_OFFSET)
        except SlaveSyncError as e:  # a master without the schedule plugin has none
            log.debug("delay offsets not synced: %s", e)
        else:
            self._doc(delay, "delay offsets")
            f = ConfigFile(b.config_dir / "delayOffset.json")
            await anyio.to_thread.run_sync(f.write, delay.decode())
        groups = self._doc(
            await self._fetch(master, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), "subscription groups"
        )
        if adopt_versioned(b.groups, groups, where):
            log.info("subscription groups synced from %s: %d groups", where, len(b.groups.table))
        self.last_ok_ms = time.time_ns() // 1_000_000

    async def aclose(self) -> None:
        await self.client.aclose()
