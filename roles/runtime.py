"""A role's settings changed at run time (UPDATE_BROKER_CONFIG, UPDATE_NAMESRV_CONFIG), kept past a restart.

RocketMQ rewrites broker.properties / namesrv.properties after such a change; rmqd writes the changed
keys into the role's table of the TOML file it started from (those lines only). Both roles do it the
same way, so it is written once here, beside their tables.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from rmq.kernel import ConfigFile
from rmq.protocol.rocketmq_conf import edit_text

__all__ = ["persist_changes"]

log = logging.getLogger("rmq.roles")


async def persist_changes(
    table: str, changes: Mapping[str, Any], config_file: str | None, request: str, peer: str
) -> str | None:
    """Log ``changes`` (already applied by ``request`` from ``peer``) and write them into
    ``config_file``'s ``[table]`` (none: nothing to write).

    Returns None, or the remark for a change applied but not written (the edit would not read back
    safely, or the file cannot be written): the running role keeps the change either way."""
    log.info("%s from %s: %s", request, peer, ", ".join(f"{k}={v}" for k, v in changes.items()))
    if not changes or not config_file:
        return None
    try:
        await anyio.to_thread.run_sync(ConfigFile(Path(config_file)).edit,
                                       partial(edit_text, config_file, table=table, changes=dict(changes)))
    except (ValueError, OSError) as e:
        log.warning("%s applied but not persisted: %s", request, e)
        return f"applied, not persisted: {e}"
    return None
