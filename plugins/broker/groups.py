"""Subscription group configs (RocketMQ's SubscriptionGroupManager) and ``subscriptionGroup.json``.

A group's config decides whether it may consume, whether broadcasting is allowed,
its retry queue count and max retries before the DLQ. Unknown groups are created
with defaults on first use when autoCreateSubscriptionGroup is on, until the table holds
``max_auto_created`` groups (``[plugin.processors.broker] max_auto_created_groups``,
10,000 by default; RocketMQ has no such bound): then the request is answered
SUBSCRIPTION_GROUP_NOT_EXIST with a remark naming the limit.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from rmq.kernel import ConfigFile, DataVersion, dumps
from rmq.plugins.broker.tables import ConfigTable, entries
from rmq.plugins.broker.topics import MAX_AUTO_CREATED, AutoCreateLimitError
from rmq.protocol.codes import ResponseCode
from rmq.protocol.names import printable, require_group

if TYPE_CHECKING:
    from rmq.roles import BrokerConfig

log = logging.getLogger("rmq.broker")

SYSTEM_GROUPS = ("TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP", "CID_RMQ_SYS_TRANS")


@attrs.define(slots=True)
class SubscriptionGroupConfig:
    groupName: str
    consumeEnable: bool = True
    consumeFromMinEnable: bool = True
    consumeBroadcastEnable: bool = True
    retryQueueNums: int = 1
    retryMaxTimes: int = 16
    brokerId: int = 0
    whichBrokerWhenConsumeSlowly: int = 1
    notifyConsumerIdsChangedEnable: bool = True
    consumeMessageOrderly: bool = False  # RocketMQ 5: FIFO delivery for POP / gRPC consumers of the group

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SubscriptionGroupConfig:
        names = {f.name for f in attrs.fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names}
        if not kwargs.get("groupName"):
            raise ValueError("subscription group config without groupName")
        for f in attrs.fields(cls):
            if f.name in kwargs and f.type in ("int", int):
                kwargs[f.name] = int(kwargs[f.name])
            elif f.name in kwargs and f.type in ("bool", bool):
                v = kwargs[f.name]
                kwargs[f.name] = v if isinstance(v, bool) else str(v).lower() in ("true", "1")
        return cls(**kwargs)


class SubscriptionGroupManager(ConfigTable[SubscriptionGroupConfig]):
    kind = "subscription group"

    def __init__(self, config: BrokerConfig, config_dir: Path) -> None:
        super().__init__(config, ConfigFile(config_dir / "subscriptionGroup.json"))
        self.max_auto_created = MAX_AUTO_CREATED  # the broker plugin sets max_auto_created_groups

    def load(self) -> None:
        for g in SYSTEM_GROUPS:
            self.table[g] = SubscriptionGroupConfig(g)
        doc = self.file.load()
        if isinstance(doc, dict):
            self.table.update(self._parse(doc, "subscriptionGroup.json"))
            self.data_version = DataVersion.from_json(doc.get("dataVersion"))
        log.info("subscription groups loaded: %d", len(self.table))

    @staticmethod
    def _parse(doc: dict[str, Any], where: str) -> dict[str, SubscriptionGroupConfig]:
        out: dict[str, SubscriptionGroupConfig] = {}
        for name, d in entries(doc, "subscriptionGroupTable", where).items():
            try:
                out[require_group(name)] = SubscriptionGroupConfig.from_json(d)
            except (ValueError, TypeError, AttributeError) as e:
                log.warning("%s: skipping %s: %s", where, name, e)
        return out

    def encode(self, pretty: bool = False) -> str:
        return dumps(
            {
                "dataVersion": self.data_version.to_json(),
                "subscriptionGroupTable": {n: g.to_json() for n, g in self.table.items()},
            },
            pretty=pretty,
        )

    def _changed(self) -> None:
        self.data_version.next(time.time_ns() // 1_000_000)
        self.dirty = True

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, created with defaults when auto-creation is on (else None);
        ``AutoCreateLimitError`` when the table is at its auto-creation bound."""
        sg = self.table.get(group)
        if sg is None and (self.config.autoCreateSubscriptionGroup or group in SYSTEM_GROUPS):
            require_group(group)
            if len(self.table) >= self.max_auto_created and group not in SYSTEM_GROUPS:
                raise AutoCreateLimitError(
                    f"subscription group [{printable(group, 128)}] does not exist and is not auto-created: the "
                    f"broker holds {len(self.table)} groups, the limit for auto-creation (max_auto_created_groups"
                    f" = {self.max_auto_created}); create it as an admin or delete unused groups",
                    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                )
            sg = self.table[group] = SubscriptionGroupConfig(group)
            log.info("subscription group auto-created: %s", group)
            self._changed()
        return sg

    def update(self, sg: SubscriptionGroupConfig) -> None:
        self._put(require_group(sg.groupName), sg)
