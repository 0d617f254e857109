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

Topic changes reach a slave within a second (issue #27): every ``PROBE_PERIOD`` (200 ms) the
slave asks for one page of one topic with RocketMQ 5.3's split-metadata GET_ALL_TOPIC_CONFIG
(``topicSeq`` 0, ``maxTopicNum`` 1: a few hundred bytes whatever the table's size) and fetches
the whole table only when the dataVersion in that answer differs from its own. The slave polls
rather than the master pushing: no new frame on the HA link or the remoting port, and a master
that does not page (4.x answers without ``totalTopicNum``) is left to the periodic sync. The
same tick refreshes the topics the slave holds queues for but has no config of (see
``TopicConfigManager.hold_stored``), so it serves and registers them while its master is gone.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

import anyio

from rmq.kernel import ConfigFile, DataVersion
from rmq.plugins.broker.registrar import outbound_client
from rmq.protocol.codes import RequestCode, ResponseCode
from rmq.protocol.command import RemotingCommand
from rmq.protocol.jsonbody import loads

if TYPE_CHECKING:
    from rmq.kernel import Kernel
    from rmq.plugins.broker.controller import BrokerController

log = logging.getLogger("rmq.broker")

FIRST_DELAY = 3.0
PERIOD = 10.0  # RocketMQ's SlaveSynchronize period; [plugin.processors.broker] slave_sync_period_ms
PROBE_PERIOD = 0.2
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
    def __init__(self, kernel: Kernel, broker: BrokerController, period: float = PERIOD,
                 probe: float = PROBE_PERIOD) -> None:
        self.broker = broker
        self.period = period
        self.probe = probe  # 0: no topic probe
        self.rounds = 0
        self.topic_rounds = 0  # full topic-table fetches the probe asked for
        self._no_split = ""  # a master that answered the probe without paging: periodic sync only
        self.failed = ""
        self.last_ok_ms = 0
        self._kick = anyio.Event()
        self.client = outbound_client(kernel, "slave-sync", TIMEOUT, "the slave's metadata sync")

    def kick(self) -> None:
        """Sync soon (the master changed)."""
        self._kick.set()

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch)
            with anyio.move_on_after(FIRST_DELAY):
                await self._kick.wait()
            while True:
                self._kick = anyio.Event()
                await self.sync_once()
                with anyio.move_on_after(self.period):
                    await self._kick.wait()

    async def _watch(self) -> None:
        """While a slave, every probe period (200 ms): refresh the held topics, probe the master's."""
        b = self.broker
        while True:
            await anyio.sleep(self.probe or PROBE_PERIOD)
            if not b.is_slave:
                continue
            b.topics.hold_stored(b.store.topic_queues())  # type: ignore[attr-defined]
            master = b.master_addr
            if not self.probe or not master or master == b.broker_addr or master == self._no_split:
                continue
            try:
                await self.probe_topics(master)
            except Exception as e:  # the master is down or odd: the periodic sync says so, once
                log.debug("topic probe of master %s failed: %s: %s", master, type(e).__name__, e)

    async def probe_topics(self, master: str) -> bool:
        """One page of one topic from ``master``: fetch the whole table when its dataVersion differs
        from ours. Returns whether the table was fetched."""
        b = self.broker
        cmd = RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG, {
            "topicSeq": "0", "maxTopicNum": "1", "dataVersion": json.dumps(b.topics.data_version.to_json())})
        resp = await self.client.invoke(master, cmd, TIMEOUT)
        if resp.code != ResponseCode.SUCCESS:
            return False
        if "totalTopicNum" not in (resp.ext or {}):
            self._no_split = master
            log.info("master %s does not page its topic table: topic changes arrive with the periodic sync "
                     "(every %g s)", master, self.period)
            return False
        page = self._doc(resp.body or b"", "topic config page")
        if DataVersion.from_json(page.get("dataVersion")).to_json() == b.topics.data_version.to_json():
            return False
        await self._sync_topics(master)
        self.topic_rounds += 1
        return True

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
        await self._sync_topics(master)
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

    async def _sync_topics(self, master: str) -> None:
        b = self.broker
        where = f"master {master}"
        topics = self._doc(await self._fetch(master, RequestCode.GET_ALL_TOPIC_CONFIG), "topic config")
        before = set(b.topics.table)
        if adopt_versioned(b.topics, topics, where):
            gone = sorted(before - b.topics.table.keys() - b.topics.system_topics)
            if gone:  # deleted on the master: drop their queues too, or the slave would serve them as held
                b.store.delete_topics(gone)
            b.topics.hold_stored(b.store.topic_queues())  # type: ignore[attr-defined]
            b.topics.on_change()
            log.info("topic config synced from %s: %d topics%s", where, len(b.topics.table),
                     f" ({len(gone)} deleted)" if gone else "")

    async def aclose(self) -> None:
        await self.client.aclose()
