"""The ``[namesrv]`` table: RocketMQ's NameServer settings (``namesrv.conf``'s keys and defaults).

Declared to the kernel by the entry point ``rmq.sections: namesrv``; read by the ``namesrv``
processors plugin, and by a broker in the same process (which registers with this name server
when ``namesrvAddr`` is empty).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import attrs

from rmq.kernel import rmq_home


@attrs.define
class NamesrvConfig:
    """``[namesrv]``; the role runs the ``namesrv`` processors plugin (the kernel's default for a role)."""

    embedded: ClassVar[dict[str, Any]] = {"listenHost": "127.0.0.1"}  # rmqd's no-config default: loopback only

    listenPort: int = 9876
    listenHost: str = "0.0.0.0"
    maxConnections: int = 4096  # accepted connections held at once; more are closed at accept
    allowRemoteAdmin: bool = False  # state-changing admin requests from non-loopback peers
    scanNotActiveBrokerInterval: int = 10_000  # ms
    brokerChannelExpiredTime: int = 120_000  # ms
    orderMessageEnable: bool = False
    enableControllerInNamesrv: bool = False  # run the controller role in this process ([controller] or defaults)
    kvConfigPath: str = ""  # "" = <broker storePathRootDir, else $RMQ_HOME or ./rmq-store>/namesrv/kvConfig.json

    def kv_config_path(self, home: Path | None = None) -> Path:
        """``kvConfigPath``, else ``namesrv/kvConfig.json`` under ``home`` (rmqd passes its broker's store
        root), $RMQ_HOME or ./rmq-store: RocketMQ's ``~/namesrv`` would be outside any store."""
        return Path(self.kvConfigPath).expanduser() if self.kvConfigPath else (home or rmq_home()) / "namesrv" / "kvConfig.json"

    def implies(self) -> tuple[str, ...]:
        """RocketMQ's enableControllerInNamesrv: the controller role runs here too (its table, else defaults)."""
        return ("controller",) if self.enableControllerInNamesrv else ()
